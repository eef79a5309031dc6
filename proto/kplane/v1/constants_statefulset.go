package kplanev1

// The StatefulSet, DaemonSet and ControllerRevision vocabulary (apps/v1),
// spelled as Kubernetes spells it.

// StatefulSet pod management policies (spec.podManagementPolicy).
const (
	PodManagementOrderedReady = "OrderedReady"
	PodManagementParallel     = "Parallel"
)

// Update strategy types of StatefulSets and DaemonSets
// (spec.updateStrategy.type).
const (
	UpdateStrategyRollingUpdate = "RollingUpdate"
	UpdateStrategyOnDelete      = "OnDelete"
)

// PersistentVolumeClaim retention policy values (whenDeleted, whenScaled).
const (
	RetentionPolicyRetain = "Retain"
	RetentionPolicyDelete = "Delete"
)

// Labels StatefulSet and DaemonSet pods carry.
const (
	// LabelStatefulSetPodName is a StatefulSet pod's own name, so a
	// Service can select exactly one identity.
	LabelStatefulSetPodName = "statefulset.kubernetes.io/pod-name"
	// LabelPodIndex is a StatefulSet pod's ordinal.
	LabelPodIndex = "apps.kubernetes.io/pod-index"
	// LabelControllerRevisionHash names the ControllerRevision a pod was
	// made from (the revision's name for StatefulSets, its hash for
	// DaemonSets, as in Kubernetes).
	LabelControllerRevisionHash = "controller-revision-hash"
	// LabelDaemonSetTemplateGeneration is the DaemonSet generation a pod
	// was made from (Kubernetes' legacy label, still set).
	LabelDaemonSetTemplateGeneration = "pod-template-generation"
)

// Defaults of StatefulSets and DaemonSets.
const (
	// DefaultRevisionHistoryLimit is how many old ControllerRevisions a
	// StatefulSet or DaemonSet keeps by default.
	DefaultRevisionHistoryLimit = 10
)
