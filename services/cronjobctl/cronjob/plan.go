package cronjob

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/cronschedule"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	kindCronJob = "CronJob"
	kindJob     = "Job"
	// requeueSlack is added to the wait for the next run, so the reconcile
	// it wakes finds the run due rather than a hair early.
	requeueSlack = 100 * time.Millisecond
)

// Event is an event the plan asks the controller to record on the CronJob.
type Event struct {
	Type, Reason, Message string
}

// Plan is what one reconcile of a CronJob does, decided by Decide from the
// CronJob, the Jobs it controls and the time.
type Plan struct {
	// Status is the CronJob's new status, before the Job to Create (whose
	// uid the apiserver gives) is added to its active list.
	Status *kplanev1.CronJobStatus
	// DeleteActive are the running Jobs Replace removes before Create.
	DeleteActive []*kplanev1.Job
	// Create is the Job to create, nil for none; it stands for the run
	// at Scheduled.
	Create    *kplanev1.Job
	Scheduled time.Time
	// DeleteHistory are finished Jobs beyond the history limits, oldest
	// first. (The controller records SuccessfulDelete for each Job its
	// call really deleted, not for one a stale cache still showed.)
	DeleteHistory []*kplanev1.Job
	// Events to record, in order.
	Events []Event
	// RequeueAfter is when to look again (the next run); 0 for never
	// (suspended, or a schedule that cannot be used).
	RequeueAfter time.Duration
}

// JobName is the name of the Job for the run at t: the CronJob's name and
// t in minutes since the epoch, so each run has exactly one possible Job.
func JobName(cronJobName string, t time.Time) string {
	return fmt.Sprintf("%s-%d", cronJobName, t.Unix()/60)
}

// finished returns the condition type (Complete or Failed) of a finished Job.
func finished(j *kplanev1.Job) (string, bool) {
	for _, c := range j.GetStatus().GetConditions() {
		if (c.GetType() == kplanev1.JobComplete || c.GetType() == kplanev1.JobFailed) && c.GetStatus() == kplanev1.ConditionTrue {
			return c.GetType(), true
		}
	}
	return "", false
}

// Decide plans one reconcile of cj at now. jobs are the Jobs cj controls,
// as the cache (and, for active ones missing from it, the apiserver) shows
// them.
func Decide(cj *kplanev1.CronJob, jobs []*kplanev1.Job, now time.Time) Plan {
	var p Plan
	if cj.GetMetadata().GetDeletionTimestamp() != nil {
		return p
	}
	spec := cj.GetSpec()
	st := proto.Clone(cj.GetStatus()).(*kplanev1.CronJobStatus)
	if st == nil {
		st = &kplanev1.CronJobStatus{}
	}
	p.Status = st
	event := func(typ, reason, format string, args ...any) {
		p.Events = append(p.Events, Event{Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}

	// The active list: drop Jobs that finished or are gone.
	byUID := map[string]*kplanev1.Job{}
	byName := map[string]*kplanev1.Job{}
	for _, j := range jobs {
		byUID[j.GetMetadata().GetUid()] = j
		byName[j.GetMetadata().GetName()] = j
	}
	var active []*kplanev1.ObjectReference
	activeUID := map[string]bool{}
	for _, ref := range st.Active {
		j, ok := byUID[ref.GetUid()]
		switch {
		case !ok:
			event(record.Normal, "MissingJob", "Active job went missing: %v", ref.GetName())
		case isFinished(j):
			cond, _ := finished(j)
			event(record.Normal, "SawCompletedJob", "Saw completed job: %s, condition: %v", j.GetMetadata().GetName(), cond)
		default:
			active = append(active, ref)
			activeUID[ref.GetUid()] = true
		}
	}
	for _, j := range jobs {
		uid := j.GetMetadata().GetUid()
		if isFinished(j) || activeUID[uid] || j.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if isScheduledJob(cj, j) {
			// A run of ours whose status write was lost (a crash between
			// the create and the status update), or not in the cache
			// then: it is active.
			active = append(active, JobRef(j))
			activeUID[uid] = true
			continue
		}
		// Created by hand (kpctl create job --from=cronjob/...): owned, but
		// not a run, so no concurrency policy applies to it.
		event(record.Warning, "UnexpectedJob", "Saw a job that the controller did not create or forgot: %s", j.GetMetadata().GetName())
	}
	st.Active = active

	// lastSuccessfulTime follows the newest completion.
	for _, j := range jobs {
		if c, ok := finished(j); ok && c == kplanev1.JobComplete {
			ct := j.GetStatus().GetCompletionTime()
			if ct != nil && (st.LastSuccessfulTime == nil || ct.AsTime().After(st.LastSuccessfulTime.AsTime())) {
				st.LastSuccessfulTime = ct
			}
		}
	}

	p.DeleteHistory = trimHistory(jobs, spec.GetSuccessfulJobsHistoryLimit(), spec.GetFailedJobsHistoryLimit(),
		spec.SuccessfulJobsHistoryLimit != nil, spec.FailedJobsHistoryLimit != nil)

	sched, err := cronschedule.Parse(spec.GetSchedule(), spec.GetTimeZone())
	if err != nil {
		if spec.TimeZone != nil && strings.Contains(err.Error(), "time zone") {
			event(record.Warning, "UnknownTimeZone", "invalid timeZone: %q: %s", spec.GetTimeZone(), err)
		} else {
			event(record.Warning, "UnparseableSchedule", "unparseable schedule: %q : %s", spec.GetSchedule(), err)
		}
		return p
	}
	if spec.GetSuspend() {
		return p
	}
	p.RequeueAfter = sched.Next(now).Sub(now) + requeueSlack

	earliest := cj.GetMetadata().GetCreationTimestamp().AsTime()
	if st.LastScheduleTime != nil {
		earliest = st.LastScheduleTime.AsTime()
	}
	if d := spec.StartingDeadlineSeconds; d != nil {
		if limit := now.Add(-time.Duration(*d) * time.Second); limit.After(earliest) {
			earliest = limit
		}
	}
	missed := sched.MostRecent(earliest, now)
	if missed.TooMany() {
		event(record.Warning, "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew")
	}
	if missed.Time.IsZero() {
		return p
	}
	scheduled := missed.Time
	if d := spec.StartingDeadlineSeconds; d != nil && scheduled.Add(time.Duration(*d)*time.Second).Before(now) {
		event(record.Warning, "MissedSchedule", "Missed scheduled time to start a job: %s", scheduled.UTC().Format(time.RFC1123Z))
		return p
	}
	name := JobName(cj.GetMetadata().GetName(), scheduled)
	if j, ok := byName[name]; ok {
		// The run's Job exists: created by an earlier reconcile whose status
		// write was lost (or is not in the cache yet). Record it, once.
		if controller.IsControlledBy(kplanev1.MustWrap(j), cj.GetMetadata().GetUid()) {
			st.LastScheduleTime = timestamppb.New(scheduled)
		}
		return p
	}
	if len(st.Active) > 0 {
		switch spec.GetConcurrencyPolicy() {
		case kplanev1.ConcurrencyPolicyForbid:
			event(record.Normal, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
			return p
		case kplanev1.ConcurrencyPolicyReplace:
			for _, ref := range st.Active {
				p.DeleteActive = append(p.DeleteActive, byUID[ref.GetUid()])
			}
			st.Active = nil
		}
	}
	p.Create = NewJob(cj, sched, scheduled)
	p.Scheduled = scheduled
	st.LastScheduleTime = timestamppb.New(scheduled)
	return p
}

func isFinished(j *kplanev1.Job) bool {
	_, ok := finished(j)
	return ok
}

// isScheduledJob reports whether j is one of cj's runs: it carries the
// scheduled time, and its name is the one that time gives.
func isScheduledJob(cj *kplanev1.CronJob, j *kplanev1.Job) bool {
	ts, err := time.Parse(time.RFC3339, j.GetMetadata().GetAnnotations()[kplanev1.AnnotationCronJobScheduledTimestamp])
	return err == nil && j.GetMetadata().GetName() == JobName(cj.GetMetadata().GetName(), ts)
}

// trimHistory returns the finished Jobs beyond the limits, oldest first
// (by start time, then creation, then name). An unset limit keeps all.
func trimHistory(jobs []*kplanev1.Job, successful, failed int32, limitSuccessful, limitFailed bool) []*kplanev1.Job {
	var ok, bad []*kplanev1.Job
	for _, j := range jobs {
		if j.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		switch c, done := finished(j); {
		case !done:
		case c == kplanev1.JobComplete:
			ok = append(ok, j)
		default:
			bad = append(bad, j)
		}
	}
	var out []*kplanev1.Job
	for _, g := range []struct {
		jobs  []*kplanev1.Job
		limit int32
		set   bool
	}{{ok, successful, limitSuccessful}, {bad, failed, limitFailed}} {
		if !g.set || len(g.jobs) <= int(g.limit) {
			continue
		}
		slices.SortFunc(g.jobs, olderFirst)
		out = append(out, g.jobs[:len(g.jobs)-int(g.limit)]...)
	}
	slices.SortFunc(out, olderFirst)
	return out
}

func olderFirst(a, b *kplanev1.Job) int {
	at, bt := startOf(a), startOf(b)
	if c := at.Compare(bt); c != 0 {
		return c
	}
	return strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
}

func startOf(j *kplanev1.Job) time.Time {
	if t := j.GetStatus().GetStartTime(); t != nil {
		return t.AsTime()
	}
	return j.GetMetadata().GetCreationTimestamp().AsTime()
}

// NewJob is the Job for cj's run at scheduled: the job template's labels,
// annotations and spec, the scheduled-timestamp annotation (in the
// CronJob's zone), and cj as controlling owner.
func NewJob(cj *kplanev1.CronJob, sched *cronschedule.Schedule, scheduled time.Time) *kplanev1.Job {
	tmpl := cj.GetSpec().GetJobTemplate()
	meta := cj.GetMetadata()
	annotations := maps.Clone(tmpl.GetMetadata().GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[kplanev1.AnnotationCronJobScheduledTimestamp] = sched.In(scheduled).Format(time.RFC3339)
	return &kplanev1.Job{
		Metadata: &kplanev1.ObjectMeta{
			Name:        JobName(meta.GetName(), scheduled),
			Namespace:   meta.GetNamespace(),
			Labels:      maps.Clone(tmpl.GetMetadata().GetLabels()),
			Annotations: annotations,
			OwnerReferences: []*kplanev1.OwnerReference{{
				ApiVersion: kplanev1.APIVersion(kindCronJob), Kind: kindCronJob,
				Name: meta.GetName(), Uid: meta.GetUid(),
				Controller: true, BlockOwnerDeletion: true,
			}},
		},
		Spec: proto.Clone(tmpl.GetSpec()).(*kplanev1.JobSpec),
	}
}

// JobRef is the active-list reference to j.
func JobRef(j *kplanev1.Job) *kplanev1.ObjectReference {
	m := j.GetMetadata()
	return &kplanev1.ObjectReference{
		Kind: kindJob, Namespace: m.GetNamespace(), Name: m.GetName(), Uid: m.GetUid(),
		ApiVersion: kplanev1.APIVersion(kindJob), ResourceVersion: m.GetResourceVersion(),
	}
}

// statusEqual compares two CronJob statuses.
func statusEqual(a, b *kplanev1.CronJobStatus) bool {
	if a == nil {
		a = &kplanev1.CronJobStatus{}
	}
	if b == nil {
		b = &kplanev1.CronJobStatus{}
	}
	return proto.Equal(a, b)
}
