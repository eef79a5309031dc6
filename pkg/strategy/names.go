package strategy

import (
	"slices"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// SystemNamespaces exist from the apiserver's first start and cannot be
// deleted.
var SystemNamespaces = []string{kplanev1.NamespaceDefault, kplanev1.NamespaceSystem, kplanev1.NamespaceNodeLease}

// IsSystemNamespace reports whether name is one of SystemNamespaces.
func IsSystemNamespace(name string) bool {
	return slices.Contains(SystemNamespaces, name)
}
