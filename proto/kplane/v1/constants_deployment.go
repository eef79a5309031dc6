package kplanev1

// The Deployment vocabulary (apps/v1), spelled as Kubernetes spells it.

// Deployment strategy types (spec.strategy.type).
const (
	DeploymentStrategyRollingUpdate = "RollingUpdate"
	DeploymentStrategyRecreate      = "Recreate"
)

// Deployment condition types.
const (
	DeploymentAvailable      = "Available"
	DeploymentProgressing    = "Progressing"
	DeploymentReplicaFailure = "ReplicaFailure"
)

// Reasons of the Deployment conditions, as deploymentctl writes them.
const (
	ReasonNewReplicaSetCreated       = "NewReplicaSetCreated"
	ReasonFoundNewReplicaSet         = "FoundNewReplicaSet"
	ReasonReplicaSetUpdated          = "ReplicaSetUpdated"
	ReasonNewReplicaSetAvailable     = "NewReplicaSetAvailable"
	ReasonProgressDeadlineExceeded   = "ProgressDeadlineExceeded"
	ReasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	ReasonDeploymentPaused           = "DeploymentPaused"
	ReasonDeploymentResumed          = "DeploymentResumed"
)

// Labels and annotations of Deployments and their ReplicaSets.
const (
	// LabelPodTemplateHash is set on a Deployment's ReplicaSets, their
	// selectors and their pods: the hash of the template they run, so
	// the ReplicaSets of one Deployment never select each other's pods.
	LabelPodTemplateHash = "pod-template-hash"
	// AnnotationDeploymentRevision numbers a Deployment's templates: each
	// ReplicaSet carries the revision it was last made current at, and
	// the Deployment carries the current one.
	AnnotationDeploymentRevision = "deployment.kubernetes.io/revision"
	// AnnotationDeploymentRevisionHistory lists the earlier revisions a
	// ReplicaSet stood for (comma-separated) after a rollback reused it.
	AnnotationDeploymentRevisionHistory = "deployment.kubernetes.io/revision-history"
	// AnnotationDesiredReplicas is the Deployment's spec.replicas, set on
	// its ReplicaSets for proportional scaling.
	AnnotationDesiredReplicas = "deployment.kubernetes.io/desired-replicas"
	// AnnotationMaxReplicas is spec.replicas + maxSurge, set on the
	// ReplicaSets as well.
	AnnotationMaxReplicas = "deployment.kubernetes.io/max-replicas"
	// AnnotationRestartedAt in a pod template's annotations is what
	// `rollout restart` changes to roll every pod.
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
	// AnnotationChangeCause is the free-text cause `rollout history` shows.
	AnnotationChangeCause = "kubernetes.io/change-cause"
)
