package strategy

import (
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validCronJob() *kplanev1.CronJob {
	return &kplanev1.CronJob{Metadata: meta("default", "nightly"), Spec: &kplanev1.CronJobSpec{
		Schedule: "*/5 * * * *",
		TimeZone: ptr("Europe/Berlin"),
		JobTemplate: &kplanev1.JobTemplateSpec{
			Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "report"}},
			Spec:     &kplanev1.JobSpec{Template: template(map[string]string{"app": "report"}, "OnFailure")},
		},
	}}
}

func TestCronJobDefaults(t *testing.T) {
	cj := defaulted(validCronJob())
	s := cj.Spec
	if s.ConcurrencyPolicy != "Allow" || s.GetSuspend() || s.Suspend == nil ||
		s.GetSuccessfulJobsHistoryLimit() != 3 || s.GetFailedJobsHistoryLimit() != 1 {
		t.Errorf("defaults: %v", s)
	}
	if s.JobTemplate.Spec.Template.Spec.GetTerminationGracePeriodSeconds() != 30 {
		t.Errorf("pod template not defaulted: %v", s.JobTemplate.Spec.Template.Spec)
	}
	// The Job's own defaults are left to the Job it creates.
	if s.JobTemplate.Spec.Completions != nil || s.JobTemplate.Spec.Selector != nil {
		t.Errorf("job template spec defaulted as a Job: %v", s.JobTemplate.Spec)
	}
	keep := validCronJob()
	keep.Spec.ConcurrencyPolicy = "Forbid"
	keep.Spec.SuccessfulJobsHistoryLimit = ptr[int32](0)
	keep.Spec.FailedJobsHistoryLimit = ptr[int32](0)
	keep.Spec.Suspend = ptr(true)
	keep = defaulted(keep)
	if keep.Spec.ConcurrencyPolicy != "Forbid" || keep.Spec.GetSuccessfulJobsHistoryLimit() != 0 ||
		keep.Spec.GetFailedJobsHistoryLimit() != 0 || !keep.Spec.GetSuspend() {
		t.Errorf("explicit values overwritten: %v", keep.Spec)
	}
}

func TestCronJobValidate(t *testing.T) {
	checkValidate(t, "CronJob", validCronJob, []tc[*kplanev1.CronJob]{
		{"descriptor", func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "@hourly" }, nil},
		{"no time zone", func(cj *kplanev1.CronJob) { cj.Spec.TimeZone = nil }, nil},
		{"no schedule", func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "" }, []string{"spec.schedule: Required value"}},
		{"four fields", func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "* * * *" },
			[]string{`spec.schedule: Invalid value: "* * * *": expected exactly 5 fields, found 4: [* * * *]`}},
		{"minute out of range", func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "60 * * * *" },
			[]string{`spec.schedule: Invalid value: "60 * * * *": end of range (60) above maximum (59): 60`}},
		{"unknown descriptor", func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "@sometimes" },
			[]string{`spec.schedule: Invalid value: "@sometimes": unrecognized descriptor: @sometimes`}},
		{"TZ in schedule", func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "CRON_TZ=UTC 0 * * * *" },
			[]string{`spec.schedule: Invalid value: "CRON_TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead`}},
		{"unknown time zone", func(cj *kplanev1.CronJob) { cj.Spec.TimeZone = ptr("Europe/Atlantis") },
			[]string{`spec.timeZone: Invalid value: "Europe/Atlantis": unknown time zone Europe/Atlantis`}},
		{"empty time zone", func(cj *kplanev1.CronJob) { cj.Spec.TimeZone = ptr("") },
			[]string{`spec.timeZone: Invalid value: "": timeZone must be nil or non-empty string`}},
		{"Local time zone", func(cj *kplanev1.CronJob) { cj.Spec.TimeZone = ptr("Local") },
			[]string{`spec.timeZone: Invalid value: "Local": must be an explicit time zone as defined in https://www.iana.org/time-zones`}},
		{"concurrency policy", func(cj *kplanev1.CronJob) { cj.Spec.ConcurrencyPolicy = "Sometimes" },
			[]string{`spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace"`}},
		{"negative deadline", func(cj *kplanev1.CronJob) { cj.Spec.StartingDeadlineSeconds = ptr[int64](-1) },
			[]string{"spec.startingDeadlineSeconds: must be greater than or equal to 0"}},
		{"negative successful history", func(cj *kplanev1.CronJob) { cj.Spec.SuccessfulJobsHistoryLimit = ptr[int32](-1) },
			[]string{"spec.successfulJobsHistoryLimit: must be greater than or equal to 0"}},
		{"negative failed history", func(cj *kplanev1.CronJob) { cj.Spec.FailedJobsHistoryLimit = ptr[int32](-2) },
			[]string{"spec.failedJobsHistoryLimit: must be greater than or equal to 0"}},
		{"no job template", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate = nil },
			[]string{"spec.jobTemplate: Required value"}},
		{"no job spec", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec = nil },
			[]string{"spec.jobTemplate.spec: Required value"}},
		{"restart Always", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = "Always" },
			[]string{`spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"`}},
		{"restart Never", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = "Never" }, nil},
		{"no pod template", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Template = nil },
			[]string{"spec.jobTemplate.spec.template: Required value"}},
		{"pod image", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image = "" },
			[]string{"spec.jobTemplate.spec.template.spec.containers[0].image: Required value"}},
		{"negative completions", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Completions = ptr[int32](-1) },
			[]string{"spec.jobTemplate.spec.completions: must be greater than or equal to 0"}},
		{"negative parallelism", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Parallelism = ptr[int32](-1) },
			[]string{"spec.jobTemplate.spec.parallelism: must be greater than or equal to 0"}},
		{"negative backoff", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.BackoffLimit = ptr[int32](-1) },
			[]string{"spec.jobTemplate.spec.backoffLimit: must be greater than or equal to 0"}},
		{"zero deadline", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds = ptr[int64](0) },
			[]string{"spec.jobTemplate.spec.activeDeadlineSeconds: must be greater than 0"}},
		{"selector mismatch", func(cj *kplanev1.CronJob) {
			cj.Spec.JobTemplate.Spec.Selector = &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}
		}, []string{`spec.jobTemplate.spec.template.metadata.labels: Invalid value: {"app":"report"}: selector does not match template labels`}},
		{"template label", func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Metadata.Labels["x"] = "-" },
			[]string{`spec.jobTemplate.metadata.labels["x"]: Invalid value: "-": ...`}},
		{"name too long", func(cj *kplanev1.CronJob) { cj.Metadata.Name = strings.Repeat("a", 53) },
			[]string{`metadata.name: Invalid value: "` + strings.Repeat("a", 53) + `": must be no more than 52 characters`}},
		{"name 52", func(cj *kplanev1.CronJob) { cj.Metadata.Name = strings.Repeat("a", 52) }, nil},
		{"active without name", func(cj *kplanev1.CronJob) {
			cj.Status = &kplanev1.CronJobStatus{Active: []*kplanev1.ObjectReference{{Kind: "Job"}}}
		}, []string{"status.active[0].name: Required value"}},
		{"no spec", func(cj *kplanev1.CronJob) { cj.Spec = nil },
			[]string{"spec.schedule: Required value", "spec.jobTemplate: Required value"}},
	})
}
