package strategy

import "slices"

// Well-known API names the lifecycle hooks and the generic store use,
// with Kubernetes' spelling.
const (
	// Propagation policies of a deletion (DeleteOptions.propagationPolicy).
	PropagationBackground = "Background"
	PropagationForeground = "Foreground"
	PropagationOrphan     = "Orphan"

	// Finalizers that carry a propagation policy to the garbage collector.
	FinalizerOrphan     = "orphan"
	FinalizerForeground = "foregroundDeletion"

	podSucceeded = "Succeeded"
	podFailed    = "Failed"
)

// SystemNamespaces exist from the apiserver's first start and cannot be
// deleted.
var SystemNamespaces = []string{"default", "kplane-system", "kplane-node-lease"}

// IsSystemNamespace reports whether name is one of SystemNamespaces.
func IsSystemNamespace(name string) bool {
	return slices.Contains(SystemNamespaces, name)
}
