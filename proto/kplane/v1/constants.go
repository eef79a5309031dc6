package kplanev1

// The API's well-known values, spelled as Kubernetes spells them (as in
// k8s.io/api/core/v1). Every process uses these names rather than its own
// string literals, so a typo is a compile error and a grep finds every use.

// Pod phases (status.phase).
const (
	PodPending   = "Pending"
	PodRunning   = "Running"
	PodSucceeded = "Succeeded"
	PodFailed    = "Failed"
	PodUnknown   = "Unknown"
)

// Pod restart policies (spec.restartPolicy).
const (
	RestartPolicyAlways    = "Always"
	RestartPolicyOnFailure = "OnFailure"
	RestartPolicyNever     = "Never"
)

// Condition types.
const (
	// NodeReady is the node condition the node agent keeps True and the
	// node controller turns Unknown when the agent goes silent.
	NodeReady = "Ready"
	// NodeNetworkUnavailable is the node condition for a node whose
	// network is not set up; ipamctl sets it while a node has no pod CIDR.
	NodeNetworkUnavailable = "NetworkUnavailable"
	// PodScheduled, PodInitialized, ContainersReady and PodReady are the
	// pod conditions.
	PodScheduled    = "PodScheduled"
	PodInitialized  = "Initialized"
	ContainersReady = "ContainersReady"
	PodReady        = "Ready"
	// ReplicaSetReplicaFailure is set on a ReplicaSet or
	// ReplicationController whose pods cannot be created or deleted.
	ReplicaSetReplicaFailure = "ReplicaFailure"
)

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Taint effects and toleration operators.
const (
	TaintEffectNoSchedule       = "NoSchedule"
	TaintEffectPreferNoSchedule = "PreferNoSchedule"
	TaintEffectNoExecute        = "NoExecute"

	TolerationOpExists = "Exists"
	TolerationOpEqual  = "Equal"
)

// Taint keys the control plane sets on nodes.
const (
	TaintNodeNotReady      = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable   = "node.kubernetes.io/unreachable"
	TaintNodeUnschedulable = "node.kubernetes.io/unschedulable"
)

// Finalizers the apiserver adds for Orphan and Foreground deletes, which
// the garbage collector removes once it has done that part.
const (
	FinalizerOrphanDependents   = "orphan"
	FinalizerForegroundDeletion = "foregroundDeletion"
)

// Deletion propagation policies (DeleteRequest.propagationPolicy).
const (
	DeletePropagationBackground = "Background"
	DeletePropagationForeground = "Foreground"
	DeletePropagationOrphan     = "Orphan"
)

// Namespaces that exist from the first start.
const (
	NamespaceDefault   = "default"
	NamespaceSystem    = "kplane-system"
	NamespaceNodeLease = "kplane-node-lease"
)

// Well-known annotations.
const (
	// AnnotationPodDeletionCost ranks the pods a ReplicaSet scales down:
	// lower cost goes first.
	AnnotationPodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
)

// DefaultSchedulerName is the spec.schedulerName of the default scheduler
// (an empty name means the same).
const DefaultSchedulerName = "default-scheduler"

// apiVersions is the Kubernetes group/version each kind is served under;
// kinds missing here belong to the core group, "v1".
var apiVersions = map[string]string{
	"ReplicaSet":    "apps/v1",
	"Job":           "batch/v1",
	"CronJob":       "batch/v1",
	"StorageClass":  "storage.k8s.io/v1",
	"Lease":         "coordination.k8s.io/v1",
	"PriorityClass": "scheduling.k8s.io/v1",
}

// APIVersion returns the apiVersion Kubernetes serves kind under, e.g.
// "apps/v1" for ReplicaSet and "v1" for Pod.
func APIVersion(kind string) string {
	if v, ok := apiVersions[kind]; ok {
		return v
	}
	return "v1"
}

// Service types (spec.type), the headless clusterIP, session affinities
// (spec.sessionAffinity) and port protocols.
const (
	ServiceTypeClusterIP    = "ClusterIP"
	ServiceTypeNodePort     = "NodePort"
	ServiceTypeLoadBalancer = "LoadBalancer"
	ServiceTypeExternalName = "ExternalName"

	// ClusterIPNone is the clusterIP of a headless service.
	ClusterIPNone = "None"

	ServiceAffinityNone     = "None"
	ServiceAffinityClientIP = "ClientIP"
	// DefaultClientIPServiceAffinitySeconds is how long a client sticks
	// to its endpoint under ClientIP affinity (Kubernetes' default, 3h).
	DefaultClientIPServiceAffinitySeconds = 10800

	ProtocolTCP  = "TCP"
	ProtocolUDP  = "UDP"
	ProtocolSCTP = "SCTP"
)
