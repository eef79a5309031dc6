package strategy

import (
	"fmt"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/cronschedule"
	"github.com/kplane/kplane/pkg/validation"
)

// CronJob defaults and limits, as in Kubernetes.
const (
	defaultSuccessfulJobsHistory = 3
	defaultFailedJobsHistory     = 1
	// cronJobNameMax leaves room for the "-<minutes since epoch>" suffix
	// of the Jobs' names (11 characters) within a 63-character label value.
	cronJobNameMax = 52
)

func defaultCronJob(cj *kplanev1.CronJob) {
	if cj.Spec == nil {
		cj.Spec = &kplanev1.CronJobSpec{}
	}
	s := cj.Spec
	if s.ConcurrencyPolicy == "" {
		s.ConcurrencyPolicy = kplanev1.ConcurrencyPolicyAllow
	}
	if s.Suspend == nil {
		s.Suspend = ptr(false)
	}
	if s.SuccessfulJobsHistoryLimit == nil {
		s.SuccessfulJobsHistoryLimit = ptr[int32](defaultSuccessfulJobsHistory)
	}
	if s.FailedJobsHistoryLimit == nil {
		s.FailedJobsHistoryLimit = ptr[int32](defaultFailedJobsHistory)
	}
	if jt := s.JobTemplate; jt != nil && jt.Spec != nil {
		defaultTemplate(jt.Spec.Template)
	}
}

// cronJobName is a DNS subdomain short enough for the Jobs' names.
func cronJobName(name string) []string {
	msgs := validation.IsDNS1123Subdomain(name)
	if len(name) > cronJobNameMax {
		msgs = append(msgs, fmt.Sprintf("must be no more than %d characters", cronJobNameMax))
	}
	return msgs
}

func validateCronJob(cj *kplanev1.CronJob) validation.ErrorList {
	var errs validation.ErrorList
	s := cj.Spec
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	if s.Schedule == "" {
		errs.Required("spec.schedule", "")
	} else if _, err := cronschedule.Parse(s.Schedule, ""); err != nil {
		errs.Invalid("spec.schedule", s.Schedule, err.Error())
	}
	if s.TimeZone != nil {
		if *s.TimeZone == "" {
			errs.Invalid("spec.timeZone", *s.TimeZone, "timeZone must be nil or non-empty string")
		} else if _, err := cronschedule.LoadLocation(*s.TimeZone); err != nil {
			errs.Invalid("spec.timeZone", *s.TimeZone, err.Error())
		}
	}
	if s.StartingDeadlineSeconds != nil {
		errs.NonNegative("spec.startingDeadlineSeconds", *s.StartingDeadlineSeconds)
	}
	oneOf(&errs, "spec.concurrencyPolicy", s.ConcurrencyPolicy,
		kplanev1.ConcurrencyPolicyAllow, kplanev1.ConcurrencyPolicyForbid, kplanev1.ConcurrencyPolicyReplace)
	if s.SuccessfulJobsHistoryLimit != nil {
		errs.NonNegative("spec.successfulJobsHistoryLimit", int64(*s.SuccessfulJobsHistoryLimit))
	}
	if s.FailedJobsHistoryLimit != nil {
		errs.NonNegative("spec.failedJobsHistoryLimit", int64(*s.FailedJobsHistoryLimit))
	}
	validateJobTemplate(s.JobTemplate, "spec.jobTemplate", &errs)
	validateCronJobStatus(cj.Status, &errs)
	return errs
}

// validateJobTemplate checks the Job a CronJob creates. Its selector may be
// unset: the Job gets one when it is created.
func validateJobTemplate(jt *kplanev1.JobTemplateSpec, path string, errs *validation.ErrorList) {
	if jt == nil {
		errs.Required(path, "")
		return
	}
	mp := child(path, "metadata")
	errs.AddAll(validation.ValidateLabels(jt.GetMetadata().GetLabels(), child(mp, "labels")))
	errs.AddAll(validation.ValidateAnnotations(jt.GetMetadata().GetAnnotations(), child(mp, "annotations")))
	sp := child(path, "spec")
	s := jt.Spec
	if s == nil {
		errs.Required(sp, "")
		return
	}
	if s.Parallelism != nil {
		errs.NonNegative(child(sp, "parallelism"), int64(*s.Parallelism))
	}
	if s.Completions != nil {
		errs.NonNegative(child(sp, "completions"), int64(*s.Completions))
	}
	if s.BackoffLimit != nil {
		errs.NonNegative(child(sp, "backoffLimit"), int64(*s.BackoffLimit))
	}
	if s.ActiveDeadlineSeconds != nil {
		errs.Positive(child(sp, "activeDeadlineSeconds"), *s.ActiveDeadlineSeconds)
	}
	if s.Selector != nil {
		validateSelectorMatchesTemplate(s.Selector, s.Template, sp, errs)
	}
	validateTemplate(s.Template, child(sp, "template"),
		[]string{kplanev1.RestartPolicyOnFailure, kplanev1.RestartPolicyNever}, errs)
}

func validateCronJobStatus(st *kplanev1.CronJobStatus, errs *validation.ErrorList) {
	for i, ref := range st.GetActive() {
		if ref.GetName() == "" {
			errs.Required(child(index("status.active", i), "name"), "")
		}
	}
}
