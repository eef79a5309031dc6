package kplanev1

// The Job vocabulary (batch/v1), spelled as Kubernetes spells it.

// Job completion modes (spec.completionMode).
const (
	JobCompletionNonIndexed = "NonIndexed"
	JobCompletionIndexed    = "Indexed"
)

// Job pod replacement policies (spec.podReplacementPolicy).
const (
	JobPodReplacementTerminatingOrFailed = "TerminatingOrFailed"
	JobPodReplacementFailed              = "Failed"
)

// Pod failure policy actions and operators (spec.podFailurePolicy.rules).
const (
	PodFailurePolicyActionFailJob   = "FailJob"
	PodFailurePolicyActionFailIndex = "FailIndex"
	PodFailurePolicyActionIgnore    = "Ignore"
	PodFailurePolicyActionCount     = "Count"

	PodFailurePolicyOpIn    = "In"
	PodFailurePolicyOpNotIn = "NotIn"
)

// Job condition types, in the order Kubernetes 1.31+ adds them: a Job that
// is going to finish first gets SuccessCriteriaMet or FailureTarget, and
// Complete or Failed once its last pod is terminated.
const (
	JobSuspended          = "Suspended"
	JobFailureTarget      = "FailureTarget"
	JobSuccessCriteriaMet = "SuccessCriteriaMet"
	JobComplete           = "Complete"
	JobFailed             = "Failed"
)

// Job condition reasons.
const (
	JobReasonBackoffLimitExceeded     = "BackoffLimitExceeded"
	JobReasonDeadlineExceeded         = "DeadlineExceeded"
	JobReasonPodFailurePolicy         = "PodFailurePolicy"
	JobReasonMaxFailedIndexesExceeded = "MaxFailedIndexesExceeded"
	JobReasonFailedIndexes            = "FailedIndexes"
	JobReasonCompletionsReached       = "CompletionsReached"
	JobReasonSuccessPolicy            = "SuccessPolicy"
	JobReasonSuspended                = "JobSuspended"
	JobReasonResumed                  = "JobResumed"
)

// Names the Job controller puts on its pods.
const (
	// FinalizerJobTracking stays on a Job's pod until its outcome is in
	// the Job's status, so that no pod is counted twice or never.
	FinalizerJobTracking = "batch.kubernetes.io/job-tracking"
	// LabelJobName and LabelJobNameLegacy name the Job on its pods.
	LabelJobName       = "batch.kubernetes.io/job-name"
	LabelJobNameLegacy = "job-name"
	// LabelControllerUID and LabelControllerUIDLegacy carry the Job's uid:
	// the generated selector requires it.
	LabelControllerUID       = "batch.kubernetes.io/controller-uid"
	LabelControllerUIDLegacy = "controller-uid"
	// AnnotationJobCompletionIndex (and the label of the same name) is an
	// Indexed Job pod's index.
	AnnotationJobCompletionIndex = "batch.kubernetes.io/job-completion-index"
	// AnnotationJobIndexFailureCount counts an index's failed pods before
	// this one (backoffLimitPerIndex).
	AnnotationJobIndexFailureCount = "batch.kubernetes.io/job-index-failure-count"
	// EnvJobCompletionIndex is the environment variable holding the index.
	EnvJobCompletionIndex = "KPLANE_JOB_COMPLETION_INDEX"
	// PodDisruptionTarget is the pod condition set on a pod about to be
	// disrupted (eviction, preemption, node loss).
	PodDisruptionTarget = "DisruptionTarget"
)
