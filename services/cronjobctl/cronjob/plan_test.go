package cronjob

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/cronschedule"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func ts(s string) *timestamppb.Timestamp { return timestamppb.New(at(s)) }

func newCronJob(schedule string) *kplanev1.CronJob {
	return &kplanev1.CronJob{
		Metadata: &kplanev1.ObjectMeta{Name: "tick", Namespace: "default", Uid: "cj-uid", CreationTimestamp: ts("2026-01-01T10:00:30Z")},
		Spec: &kplanev1.CronJobSpec{
			Schedule: schedule, TimeZone: proto.String("UTC"), ConcurrencyPolicy: kplanev1.ConcurrencyPolicyAllow,
			Suspend: proto.Bool(false), SuccessfulJobsHistoryLimit: proto.Int32(3), FailedJobsHistoryLimit: proto.Int32(1),
			JobTemplate: &kplanev1.JobTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "tick"}, Annotations: map[string]string{"note": "x"}},
				Spec: &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{
					RestartPolicy: kplanev1.RestartPolicyNever, Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}}},
			},
		},
	}
}

// run is a Job of cj for the run at t, in state "", Complete or Failed.
func run(cj *kplanev1.CronJob, t, state string) *kplanev1.Job {
	sched := mustSchedule(cj)
	j := NewJob(cj, sched, at(t))
	j.Metadata.Uid = "uid-" + j.Metadata.Name
	j.Metadata.CreationTimestamp = ts(t)
	j.Status = &kplanev1.JobStatus{StartTime: ts(t)}
	if state != "" {
		j.Status.Conditions = []*kplanev1.Condition{{Type: state, Status: kplanev1.ConditionTrue}}
		if state == kplanev1.JobComplete {
			j.Status.CompletionTime = timestamppb.New(at(t).Add(30 * time.Second))
		}
	}
	return j
}

func mustSchedule(cj *kplanev1.CronJob) *cronschedule.Schedule {
	s, err := cronschedule.Parse(cj.Spec.Schedule, cj.Spec.GetTimeZone())
	if err != nil {
		panic(err)
	}
	return s
}

func reasons(p Plan) []string {
	var out []string
	for _, e := range p.Events {
		out = append(out, e.Reason)
	}
	return out
}

func names(jobs []*kplanev1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.GetMetadata().GetName())
	}
	return out
}

func TestFirstRunAndRequeue(t *testing.T) {
	cj := newCronJob("*/5 * * * *")
	// Before the first run: nothing, look again at 10:05.
	p := Decide(cj, nil, at("2026-01-01T10:02:00Z"))
	if p.Create != nil || p.RequeueAfter != 3*time.Minute+requeueSlack {
		t.Fatalf("before first run: create %v, requeue %v", p.Create, p.RequeueAfter)
	}
	p = Decide(cj, nil, at("2026-01-01T10:05:01Z"))
	if p.Create == nil {
		t.Fatal("no job at 10:05")
	}
	j := p.Create
	if want := fmt.Sprintf("tick-%d", at("2026-01-01T10:05:00Z").Unix()/60); j.Metadata.Name != want {
		t.Errorf("name %s, want %s", j.Metadata.Name, want)
	}
	if j.Metadata.Annotations[kplanev1.AnnotationCronJobScheduledTimestamp] != "2026-01-01T10:05:00Z" || j.Metadata.Annotations["note"] != "x" ||
		j.Metadata.Labels["app"] != "tick" {
		t.Errorf("metadata %v", j.Metadata)
	}
	ref := j.Metadata.OwnerReferences[0]
	if ref.Kind != "CronJob" || ref.ApiVersion != "batch/v1" || ref.Uid != "cj-uid" || !ref.Controller || !ref.BlockOwnerDeletion {
		t.Errorf("owner %v", ref)
	}
	if !p.Status.LastScheduleTime.AsTime().Equal(at("2026-01-01T10:05:00Z")) {
		t.Errorf("lastScheduleTime %v", p.Status.LastScheduleTime.AsTime())
	}
	if p.RequeueAfter != 5*time.Minute-time.Second+requeueSlack {
		t.Errorf("requeue %v", p.RequeueAfter)
	}
	if !slices.Equal(reasons(p), nil) {
		t.Errorf("events %v", reasons(p))
	}
}

func TestTimeZoneAnnotationAndName(t *testing.T) {
	cj := newCronJob("0 9 * * *")
	cj.Spec.TimeZone = proto.String("Asia/Tokyo")
	cj.Metadata.CreationTimestamp = ts("2026-01-01T00:00:00Z")
	p := Decide(cj, nil, at("2026-01-02T00:00:10Z")) // 09:00:10 in Tokyo
	if p.Create == nil {
		t.Fatal("no run at 09:00 Tokyo")
	}
	if got := p.Create.Metadata.Annotations[kplanev1.AnnotationCronJobScheduledTimestamp]; got != "2026-01-02T09:00:00+09:00" {
		t.Errorf("annotation %s", got)
	}
	if want := fmt.Sprintf("tick-%d", at("2026-01-02T00:00:00Z").Unix()/60); p.Create.Metadata.Name != want {
		t.Errorf("name %s, want %s", p.Create.Metadata.Name, want)
	}
}

func TestMissedRuns(t *testing.T) {
	cj := newCronJob("* * * * *")
	cj.Status = &kplanev1.CronJobStatus{LastScheduleTime: ts("2026-01-01T10:00:00Z")}
	// Down for 30 minutes: one catch-up run, for the latest missed time.
	p := Decide(cj, nil, at("2026-01-01T10:30:20Z"))
	if p.Create == nil || !p.Scheduled.Equal(at("2026-01-01T10:30:00Z")) {
		t.Fatalf("catch-up: %v at %v", p.Create, p.Scheduled)
	}
	if len(reasons(p)) != 0 {
		t.Errorf("events %v", reasons(p))
	}
	// Down for 3 hours: more than 100 missed, a warning, still one run.
	p = Decide(cj, nil, at("2026-01-01T13:00:20Z"))
	if p.Create == nil || !p.Scheduled.Equal(at("2026-01-01T13:00:00Z")) {
		t.Fatalf("after 180 missed: %v at %v", p.Create, p.Scheduled)
	}
	if !slices.Equal(reasons(p), []string{"TooManyMissedTimes"}) {
		t.Errorf("events %v", reasons(p))
	}
	// A starting deadline bounds the look-back: no warning.
	cj.Spec.StartingDeadlineSeconds = proto.Int64(600)
	p = Decide(cj, nil, at("2026-01-01T13:00:20Z"))
	if p.Create == nil || len(p.Events) != 0 {
		t.Errorf("with deadline: create %v events %v", p.Create, reasons(p))
	}
	// A run missed by more than the deadline is not started.
	cj.Spec.Schedule = "0 * * * *"
	cj.Spec.StartingDeadlineSeconds = proto.Int64(60)
	p = Decide(cj, nil, at("2026-01-01T13:05:00Z"))
	if p.Create != nil {
		t.Errorf("started a run 5 minutes late with a 60 s deadline")
	}
	if !p.Status.LastScheduleTime.AsTime().Equal(at("2026-01-01T10:00:00Z")) {
		t.Errorf("lastScheduleTime moved: %v", p.Status.LastScheduleTime.AsTime())
	}
	p = Decide(cj, nil, at("2026-01-01T13:00:59Z"))
	if p.Create == nil {
		t.Errorf("run within its deadline not started")
	}
}

func TestSuspend(t *testing.T) {
	cj := newCronJob("* * * * *")
	cj.Spec.Suspend = proto.Bool(true)
	p := Decide(cj, nil, at("2026-01-01T10:10:00Z"))
	if p.Create != nil || p.RequeueAfter != 0 {
		t.Errorf("suspended: create %v requeue %v", p.Create, p.RequeueAfter)
	}
	// Resumed: the latest missed run starts.
	cj.Spec.Suspend = proto.Bool(false)
	if p := Decide(cj, nil, at("2026-01-01T10:10:00Z")); p.Create == nil || !p.Scheduled.Equal(at("2026-01-01T10:10:00Z")) {
		t.Errorf("resumed: %v at %v", p.Create, p.Scheduled)
	}
}

func TestConcurrencyPolicies(t *testing.T) {
	base := newCronJob("* * * * *")
	running := run(base, "2026-01-01T10:01:00Z", "")
	base.Status = &kplanev1.CronJobStatus{LastScheduleTime: ts("2026-01-01T10:01:00Z"), Active: []*kplanev1.ObjectReference{JobRef(running)}}
	now := at("2026-01-01T10:02:05Z")

	allow := proto.Clone(base).(*kplanev1.CronJob)
	p := Decide(allow, []*kplanev1.Job{running}, now)
	if p.Create == nil || len(p.DeleteActive) != 0 || len(p.Status.Active) != 1 {
		t.Errorf("Allow: create %v delete %v active %v", p.Create, names(p.DeleteActive), p.Status.Active)
	}

	forbid := proto.Clone(base).(*kplanev1.CronJob)
	forbid.Spec.ConcurrencyPolicy = kplanev1.ConcurrencyPolicyForbid
	p = Decide(forbid, []*kplanev1.Job{running}, now)
	if p.Create != nil || !slices.Equal(reasons(p), []string{"JobAlreadyActive"}) {
		t.Errorf("Forbid: create %v events %v", p.Create, reasons(p))
	}
	if !p.Status.LastScheduleTime.AsTime().Equal(at("2026-01-01T10:01:00Z")) || p.RequeueAfter == 0 {
		t.Errorf("Forbid: the skipped run must stay due: %v, requeue %v", p.Status.LastScheduleTime.AsTime(), p.RequeueAfter)
	}
	// Once the running Job finished, the skipped run starts (within the look-back).
	done := run(base, "2026-01-01T10:01:00Z", kplanev1.JobComplete)
	p = Decide(forbid, []*kplanev1.Job{done}, at("2026-01-01T10:02:30Z"))
	if p.Create == nil || !p.Scheduled.Equal(at("2026-01-01T10:02:00Z")) || len(p.Status.Active) != 0 {
		t.Errorf("Forbid after finish: %v at %v, active %v", p.Create, p.Scheduled, p.Status.Active)
	}
	if !slices.Equal(reasons(p), []string{"SawCompletedJob"}) {
		t.Errorf("events %v", reasons(p))
	}

	replace := proto.Clone(base).(*kplanev1.CronJob)
	replace.Spec.ConcurrencyPolicy = kplanev1.ConcurrencyPolicyReplace
	p = Decide(replace, []*kplanev1.Job{running}, now)
	if p.Create == nil || !slices.Equal(names(p.DeleteActive), []string{running.Metadata.Name}) || len(p.Status.Active) != 0 {
		t.Errorf("Replace: create %v delete %v active %v", p.Create, names(p.DeleteActive), p.Status.Active)
	}
}

func TestActiveList(t *testing.T) {
	cj := newCronJob("0 * * * *")
	a := run(cj, "2026-01-01T11:00:00Z", kplanev1.JobComplete)
	b := run(cj, "2026-01-01T12:00:00Z", "")
	gone := &kplanev1.ObjectReference{Kind: "Job", Name: "tick-1", Uid: "gone"}
	cj.Status = &kplanev1.CronJobStatus{LastScheduleTime: ts("2026-01-01T12:00:00Z"),
		Active: []*kplanev1.ObjectReference{JobRef(a), gone}}
	manual := &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{Name: "tick-manual-x", Namespace: "default", Uid: "m",
		OwnerReferences: a.Metadata.OwnerReferences}, Status: &kplanev1.JobStatus{}}
	p := Decide(cj, []*kplanev1.Job{a, b, manual}, at("2026-01-01T12:30:00Z"))
	// a finished, "gone" vanished, b (a run whose status write was lost)
	// is taken in, the manual Job is not a run.
	if len(p.Status.Active) != 1 || p.Status.Active[0].Uid != b.Metadata.Uid {
		t.Errorf("active %v", p.Status.Active)
	}
	if !slices.Equal(reasons(p), []string{"SawCompletedJob", "MissingJob", "UnexpectedJob"}) {
		t.Errorf("events %v", reasons(p))
	}
	if !p.Status.LastSuccessfulTime.AsTime().Equal(at("2026-01-01T11:00:30Z")) {
		t.Errorf("lastSuccessfulTime %v", p.Status.LastSuccessfulTime)
	}
	if p.Create != nil {
		t.Error("created a Job between runs")
	}
}

func TestRunAlreadyCreated(t *testing.T) {
	// A crash after the create, before the status write: the next
	// reconcile finds the run's Job and records it instead of creating.
	cj := newCronJob("0 * * * *")
	cj.Status = &kplanev1.CronJobStatus{LastScheduleTime: ts("2026-01-01T11:00:00Z")}
	j := run(cj, "2026-01-01T12:00:00Z", "")
	p := Decide(cj, []*kplanev1.Job{j}, at("2026-01-01T12:00:40Z"))
	if p.Create != nil {
		t.Fatal("created the run's Job again")
	}
	if len(p.Status.Active) != 1 || !p.Status.LastScheduleTime.AsTime().Equal(at("2026-01-01T12:00:00Z")) {
		t.Errorf("status %v", p.Status)
	}
	// The same with the Job already finished.
	j = run(cj, "2026-01-01T12:00:00Z", kplanev1.JobFailed)
	p = Decide(cj, []*kplanev1.Job{j}, at("2026-01-01T12:00:40Z"))
	if p.Create != nil || len(p.Status.Active) != 0 || !p.Status.LastScheduleTime.AsTime().Equal(at("2026-01-01T12:00:00Z")) {
		t.Errorf("finished: create %v status %v", p.Create, p.Status)
	}
}

func TestHistoryTrim(t *testing.T) {
	cj := newCronJob("0 * * * *")
	var jobs []*kplanev1.Job
	for h := 1; h <= 6; h++ {
		state := kplanev1.JobComplete
		if h%2 == 0 {
			state = kplanev1.JobFailed
		}
		jobs = append(jobs, run(cj, fmt.Sprintf("2026-01-01T%02d:00:00Z", h), state))
	}
	jobs = append(jobs, run(cj, "2026-01-01T07:00:00Z", "")) // running: never trimmed
	cj.Status = &kplanev1.CronJobStatus{LastScheduleTime: ts("2026-01-01T07:00:00Z")}
	cj.Spec.SuccessfulJobsHistoryLimit = proto.Int32(2)
	cj.Spec.FailedJobsHistoryLimit = proto.Int32(1)
	p := Decide(cj, jobs, at("2026-01-01T07:10:00Z"))
	// Successful: 1, 3, 5 → keep 3, 5. Failed: 2, 4, 6 → keep 6.
	want := []string{jobs[0].Metadata.Name, jobs[1].Metadata.Name, jobs[3].Metadata.Name}
	if got := names(p.DeleteHistory); !slices.Equal(got, want) {
		t.Errorf("trimmed %v, want %v", got, want)
	}
	cj.Spec.SuccessfulJobsHistoryLimit = proto.Int32(0)
	cj.Spec.FailedJobsHistoryLimit = proto.Int32(0)
	if p := Decide(cj, jobs, at("2026-01-01T07:10:00Z")); len(p.DeleteHistory) != 6 {
		t.Errorf("limits 0: trimmed %v", names(p.DeleteHistory))
	}
	cj.Spec.SuccessfulJobsHistoryLimit = nil
	cj.Spec.FailedJobsHistoryLimit = nil
	if p := Decide(cj, jobs, at("2026-01-01T07:10:00Z")); len(p.DeleteHistory) != 0 {
		t.Errorf("no limits: trimmed %v", names(p.DeleteHistory))
	}
}

func TestBadScheduleAndDeleting(t *testing.T) {
	cj := newCronJob("* * *")
	p := Decide(cj, nil, at("2026-01-01T11:00:00Z"))
	if p.Create != nil || p.RequeueAfter != 0 || !slices.Equal(reasons(p), []string{"UnparseableSchedule"}) {
		t.Errorf("bad schedule: %v %v %v", p.Create, p.RequeueAfter, reasons(p))
	}
	cj = newCronJob("* * * * *")
	cj.Spec.TimeZone = proto.String("Nowhere/Land")
	if p := Decide(cj, nil, at("2026-01-01T11:00:00Z")); !slices.Equal(reasons(p), []string{"UnknownTimeZone"}) {
		t.Errorf("bad zone: %v", reasons(p))
	}
	cj = newCronJob("* * * * *")
	cj.Metadata.DeletionTimestamp = ts("2026-01-01T10:59:00Z")
	if p := Decide(cj, nil, at("2026-01-01T11:00:00Z")); p.Create != nil || p.Status != nil {
		t.Errorf("deleting: %+v", p)
	}
}
