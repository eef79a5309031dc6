package kplanev1

// Scheduling vocabulary (scheduling.k8s.io/v1 PriorityClass, pod
// priority and preemption), spelled as Kubernetes spells it.
const (
	// PreemptLowerPriority (the default) lets a pod preempt pods of lower
	// priority; Never keeps it waiting in the queue instead.
	PreemptLowerPriority = "PreemptLowerPriority"
	PreemptNever         = "Never"

	// HighestUserDefinablePriority is the largest value a user class may
	// have; larger ones are reserved for the system classes.
	HighestUserDefinablePriority = 1000000000
	// SystemCriticalPriority is the lowest of the system classes.
	SystemCriticalPriority = 2 * HighestUserDefinablePriority
	// The built-in system classes and their values.
	SystemClusterCritical         = "system-cluster-critical"
	SystemNodeCritical            = "system-node-critical"
	SystemClusterCriticalPriority = SystemCriticalPriority
	SystemNodeCriticalPriority    = SystemCriticalPriority + 1000

	// DisruptionTarget is the pod condition set on a pod about to be
	// deleted by a disruption; reason PreemptionByScheduler when the
	// scheduler preempts it.
	DisruptionTarget            = "DisruptionTarget"
	ReasonPreemptionByScheduler = "PreemptionByScheduler"
)
