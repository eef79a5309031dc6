package cronjob

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/cronschedule"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is moved by the test; every move wakes the controller.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	stepped chan struct{}
}

func newFakeClock(t time.Time) *fakeClock {
	return &fakeClock{now: t, stepped: make(chan struct{}, 1)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Stepped() <-chan struct{} { return c.stepped }

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
	select {
	case c.stepped <- struct{}{}:
	default: // a wake-up is pending already; it reads the new time
	}
}

type harness struct {
	t     *testing.T
	ctl   *controllertest.Controller
	ctx   context.Context
	c     *client.Client
	clock *fakeClock
}

func start(t *testing.T) *harness {
	t.Helper()
	srv := testserver.Start(t)
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // test teardown: nothing to report
	clock := newFakeClock(time.Now())
	ctl := controllertest.Run(t, srv.Addr(), NewService(WithClock(clock)))
	return &harness{t: t, ctl: ctl, ctx: context.Background(), c: c, clock: clock}
}

func (h *harness) createCronJob(name, policy string, successful, failed int32, mutate ...func(*kplanev1.CronJob)) *kplanev1.CronJob {
	h.t.Helper()
	cj := &kplanev1.CronJob{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.CronJobSpec{
			Schedule: "* * * * *", TimeZone: proto.String("UTC"), ConcurrencyPolicy: policy,
			SuccessfulJobsHistoryLimit: proto.Int32(successful), FailedJobsHistoryLimit: proto.Int32(failed),
			JobTemplate: &kplanev1.JobTemplateSpec{Spec: &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{
				Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
					Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}}}},
		},
	}
	for _, m := range mutate {
		m(cj)
	}
	cj, err := client.CronJobs(h.c).Create(h.ctx, cj)
	if err != nil {
		h.t.Fatal(err)
	}
	return cj
}

// minute returns the i-th minute boundary after the CronJob's creation.
func minute(cj *kplanev1.CronJob, i int) time.Time {
	return cj.GetMetadata().GetCreationTimestamp().AsTime().Truncate(time.Minute).Add(time.Duration(i) * time.Minute)
}

func (h *harness) job(name string) (*kplanev1.Job, bool) {
	j, err := client.Jobs(h.c).Get(h.ctx, "default", name)
	if client.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return j, true
}

func (h *harness) waitJob(name string) *kplanev1.Job {
	h.t.Helper()
	var j *kplanev1.Job
	testutil.Eventually(h.t, 30*time.Second, "job "+name, func() bool {
		var ok bool
		j, ok = h.job(name)
		return ok
	})
	return j
}

// finish writes the status the Job controller would: Complete or Failed.
func (h *harness) finish(name, cond string) {
	h.t.Helper()
	j, _ := h.job(name)
	now := timestamppb.New(h.clock.Now())
	j.Status = &kplanev1.JobStatus{StartTime: j.GetMetadata().GetCreationTimestamp(),
		Conditions: []*kplanev1.Condition{{Type: cond, Status: kplanev1.ConditionTrue, LastTransitionTime: now}}}
	if cond == kplanev1.JobComplete {
		j.Status.Succeeded, j.Status.CompletionTime = 1, now
	} else {
		j.Status.Failed = 1
	}
	if _, err := client.Jobs(h.c).UpdateStatus(h.ctx, j); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) cronJob(name string) *kplanev1.CronJob {
	cj, err := client.CronJobs(h.c).Get(h.ctx, "default", name)
	if err != nil {
		h.t.Fatal(err)
	}
	return cj
}

func (h *harness) jobNames(cj *kplanev1.CronJob) []string {
	list, _, err := client.Jobs(h.c).List(h.ctx, "default", client.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, j := range list {
		for _, ref := range j.GetMetadata().GetOwnerReferences() {
			if ref.GetUid() == cj.GetMetadata().GetUid() {
				out = append(out, j.GetMetadata().GetName())
			}
		}
	}
	return out
}

func (h *harness) hasEvent(name, reason string) bool {
	list, _, err := client.Events(h.c).List(h.ctx, "default", client.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range list {
		if e.GetInvolvedObject().GetName() == name && e.GetReason() == reason {
			return true
		}
	}
	return false
}

// metric sums the samples of a counter family on the controller's
// /metrics registry whose labels include want.
func (h *harness) metric(name string, want map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.ctl.Context(h.t).Registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	samples:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue samples
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func activeNames(cj *kplanev1.CronJob) []string {
	var out []string
	for _, r := range cj.GetStatus().GetActive() {
		out = append(out, r.GetName())
	}
	return out
}

func TestRunsOnScheduleAndTrimsHistory(t *testing.T) {
	h := start(t)
	cj := h.createCronJob("tick", kplanev1.ConcurrencyPolicyAllow, 2, 1)
	var names []string
	for i := 1; i <= 4; i++ {
		at := minute(cj, i)
		h.clock.Set(at.Add(time.Second))
		name := JobName("tick", at)
		j := h.waitJob(name)
		if got := j.Metadata.Annotations[kplanev1.AnnotationCronJobScheduledTimestamp]; got != at.UTC().Format(time.RFC3339) {
			t.Errorf("%s: scheduled-timestamp %q", name, got)
		}
		if ref := j.Metadata.OwnerReferences[0]; ref.GetUid() != cj.Metadata.Uid || !ref.GetController() {
			t.Errorf("%s: owner %v", name, ref)
		}
		testutil.Eventually(t, 30*time.Second, name+" active", func() bool {
			s := h.cronJob("tick").GetStatus()
			return len(s.GetActive()) == 1 && s.GetActive()[0].GetName() == name && s.GetLastScheduleTime().AsTime().Equal(at)
		})
		h.finish(name, kplanev1.JobComplete)
		testutil.Eventually(t, 30*time.Second, name+" no longer active", func() bool {
			s := h.cronJob("tick").GetStatus()
			return len(s.GetActive()) == 0 && s.GetLastSuccessfulTime() != nil
		})
		names = append(names, name)
	}
	// Successful history 2: the two oldest of four are deleted.
	testutil.Eventually(t, 30*time.Second, "history trimmed to 2", func() bool {
		got := h.jobNames(cj)
		return len(got) == 2 && got[0] == names[2] && got[1] == names[3]
	})
	if !h.hasEvent("tick", "SawCompletedJob") || !h.hasEvent("tick", "SuccessfulDelete") || !h.hasEvent("tick", "SuccessfulCreate") {
		t.Error("events missing")
	}
	// A call is counted once it returned, which can be after its effect
	// is visible: wait for the counts, then hold them exact.
	testutil.Eventually(t, 30*time.Second, "jobs_created_total 4 and jobs_deleted_total{reason=history} 2", func() bool {
		return h.metric("kplane_cronjobctl_jobs_created_total", nil) >= 4 &&
			h.metric("kplane_cronjobctl_jobs_deleted_total", map[string]string{"reason": "history"}) >= 2
	})
	if got := h.metric("kplane_cronjobctl_jobs_created_total", nil); got != 4 {
		t.Errorf("jobs_created_total = %v, want 4", got)
	}
	if got := h.metric("kplane_cronjobctl_jobs_deleted_total", map[string]string{"reason": "history"}); got != 2 {
		t.Errorf("jobs_deleted_total{reason=history} = %v, want 2", got)
	}
	// Between runs nothing happens.
	h.clock.Set(minute(cj, 4).Add(30 * time.Second))
	h.clock.Set(minute(cj, 5).Add(-time.Second))
	if _, ok := h.job(JobName("tick", minute(cj, 5))); ok {
		t.Error("job created before its time")
	}
}

func TestForbidSkipsWhileActive(t *testing.T) {
	h := start(t)
	cj := h.createCronJob("solo", kplanev1.ConcurrencyPolicyForbid, 3, 1)
	first := JobName("solo", minute(cj, 1))
	h.clock.Set(minute(cj, 1).Add(time.Second))
	h.waitJob(first)
	testutil.Eventually(t, 30*time.Second, "first active", func() bool { return len(h.cronJob("solo").GetStatus().GetActive()) == 1 })
	h.clock.Set(minute(cj, 2).Add(time.Second))
	testutil.Eventually(t, 30*time.Second, "JobAlreadyActive event", func() bool { return h.hasEvent("solo", "JobAlreadyActive") })
	if got := h.jobNames(cj); len(got) != 1 {
		t.Fatalf("Forbid started a second job while one runs: %v", got)
	}
	// Counted before the Event is written, so it shows at once.
	if got := h.metric("kplane_cronjobctl_runs_skipped_total", map[string]string{"reason": "JobAlreadyActive"}); got < 1 {
		t.Errorf("runs_skipped_total{reason=JobAlreadyActive} = %v", got)
	}
	// Once the first Job finishes the skipped run starts.
	h.finish(first, kplanev1.JobFailed)
	second := h.waitJob(JobName("solo", minute(cj, 2)))
	testutil.Eventually(t, 30*time.Second, "second active", func() bool {
		a := activeNames(h.cronJob("solo"))
		return len(a) == 1 && a[0] == second.Metadata.Name
	})
}

func TestReplaceDeletesActive(t *testing.T) {
	h := start(t)
	cj := h.createCronJob("swap", kplanev1.ConcurrencyPolicyReplace, 3, 1)
	first := JobName("swap", minute(cj, 1))
	h.clock.Set(minute(cj, 1).Add(time.Second))
	h.waitJob(first)
	testutil.Eventually(t, 30*time.Second, "first active", func() bool { return len(h.cronJob("swap").GetStatus().GetActive()) == 1 })
	h.clock.Set(minute(cj, 2).Add(time.Second))
	second := JobName("swap", minute(cj, 2))
	h.waitJob(second)
	testutil.Eventually(t, 30*time.Second, "first deleted, second active", func() bool {
		_, ok := h.job(first)
		a := activeNames(h.cronJob("swap"))
		return !ok && len(a) == 1 && a[0] == second
	})
}

func TestCatchUpAfterDowntime(t *testing.T) {
	h := start(t)
	cj := h.createCronJob("late", kplanev1.ConcurrencyPolicyAllow, 3, 1)
	// Three hours pass at once (the controller was down): one run, for
	// the latest time, and a warning.
	last := minute(cj, 180)
	h.clock.Set(last.Add(10 * time.Second))
	h.waitJob(JobName("late", last))
	testutil.Eventually(t, 30*time.Second, "TooManyMissedTimes event", func() bool { return h.hasEvent("late", "TooManyMissedTimes") })
	if got := h.jobNames(cj); len(got) != 1 {
		t.Errorf("catch-up created %v, want one job", got)
	}
}

func TestSuspendedCreatesNothing(t *testing.T) {
	h := start(t)
	cj := h.createCronJob("paused", kplanev1.ConcurrencyPolicyAllow, 3, 1, func(cj *kplanev1.CronJob) { cj.Spec.Suspend = proto.Bool(true) })
	// A control CronJob shows when the controller has acted on the step.
	ctl := h.createCronJob("control", kplanev1.ConcurrencyPolicyAllow, 3, 1)
	h.clock.Set(minute(ctl, 2).Add(time.Second))
	h.waitJob(JobName("control", minute(ctl, 2)))
	testutil.Eventually(t, 30*time.Second, "control status", func() bool { return h.cronJob("control").GetStatus().GetLastScheduleTime() != nil })
	if got := h.jobNames(cj); len(got) != 0 {
		t.Errorf("suspended CronJob created %v", got)
	}
	// Resumed, it starts the latest missed run.
	cj = h.cronJob("paused")
	cj.Spec.Suspend = proto.Bool(false)
	if _, err := client.CronJobs(h.c).Update(h.ctx, cj); err != nil {
		t.Fatal(err)
	}
	h.waitJob(JobName("paused", minute(ctl, 2)))
}

// TestRunCreatedBeforeACrash: the Job of a run exists (a controller
// created it and died before writing the status), and a Job made by hand
// from the CronJob runs too. The controller records the run instead of
// creating it again, and Forbid counts the run but not the manual Job.
func TestRunCreatedBeforeACrash(t *testing.T) {
	h := start(t)
	cj := h.createCronJob("resume", kplanev1.ConcurrencyPolicyForbid, 3, 1)
	at := minute(cj, 1)
	sched, err := cronschedule.Parse(cj.Spec.Schedule, cj.Spec.GetTimeZone())
	if err != nil {
		t.Fatal(err)
	}
	run := NewJob(cj, sched, at)
	if _, err := client.Jobs(h.c).Create(h.ctx, run); err != nil {
		t.Fatal(err)
	}
	manual := NewJob(cj, sched, at)
	manual.Metadata.Name = "resume-manual"
	delete(manual.Metadata.Annotations, kplanev1.AnnotationCronJobScheduledTimestamp)
	if _, err := client.Jobs(h.c).Create(h.ctx, manual); err != nil {
		t.Fatal(err)
	}
	h.clock.Set(at.Add(2 * time.Second))
	testutil.Eventually(t, 30*time.Second, "the run recorded", func() bool {
		s := h.cronJob("resume").GetStatus()
		a := activeNames(h.cronJob("resume"))
		return s.GetLastScheduleTime().AsTime().Equal(at) && len(a) == 1 && a[0] == run.Metadata.Name
	})
	testutil.Eventually(t, 30*time.Second, "UnexpectedJob for the manual Job", func() bool { return h.hasEvent("resume", "UnexpectedJob") })
	// The next minute: Forbid holds it back for the run, not for the manual Job.
	h.clock.Set(minute(cj, 2).Add(time.Second))
	testutil.Eventually(t, 30*time.Second, "JobAlreadyActive", func() bool { return h.hasEvent("resume", "JobAlreadyActive") })
	h.finish(run.Metadata.Name, kplanev1.JobComplete)
	h.waitJob(JobName("resume", minute(cj, 2)))
	if got := h.jobNames(cj); len(got) != 3 {
		t.Errorf("jobs %v: want the run, the manual Job and the next run", got)
	}
}

// TestLeaderFailover runs two replicas on the Lease kplane-system/cronjobctl:
// one creates the runs; after it stops, the other takes over and creates
// the next run, and no run ever has two Jobs (names are per run).
func TestLeaderFailover(t *testing.T) {
	srv := testserver.Start(t)
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // test teardown: nothing to report
	clock := newFakeClock(time.Now())
	a := controllertest.Run(t, srv.Addr(), NewService(WithClock(clock)), controllertest.LeaderElection("cron-a")...)
	h := &harness{t: t, ctx: context.Background(), c: c, clock: clock}
	lease := func() string {
		l, err := client.Leases(c).Get(h.ctx, kplanev1.NamespaceSystem, "cronjobctl")
		if err != nil {
			return ""
		}
		return l.GetSpec().GetHolderIdentity()
	}
	testutil.Eventually(t, 30*time.Second, "cron-a leads", func() bool { return lease() == "cron-a" })
	controllertest.Run(t, srv.Addr(), NewService(WithClock(clock)), controllertest.LeaderElection("cron-b")...)
	cj := h.createCronJob("ha", kplanev1.ConcurrencyPolicyAllow, 5, 1)
	clock.Set(minute(cj, 1).Add(time.Second))
	h.waitJob(JobName("ha", minute(cj, 1)))
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "cron-b leads", func() bool { return lease() == "cron-b" })
	clock.Set(minute(cj, 2).Add(time.Second))
	h.waitJob(JobName("ha", minute(cj, 2)))
	testutil.Eventually(t, 30*time.Second, "two runs in the status", func() bool {
		return len(activeNames(h.cronJob("ha"))) == 2 && h.cronJob("ha").GetStatus().GetLastScheduleTime().AsTime().Equal(minute(cj, 2))
	})
	if got := h.jobNames(cj); len(got) != 2 {
		t.Errorf("jobs %v, want one per run", got)
	}
}
