package kplanev1

// Disruption vocabulary (policy/v1 PodDisruptionBudget and the eviction
// subresource), spelled as Kubernetes spells it.
const (
	// UnhealthyPodEvictionIfHealthyBudget (the behaviour when unset) lets
	// a running pod that is not ready be evicted only while the budget is
	// met; AlwaysAllow lets it be evicted regardless.
	UnhealthyPodEvictionIfHealthyBudget = "IfHealthyBudget"
	UnhealthyPodEvictionAlwaysAllow     = "AlwaysAllow"

	// DisruptionAllowedCondition is the PodDisruptionBudget condition
	// saying whether an eviction would be allowed now, with one of the
	// reasons below.
	DisruptionAllowedCondition = "DisruptionAllowed"
	// ReasonSufficientPods: disruptions are allowed.
	ReasonSufficientPods = "SufficientPods"
	// ReasonInsufficientPods: the budget would be violated.
	ReasonInsufficientPods = "InsufficientPods"
	// ReasonSyncFailed: the controller could not compute the status (an
	// owner's scale could not be read).
	ReasonSyncFailed = "SyncFailed"

	// DisruptionBudgetCause is the Status cause type of an eviction
	// refused for a budget.
	DisruptionBudgetCause = "DisruptionBudget"
	// EvictionRefusedMessage is Kubernetes' message for such a refusal.
	EvictionRefusedMessage = "Cannot evict pod as it would violate the pod's disruption budget."
)
