package kplanev1

// The CronJob vocabulary (batch/v1), spelled as Kubernetes spells it.

// CronJob concurrency policies (spec.concurrencyPolicy).
const (
	ConcurrencyPolicyAllow   = "Allow"
	ConcurrencyPolicyForbid  = "Forbid"
	ConcurrencyPolicyReplace = "Replace"
)

// AnnotationCronJobScheduledTimestamp is set on a Job a CronJob created:
// the run time it stands for, RFC 3339 in the CronJob's time zone.
const AnnotationCronJobScheduledTimestamp = "batch.kubernetes.io/cronjob-scheduled-timestamp"
