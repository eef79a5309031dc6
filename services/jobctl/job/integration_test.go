package job

import (
	"context"

	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 20 * time.Second

// The tests play the node agent themselves: they move the controller's
// pods to Succeeded or Failed with an exit code.

func newJob(name string, mutate func(*kplanev1.JobSpec)) *kplanev1.Job {
	s := &kplanev1.JobSpec{
		Template: &kplanev1.PodTemplateSpec{
			Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
				Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	return &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"}, Spec: s}
}

func create(t *testing.T, api kplanev1.ResourcesClient, j *kplanev1.Job) *kplanev1.Job {
	t.Helper()
	resp, err := api.Create(context.Background(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(j)})
	if err != nil {
		t.Fatalf("create job %s: %v", j.GetMetadata().GetName(), err)
	}
	return resp.GetObject().GetJob()
}

func getJob(t *testing.T, api kplanev1.ResourcesClient, name string) *kplanev1.Job {
	t.Helper()
	resp, err := api.Get(context.Background(), &kplanev1.GetRequest{Kind: "Job", Namespace: "default", Name: name})
	if err != nil {
		t.Fatalf("get job %s: %v", name, err)
	}
	return resp.GetObject().GetJob()
}

// podsOf lists the pods the job controls.
func podsOf(t *testing.T, api kplanev1.ResourcesClient, j *kplanev1.Job) []*kplanev1.Pod {
	t.Helper()
	resp, err := api.List(context.Background(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	var out []*kplanev1.Pod
	for _, o := range resp.GetItems() {
		if ref := o.Meta().GetOwnerReferences(); len(ref) == 1 && ref[0].GetUid() == j.GetMetadata().GetUid() {
			out = append(out, o.GetPod())
		}
	}
	return out
}

func activePods(pods []*kplanev1.Pod) []*kplanev1.Pod {
	return slices.DeleteFunc(slices.Clone(pods), func(p *kplanev1.Pod) bool {
		return apiutil.IsPodTerminal(p) || p.GetMetadata().GetDeletionTimestamp() != nil
	})
}

// finish ends a pod with the exit code (0: Succeeded, else Failed).
func finish(t *testing.T, api kplanev1.ResourcesClient, pod *kplanev1.Pod, code int32) {
	t.Helper()
	p := proto.Clone(pod).(*kplanev1.Pod)
	phase := kplanev1.PodSucceeded
	if code != 0 {
		phase = kplanev1.PodFailed
	}
	p.Status = &kplanev1.PodStatus{Phase: phase, ContainerStatuses: []*kplanev1.ContainerStatus{{
		Name: "c", State: &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{
			ExitCode: code, FinishedAt: timestamppb.Now()}},
	}}}
	if _, err := api.UpdateStatus(context.Background(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(p)}); err != nil {
		t.Fatalf("finish pod %s: %v", pod.GetMetadata().GetName(), err)
	}
}

func condition(j *kplanev1.Job, typ string) *kplanev1.Condition {
	return apiutil.FindCondition(j.GetStatus().GetConditions(), typ)
}

func isTrue(j *kplanev1.Job, typ string) bool {
	return condition(j, typ).GetStatus() == kplanev1.ConditionTrue
}

// waitFinished waits for Complete or Failed and checks that the interim
// condition came with it and that no pod keeps the tracking finalizer.
func waitFinished(t *testing.T, api kplanev1.ResourcesClient, name, final string) *kplanev1.Job {
	t.Helper()
	var j *kplanev1.Job
	testutil.Eventually(t, wait, "job "+name+" "+final, func() bool {
		j = getJob(t, api, name)
		return isTrue(j, final)
	})
	interim := kplanev1.JobSuccessCriteriaMet
	if final == kplanev1.JobFailed {
		interim = kplanev1.JobFailureTarget
	}
	if !isTrue(j, interim) {
		t.Errorf("job %s is %s without %s: %v", name, final, interim, j.GetStatus().GetConditions())
	}
	if u := j.GetStatus().GetUncountedTerminatedPods(); len(u.GetSucceeded())+len(u.GetFailed()) > 0 {
		t.Errorf("finished job %s still has uncounted pods %v", name, u)
	}
	for _, p := range podsOf(t, api, j) {
		if hasFinalizer(p) {
			t.Errorf("pod %s of finished job keeps the tracking finalizer", p.GetMetadata().GetName())
		}
	}
	return j
}

// runPods plays the node agent until the job finishes: every active pod
// ends with outcome(attempt) (attempts numbered from 0 in the order the
// test sees the pods), and at no poll are more than maxActive pods active.
func runPods(t *testing.T, api kplanev1.ResourcesClient, j *kplanev1.Job, maxActive int, outcome func(attempt int) int32) (succeeded, failed int) {
	t.Helper()
	seen := map[string]bool{}
	attempt := 0
	testutil.Eventually(t, wait, "job "+j.GetMetadata().GetName()+" to finish", func() bool {
		cur := getJob(t, api, j.GetMetadata().GetName())
		if isTrue(cur, kplanev1.JobComplete) || isTrue(cur, kplanev1.JobFailed) {
			return true
		}
		active := activePods(podsOf(t, api, j))
		if len(active) > maxActive {
			t.Fatalf("%d pods active, parallelism is %d", len(active), maxActive)
		}
		for _, p := range active {
			if seen[p.GetMetadata().GetUid()] {
				continue
			}
			seen[p.GetMetadata().GetUid()] = true
			code := outcome(attempt)
			attempt++
			if code == 0 {
				succeeded++
			} else {
				failed++
			}
			finish(t, api, p, code)
		}
		return false
	})
	return succeeded, failed
}

func TestNonIndexedCountsEveryPodExactlyOnce(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	j := create(t, api, newJob("count", func(s *kplanev1.JobSpec) {
		s.Completions, s.Parallelism, s.BackoffLimit = proto.Int32(7), proto.Int32(3), proto.Int32(100)
	}))
	// Every third attempt fails.
	succ, fail := runPods(t, api, j, 3, func(a int) int32 {
		if a%3 == 1 {
			return 1
		}
		return 0
	})
	j = waitFinished(t, api, "count", kplanev1.JobComplete)
	st := j.GetStatus()
	if succ != 7 || st.GetSucceeded() != 7 || int(st.GetFailed()) != fail || st.GetActive() != 0 {
		t.Errorf("status succeeded %d failed %d active %d; the pods: %d succeeded, %d failed", st.GetSucceeded(), st.GetFailed(), st.GetActive(), succ, fail)
	}
	if st.GetStartTime() == nil || st.GetCompletionTime() == nil || st.GetCompletionTime().AsTime().Before(st.GetStartTime().AsTime()) {
		t.Errorf("startTime %v completionTime %v", st.GetStartTime(), st.GetCompletionTime())
	}
	if c := condition(j, kplanev1.JobComplete); c.GetReason() != kplanev1.JobReasonCompletionsReached {
		t.Errorf("Complete reason %q", c.GetReason())
	}
	// The pods carry the generated selector's labels.
	for _, p := range podsOf(t, api, j) {
		if p.GetMetadata().GetLabels()[kplanev1.LabelControllerUID] != j.GetMetadata().GetUid() || p.GetMetadata().GetLabels()[kplanev1.LabelJobName] != "count" {
			t.Fatalf("pod labels %v", p.GetMetadata().GetLabels())
		}
	}
}

func TestIndexedPodsGetTheirIndex(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0", "--sync-batch-period", "0")
	j := create(t, api, newJob("idx", func(s *kplanev1.JobSpec) {
		s.Completions, s.Parallelism = proto.Int32(4), proto.Int32(4)
		s.CompletionMode = kplanev1.JobCompletionIndexed
	}))
	var pods []*kplanev1.Pod
	testutil.Eventually(t, wait, "4 pods", func() bool {
		pods = podsOf(t, api, j)
		return len(pods) == 4
	})
	seen := map[string]bool{}
	for _, p := range pods {
		idx := p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]
		if seen[idx] {
			t.Fatalf("index %s given twice", idx)
		}
		seen[idx] = true
		env := p.GetSpec().GetContainers()[0].GetEnv()
		if !strings.HasPrefix(p.GetMetadata().GetName(), "idx-"+idx+"-") || p.GetSpec().GetHostname() != "idx-"+idx ||
			len(env) != 1 || env[0].GetName() != kplanev1.EnvJobCompletionIndex || env[0].GetValue() != idx ||
			!slices.Contains(p.GetMetadata().GetFinalizers(), kplanev1.FinalizerJobTracking) {
			t.Fatalf("pod %s: hostname %q env %v finalizers %v", p.GetMetadata().GetName(), p.GetSpec().GetHostname(), env, p.GetMetadata().GetFinalizers())
		}
	}
	// Index 2 fails once; its replacement carries index 2 again.
	for _, p := range pods {
		code := int32(0)
		if p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex] == "2" {
			code = 1
		}
		finish(t, api, p, code)
	}
	var repl *kplanev1.Pod
	testutil.Eventually(t, wait, "a replacement for index 2", func() bool {
		a := activePods(podsOf(t, api, j))
		if len(a) == 1 {
			repl = a[0]
		}
		return repl != nil
	})
	if idx := repl.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]; idx != "2" {
		t.Fatalf("replacement has index %s", idx)
	}
	testutil.Eventually(t, wait, "completedIndexes 0,1,3", func() bool {
		return getJob(t, api, "idx").GetStatus().GetCompletedIndexes() == "0,1,3"
	})
	finish(t, api, repl, 0)
	j = waitFinished(t, api, "idx", kplanev1.JobComplete)
	if st := j.GetStatus(); st.GetCompletedIndexes() != "0-3" || st.GetSucceeded() != 4 || st.GetFailed() != 1 {
		t.Errorf("status: %v", st)
	}
}

func TestBackoffLimitExceeded(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	j := create(t, api, newJob("fail", func(s *kplanev1.JobSpec) { s.BackoffLimit = proto.Int32(2) }))
	_, fail := runPods(t, api, j, 1, func(int) int32 { return 1 })
	j = waitFinished(t, api, "fail", kplanev1.JobFailed)
	if c := condition(j, kplanev1.JobFailed); c.GetReason() != kplanev1.JobReasonBackoffLimitExceeded || fail != 3 || j.GetStatus().GetFailed() != 3 {
		t.Errorf("Failed reason %q, failed %d (pods %d), want BackoffLimitExceeded after 3", c.GetReason(), j.GetStatus().GetFailed(), fail)
	}
	if j.GetStatus().GetCompletionTime() != nil {
		t.Errorf("a failed job has no completionTime")
	}
}

func TestPodFailurePolicy(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	rules := []*kplanev1.PodFailurePolicyRule{
		{Action: kplanev1.PodFailurePolicyActionIgnore, OnExitCodes: &kplanev1.PodFailurePolicyOnExitCodesRequirement{Operator: "In", Values: []int32{42}}},
		{Action: kplanev1.PodFailurePolicyActionFailJob, OnExitCodes: &kplanev1.PodFailurePolicyOnExitCodesRequirement{Operator: "In", Values: []int32{7}}},
	}
	// Exit 42 is ignored: with backoffLimit 0, three of them still do not fail the job.
	j := create(t, api, newJob("ignore", func(s *kplanev1.JobSpec) {
		s.BackoffLimit = proto.Int32(0)
		s.PodFailurePolicy = &kplanev1.PodFailurePolicy{Rules: rules}
	}))
	succ, fail := runPods(t, api, j, 1, func(a int) int32 {
		if a < 3 {
			return 42
		}
		return 0
	})
	j = waitFinished(t, api, "ignore", kplanev1.JobComplete)
	if succ != 1 || fail != 3 || j.GetStatus().GetFailed() != 0 || j.GetStatus().GetSucceeded() != 1 {
		t.Errorf("status %v after 3 ignored failures", j.GetStatus())
	}
	// Exit 7 fails the job at once, whatever backoffLimit says.
	j = create(t, api, newJob("failjob", func(s *kplanev1.JobSpec) {
		s.BackoffLimit = proto.Int32(10)
		s.PodFailurePolicy = &kplanev1.PodFailurePolicy{Rules: rules}
	}))
	runPods(t, api, j, 1, func(int) int32 { return 7 })
	j = waitFinished(t, api, "failjob", kplanev1.JobFailed)
	if c := condition(j, kplanev1.JobFailed); c.GetReason() != kplanev1.JobReasonPodFailurePolicy || j.GetStatus().GetFailed() != 1 {
		t.Errorf("Failed %v, failed %d", c, j.GetStatus().GetFailed())
	}
}

func TestSuspendAndResume(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	j := create(t, api, newJob("susp", func(s *kplanev1.JobSpec) { s.Completions, s.Parallelism = proto.Int32(2), proto.Int32(2) }))
	testutil.Eventually(t, wait, "2 active pods", func() bool { return len(activePods(podsOf(t, api, j))) == 2 })
	setSuspend(t, api, "susp", true)
	testutil.Eventually(t, wait, "suspended with no pods left", func() bool {
		cur := getJob(t, api, "susp")
		return isTrue(cur, kplanev1.JobSuspended) && len(podsOf(t, api, j)) == 0 && cur.GetStatus().GetActive() == 0
	})
	if f := getJob(t, api, "susp").GetStatus().GetFailed(); f != 0 {
		t.Errorf("pods deleted by suspension counted as %d failures", f)
	}
	setSuspend(t, api, "susp", false)
	testutil.Eventually(t, wait, "resumed with 2 pods", func() bool {
		cur := getJob(t, api, "susp")
		c := condition(cur, kplanev1.JobSuspended)
		return c.GetStatus() == kplanev1.ConditionFalse && c.GetReason() == kplanev1.JobReasonResumed && len(activePods(podsOf(t, api, j))) == 2
	})
}

// setSuspend writes spec.suspend with compare-and-swap (the controller
// writes the status meanwhile).
func setSuspend(t *testing.T, api kplanev1.ResourcesClient, name string, v bool) {
	t.Helper()
	_, _, err := controller.Update(context.Background(), api, getJob(t, api, name), func(cur *kplanev1.Job) *kplanev1.Job {
		next := proto.Clone(cur).(*kplanev1.Job)
		next.Spec.Suspend = proto.Bool(v)
		return next
	})
	if err != nil {
		t.Fatalf("set suspend %v: %v", v, err)
	}
}

func TestActiveDeadline(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	create(t, api, newJob("late", func(s *kplanev1.JobSpec) {
		s.Parallelism, s.Completions, s.ActiveDeadlineSeconds = proto.Int32(2), proto.Int32(2), proto.Int64(1)
	}))
	j := waitFinished(t, api, "late", kplanev1.JobFailed)
	if c := condition(j, kplanev1.JobFailed); c.GetReason() != kplanev1.JobReasonDeadlineExceeded {
		t.Errorf("Failed reason %q", c.GetReason())
	}
	testutil.Eventually(t, wait, "the running pods deleted", func() bool { return len(activePods(podsOf(t, api, j))) == 0 })
}

func TestTTLAfterFinishedDeletesTheJob(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	j := create(t, api, newJob("ttl", func(s *kplanev1.JobSpec) { s.TtlSecondsAfterFinished = proto.Int32(0) }))
	var pods []*kplanev1.Pod
	testutil.Eventually(t, wait, "a pod", func() bool { pods = podsOf(t, api, j); return len(pods) == 1 })
	finish(t, api, pods[0], 0)
	testutil.Eventually(t, wait, "the job deleted", func() bool {
		_, err := api.Get(context.Background(), &kplanev1.GetRequest{Kind: "Job", Namespace: "default", Name: "ttl"})
		return err != nil && strings.Contains(err.Error(), "not found")
	})
}

// TestCrashBetweenWrites sets up what a controller that crashed half-way
// leaves behind, then starts one: a pod recorded as uncounted whose
// finalizer is still on (the crash came before the removal), a pod
// recorded whose finalizer is gone (the crash came before the move into
// succeeded), and one already counted. Each must count exactly once.
func TestCrashBetweenWrites(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	j := create(t, api, newJob("crash", func(s *kplanev1.JobSpec) { s.Completions, s.Parallelism = proto.Int32(4), proto.Int32(1) }))
	mk := func(finalizer bool) *kplanev1.Pod {
		p := NewPod(j, -1, 0)
		if !finalizer {
			p.Metadata.Finalizers = nil
		}
		resp, err := api.Create(context.Background(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(p)})
		if err != nil {
			t.Fatal(err)
		}
		pod := resp.GetObject().GetPod()
		finish(t, api, pod, 0)
		return pod
	}
	recordedWithFinalizer, recordedNoFinalizer, counted, unrecorded := mk(true), mk(false), mk(false), mk(true)
	j.Status = &kplanev1.JobStatus{Succeeded: 1, StartTime: timestamppb.Now(), UncountedTerminatedPods: &kplanev1.UncountedTerminatedPods{
		Succeeded: []string{recordedWithFinalizer.GetMetadata().GetUid(), recordedNoFinalizer.GetMetadata().GetUid()}}}
	if _, err := api.UpdateStatus(context.Background(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(j)}); err != nil {
		t.Fatal(err)
	}
	_ = counted
	_ = unrecorded
	ctl := controllertest.Run(t, srv.Addr(), NewService(), "--backoff-scale", "0")
	j = waitFinished(t, api, "crash", kplanev1.JobComplete)
	if st := j.GetStatus(); st.GetSucceeded() != 4 || st.GetFailed() != 0 {
		t.Errorf("succeeded %d failed %d, want 4 and 0", st.GetSucceeded(), st.GetFailed())
	}
	if n := len(podsOf(t, api, j)); n != 4 {
		t.Errorf("%d pods, want the 4 made by the test (nothing to create)", n)
	}
	if err := ctl.Stop(); err != nil {
		t.Error(err)
	}
}

// TestRestartMidJob stops the controller in the middle of a job and
// starts another: the count stays exact.
func TestRestartMidJob(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	first := controllertest.Run(t, srv.Addr(), NewService(), "--backoff-scale", "0")
	j := create(t, api, newJob("restart", func(s *kplanev1.JobSpec) {
		s.Completions, s.Parallelism = proto.Int32(6), proto.Int32(3)
		s.CompletionMode = kplanev1.JobCompletionIndexed
	}))
	var pods []*kplanev1.Pod
	testutil.Eventually(t, wait, "3 pods", func() bool { pods = activePods(podsOf(t, api, j)); return len(pods) == 3 })
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		finish(t, api, p, 0) // outcomes arrive while no controller runs
	}
	controllertest.Run(t, srv.Addr(), NewService(), "--backoff-scale", "0")
	runPods(t, api, j, 3, func(int) int32 { return 0 })
	j = waitFinished(t, api, "restart", kplanev1.JobComplete)
	if st := j.GetStatus(); st.GetSucceeded() != 6 || st.GetCompletedIndexes() != "0-5" {
		t.Errorf("status %v", st)
	}
	perIndex := map[string]int{}
	for _, p := range podsOf(t, api, j) {
		if p.GetStatus().GetPhase() == kplanev1.PodSucceeded {
			perIndex[p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]]++
		}
	}
	for idx, n := range perIndex {
		if n != 1 {
			t.Errorf("index %s succeeded %d times", idx, n)
		}
	}
}

// TestDeletedJobReleasesItsPods: pods whose Job is gone lose the tracking
// finalizer, or they would stay forever.
func TestDeletedJobReleasesItsPods(t *testing.T) {
	api, _ := controllertest.Start(t, NewService(), "--backoff-scale", "0")
	j := create(t, api, newJob("gone", func(s *kplanev1.JobSpec) { s.Parallelism, s.Completions = proto.Int32(2), proto.Int32(2) }))
	testutil.Eventually(t, wait, "2 pods", func() bool { return len(podsOf(t, api, j)) == 2 })
	if _, err := api.Delete(context.Background(), &kplanev1.DeleteRequest{Kind: "Job", Namespace: "default", Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "finalizers removed", func() bool {
		for _, p := range podsOf(t, api, j) {
			if hasFinalizer(p) {
				return false
			}
		}
		return true
	})
}

func TestBadFlags(t *testing.T) {
	srv := testserver.Start(t)
	for flag, want := range map[string]string{
		"--backoff-scale=-1":      "--backoff-scale must not be negative",
		"--sync-batch-period=-1s": "--sync-batch-period must not be negative",
	} {
		err := app.Run(context.Background(), NewService(), []string{"--apiserver", srv.Addr(), "--health-addr", "", "--leader-elect=false", flag})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v", flag, err)
		}
	}
}

// TestLeaderFailover runs two replicas; the first is stopped mid-Job (a
// leader or a standby, whichever it is), and the Job still counts exactly.
func TestLeaderFailover(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	a := controllertest.Run(t, srv.Addr(), NewService(), append(controllertest.LeaderElection("job-a"), "--backoff-scale", "0")...)
	controllertest.Run(t, srv.Addr(), NewService(), append(controllertest.LeaderElection("job-b"), "--backoff-scale", "0")...)
	j := create(t, api, newJob("failover", func(s *kplanev1.JobSpec) {
		s.Completions, s.Parallelism = proto.Int32(20), proto.Int32(5)
		s.CompletionMode = kplanev1.JobCompletionIndexed
	}))
	seen := map[string]bool{}
	testutil.Eventually(t, wait, "8 completions", func() bool {
		for _, p := range activePods(podsOf(t, api, j)) {
			if !seen[p.GetMetadata().GetUid()] {
				seen[p.GetMetadata().GetUid()] = true
				finish(t, api, p, 0)
			}
		}
		return getJob(t, api, "failover").GetStatus().GetSucceeded() >= 8
	})
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	runPods(t, api, j, 5, func(int) int32 { return 0 })
	j = waitFinished(t, api, "failover", kplanev1.JobComplete)
	if st := j.GetStatus(); st.GetSucceeded() != 20 || st.GetCompletedIndexes() != "0-19" {
		t.Errorf("status %v", st)
	}
	per := map[string]int{}
	for _, p := range podsOf(t, api, j) {
		if p.GetStatus().GetPhase() == kplanev1.PodSucceeded {
			per[p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]]++
		}
	}
	for idx, n := range per {
		if n != 1 {
			t.Errorf("index %s succeeded %d times", idx, n)
		}
	}
	if len(per) != 20 {
		t.Errorf("%d indexes succeeded, want 20", len(per))
	}
}
