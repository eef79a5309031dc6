// Package user is the identity a request carries once it is authenticated:
// authentication (package authn) puts an Info in the request's context,
// authorization (package authz), admission and the audit log read it.
// The gRPC and REST front ends share it, so a request is the same user
// whichever way it came in.
package user

import (
	"context"
	"strings"
)

// Well-known names, as Kubernetes spells them, so RBAC rules written for
// Kubernetes mean the same here.
const (
	// Anonymous is the user of a request without credentials when
	// anonymous access is on.
	Anonymous = "system:anonymous"
	// AllUnauthenticated is the group of anonymous requests.
	AllUnauthenticated = "system:unauthenticated"
	// AllAuthenticated is the group every authenticated user is in.
	AllAuthenticated = "system:authenticated"
	// SystemPrivilegedGroup (system:masters) is allowed everything.
	SystemPrivilegedGroup = "system:masters"
	// NodesGroup holds every node agent's identity.
	NodesGroup = "system:nodes"
	// NodeUserPrefix prefixes a node agent's user name: system:node:<node>.
	NodeUserPrefix = "system:node:"
	// ServiceAccountUserPrefix prefixes a ServiceAccount's user name:
	// system:serviceaccount:<namespace>:<name>.
	ServiceAccountUserPrefix = "system:serviceaccount:"
	// AllServiceAccountsGroup holds every ServiceAccount.
	AllServiceAccountsGroup = "system:serviceaccounts"
	// ServiceAccountGroupPrefix prefixes the per-namespace group of
	// ServiceAccounts: system:serviceaccounts:<namespace>.
	ServiceAccountGroupPrefix = "system:serviceaccounts:"
)

// Info is an authenticated identity.
type Info struct {
	// Name is the user name (a certificate's CN, a token file's user, or
	// system:serviceaccount:<ns>:<name>).
	Name string
	// UID is the user's unique id when the authenticator knows one (a
	// ServiceAccount's uid).
	UID string
	// Groups the user is in; AllAuthenticated is always among them for
	// an authenticated user.
	Groups []string
	// Extra carries authenticator-specific facts, e.g. the pod a bound
	// token names ("authentication.kubernetes.io/pod-name").
	Extra map[string][]string
}

// InGroup reports whether the user is in group g.
func (u *Info) InGroup(g string) bool {
	for _, x := range u.Groups {
		if x == g {
			return true
		}
	}
	return false
}

// NodeName returns the node a node agent's identity names, and whether u
// is one (user system:node:<name> in group system:nodes).
func (u *Info) NodeName() (string, bool) {
	if !u.InGroup(NodesGroup) || !strings.HasPrefix(u.Name, NodeUserPrefix) {
		return "", false
	}
	n := strings.TrimPrefix(u.Name, NodeUserPrefix)
	return n, n != ""
}

// ServiceAccountUser is the user name of ServiceAccount ns/name.
func ServiceAccountUser(ns, name string) string {
	return ServiceAccountUserPrefix + ns + ":" + name
}

// ServiceAccountGroups are the groups of a ServiceAccount in ns.
func ServiceAccountGroups(ns string) []string {
	return []string{AllServiceAccountsGroup, ServiceAccountGroupPrefix + ns, AllAuthenticated}
}

type ctxKey struct{}

// With returns ctx carrying u.
func With(ctx context.Context, u *Info) context.Context {
	return context.WithValue(ctx, ctxKey{}, u)
}

// From returns the user ctx carries, if any.
func From(ctx context.Context) (*Info, bool) {
	u, ok := ctx.Value(ctxKey{}).(*Info)
	return u, ok && u != nil
}
