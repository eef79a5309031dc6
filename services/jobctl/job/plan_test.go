package job

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func testJob(mutate func(*kplanev1.JobSpec)) *kplanev1.Job {
	j := newJob("j", func(s *kplanev1.JobSpec) {
		s.Completions, s.Parallelism, s.BackoffLimit = proto.Int32(3), proto.Int32(2), proto.Int32(6)
		s.CompletionMode = kplanev1.JobCompletionNonIndexed
		if mutate != nil {
			mutate(s)
		}
	})
	j.Metadata.Uid = "job-uid"
	j.Status = &kplanev1.JobStatus{StartTime: timestamppb.New(t0)}
	return j
}

// pod is a pod of j: phase "" is running; index -1 for NonIndexed.
func pod(j *kplanev1.Job, name string, index int, phase string, code int32, finalizer bool) *kplanev1.Pod {
	p := NewPod(j, index, 0)
	p.Metadata.Name, p.Metadata.Uid = name, "uid-"+name
	p.Metadata.CreationTimestamp = timestamppb.New(t0)
	if !finalizer {
		p.Metadata.Finalizers = nil
	}
	switch phase {
	case "":
		p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning}
	default:
		p.Status = &kplanev1.PodStatus{Phase: phase, ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "c",
			State: &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{ExitCode: code, FinishedAt: timestamppb.New(t0)}}}}}
	}
	return p
}

func decide(t *testing.T, j *kplanev1.Job, pods ...*kplanev1.Pod) Plan {
	t.Helper()
	p, err := Decide(Input{Job: j, Pods: pods, Now: t0.Add(time.Second), Manage: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func names(pods []*kplanev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, p.GetMetadata().GetName())
	}
	return fmt.Sprint(s)
}

func TestRecordThenRemoveThenMove(t *testing.T) {
	j := testJob(nil)
	a := pod(j, "a", -1, kplanev1.PodSucceeded, 0, true)
	// 1. A finished pod is recorded as uncounted; its finalizer stays.
	p := decide(t, j, a)
	if got := p.Status.GetUncountedTerminatedPods().GetSucceeded(); len(got) != 1 || got[0] != "uid-a" || p.Status.GetSucceeded() != 0 {
		t.Fatalf("step 1 status %v", p.Status)
	}
	if len(p.RemoveFinalizers) != 0 {
		t.Fatalf("finalizer removed before the record was written: %s", names(p.RemoveFinalizers))
	}
	// 2. Once the status holds the record, the finalizer goes.
	j.Status = p.Status
	p = decide(t, j, a)
	if names(p.RemoveFinalizers) != "[a]" || !proto.Equal(p.Status, j.Status) {
		t.Fatalf("step 2: remove %s, status %v", names(p.RemoveFinalizers), p.Status)
	}
	// 3. Without the finalizer the record moves into succeeded, once.
	a.Metadata.Finalizers = nil
	p = decide(t, j, a)
	if p.Status.GetSucceeded() != 1 || p.Status.GetUncountedTerminatedPods() != nil {
		t.Fatalf("step 3 status %v", p.Status)
	}
	j.Status = p.Status
	if p = decide(t, j, a); p.Status.GetSucceeded() != 1 {
		t.Fatalf("counted twice: %v", p.Status)
	}
	// A recorded pod that is gone altogether also moves.
	j2 := testJob(nil)
	j2.Status.UncountedTerminatedPods = &kplanev1.UncountedTerminatedPods{Failed: []string{"uid-gone"}}
	if p = decide(t, j2); p.Status.GetFailed() != 1 || p.Status.GetUncountedTerminatedPods() != nil {
		t.Fatalf("gone pod: %v", p.Status)
	}
}

func TestNonIndexedCreatesUpToParallelismAndCompletions(t *testing.T) {
	j := testJob(nil)
	if p := decide(t, j); p.Create != 2 {
		t.Fatalf("create %d, want parallelism 2", p.Create)
	}
	// Two succeeded (one counted, one uncounted): one more is wanted.
	j.Status.Succeeded = 1
	j.Status.UncountedTerminatedPods = &kplanev1.UncountedTerminatedPods{Succeeded: []string{"uid-x"}}
	x := pod(j, "x", -1, kplanev1.PodSucceeded, 0, true)
	if p := decide(t, j, x); p.Create != 1 {
		t.Fatalf("create %d, want 1", p.Create)
	}
	// Too many active (parallelism lowered): the newest unscheduled go first.
	j = testJob(func(s *kplanev1.JobSpec) { s.Parallelism = proto.Int32(1) })
	a, b := pod(j, "a", -1, "", 0, true), pod(j, "b", -1, "", 0, true)
	a.Spec.NodeName = "n1"
	if p := decide(t, j, a, b); names(p.Delete) != "[b]" || p.Create != 0 {
		t.Fatalf("delete %s create %d", names(p.Delete), p.Create)
	}
	// Not managing (expectations pending): no creates.
	if p, _ := Decide(Input{Job: testJob(nil), Now: t0, Manage: false}); p.Create != 0 {
		t.Fatalf("created while expectations pending")
	}
}

func TestWorkQueueFinishesWhenOneSucceededAndNoneActive(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) { s.Completions = nil; s.Parallelism = proto.Int32(2) })
	a := pod(j, "a", -1, kplanev1.PodSucceeded, 0, false)
	b := pod(j, "b", -1, "", 0, true)
	j.Status.Succeeded = 1
	p := decide(t, j, a, b)
	if p.Create != 0 || condition(&kplanev1.Job{Status: p.Status}, kplanev1.JobSuccessCriteriaMet) != nil {
		t.Fatalf("while b runs: create %d, conditions %v", p.Create, p.Status.GetConditions())
	}
	b.Status.Phase = kplanev1.PodSucceeded
	b.Metadata.Finalizers = nil
	j.Status.Succeeded = 2
	p = decide(t, j, a, b)
	js := &kplanev1.Job{Status: p.Status}
	if !isTrue(js, kplanev1.JobSuccessCriteriaMet) || !isTrue(js, kplanev1.JobComplete) || p.Status.GetCompletionTime() == nil {
		t.Fatalf("conditions %v", p.Status.GetConditions())
	}
}

func TestIndexedCreatesMissingIndexesLowestFirst(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) {
		s.CompletionMode = kplanev1.JobCompletionIndexed
		s.Completions, s.Parallelism = proto.Int32(5), proto.Int32(3)
	})
	j.Status.CompletedIndexes = "0"
	running := pod(j, "r1", 1, "", 0, true)
	dup := pod(j, "r1b", 1, "", 0, true)
	dup.Metadata.CreationTimestamp = timestamppb.New(t0.Add(time.Second))
	done := pod(j, "d3", 3, kplanev1.PodSucceeded, 0, true)
	p := decide(t, j, running, dup, done)
	if fmt.Sprint(p.CreateIndexes) != "[2 4]" {
		t.Errorf("create %v, want [2 4]", p.CreateIndexes)
	}
	if names(p.Delete) != "[r1b]" {
		t.Errorf("delete %s, want the newer duplicate", names(p.Delete))
	}
	if p.Status.GetCompletedIndexes() != "0,3" || p.Status.GetSucceeded() != 2 {
		t.Errorf("status %v", p.Status)
	}
	// The index is recorded: the pod's finalizer may go; no second count.
	j.Status = p.Status
	if p = decide(t, j, running, done); names(p.RemoveFinalizers) != "[d3]" || p.Status.GetSucceeded() != 2 {
		t.Errorf("remove %s, succeeded %d", names(p.RemoveFinalizers), p.Status.GetSucceeded())
	}
}

func TestIndexStrings(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "0,1": "0,1", "0,1,2": "0-2", "3,0-1,5-7": "0,1,3,5-7"} {
		s, err := parseIndexes(in, 10)
		if err != nil || s.String() != want {
			t.Errorf("%q: %q %v, want %q", in, s.String(), err, want)
		}
	}
	for _, bad := range []string{"x", "1-", "5-3", "10", "-1"} {
		if _, err := parseIndexes(bad, 10); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	j := testJob(func(s *kplanev1.JobSpec) { s.CompletionMode = kplanev1.JobCompletionIndexed })
	j.Status.CompletedIndexes = "7"
	if _, err := Decide(Input{Job: j, Now: t0}); err == nil {
		t.Error("an out-of-range completedIndexes was accepted")
	}
}

func TestBackoffLimitAndRestarts(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) { s.BackoffLimit = proto.Int32(1) })
	j.Status.Failed = 1
	f := pod(j, "f", -1, kplanev1.PodFailed, 1, true)
	p := decide(t, j, f)
	js := &kplanev1.Job{Status: p.Status}
	if c := condition(js, kplanev1.JobFailureTarget); c.GetReason() != kplanev1.JobReasonBackoffLimitExceeded {
		t.Fatalf("conditions %v", p.Status.GetConditions())
	}
	if isTrue(js, kplanev1.JobFailed) {
		t.Fatal("Failed before the failed pod is counted")
	}
	// OnFailure: container restarts count against the limit too.
	j = testJob(func(s *kplanev1.JobSpec) {
		s.BackoffLimit = proto.Int32(2)
		s.Template.Spec.RestartPolicy = kplanev1.RestartPolicyOnFailure
	})
	r := pod(j, "r", -1, "", 0, true)
	r.Status.ContainerStatuses = []*kplanev1.ContainerStatus{{Name: "c", RestartCount: 3}}
	p = decide(t, j, r)
	if c := condition(&kplanev1.Job{Status: p.Status}, kplanev1.JobFailureTarget); c.GetReason() != kplanev1.JobReasonBackoffLimitExceeded || names(p.Delete) != "[r]" {
		t.Fatalf("restarts: conditions %v delete %s", p.Status.GetConditions(), names(p.Delete))
	}
}

func TestBackoffDelaysReplacements(t *testing.T) {
	b := Backoff{Base: 10 * time.Second, Cap: 6 * time.Minute}
	for n, want := range map[int]time.Duration{0: 0, 1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 6: 320 * time.Second, 7: 6 * time.Minute, 30: 6 * time.Minute} {
		if got := b.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
	j := testJob(func(s *kplanev1.JobSpec) { s.Parallelism = proto.Int32(1) })
	f1, f2 := pod(j, "f1", -1, kplanev1.PodFailed, 1, false), pod(j, "f2", -1, kplanev1.PodFailed, 1, false)
	j.Status.Failed = 2
	p, err := Decide(Input{Job: j, Pods: []*kplanev1.Pod{f1, f2}, Now: t0.Add(5 * time.Second), Manage: true, Backoff: b})
	if err != nil || p.Create != 0 || p.RecheckAfter != 15*time.Second {
		t.Fatalf("within back-off: create %d recheck %v (%v)", p.Create, p.RecheckAfter, err)
	}
	p, _ = Decide(Input{Job: j, Pods: []*kplanev1.Pod{f1, f2}, Now: t0.Add(20 * time.Second), Manage: true, Backoff: b})
	if p.Create != 1 {
		t.Fatalf("after back-off: create %d", p.Create)
	}
}

func TestFailurePolicyRules(t *testing.T) {
	fp := &kplanev1.PodFailurePolicy{Rules: []*kplanev1.PodFailurePolicyRule{
		{Action: kplanev1.PodFailurePolicyActionIgnore, OnPodConditions: []*kplanev1.PodFailurePolicyOnPodConditionsPattern{{Type: kplanev1.PodDisruptionTarget, Status: kplanev1.ConditionTrue}}},
		{Action: kplanev1.PodFailurePolicyActionFailJob, OnExitCodes: &kplanev1.PodFailurePolicyOnExitCodesRequirement{ContainerName: proto.String("c"), Operator: "NotIn", Values: []int32{1, 2}}},
		{Action: kplanev1.PodFailurePolicyActionIgnore, OnExitCodes: &kplanev1.PodFailurePolicyOnExitCodesRequirement{Operator: "In", Values: []int32{2}}},
	}}
	j := testJob(func(s *kplanev1.JobSpec) { s.PodFailurePolicy = fp })
	for code, want := range map[int32]string{1: "Count", 2: "Ignore", 3: "FailJob"} {
		if got := failureAction(fp, pod(j, "p", -1, kplanev1.PodFailed, code, true)); got != want {
			t.Errorf("exit %d: %s, want %s", code, got, want)
		}
	}
	disrupted := pod(j, "p", -1, kplanev1.PodFailed, 3, true)
	disrupted.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodDisruptionTarget, Status: kplanev1.ConditionTrue}}
	if got := failureAction(fp, disrupted); got != "Ignore" {
		t.Errorf("disrupted: %s", got)
	}
	// An ignored failure's finalizer goes at once, and it counts nowhere.
	p := decide(t, j, pod(j, "i", -1, kplanev1.PodFailed, 2, true))
	if names(p.RemoveFinalizers) != "[i]" || p.Status.GetUncountedTerminatedPods() != nil {
		t.Errorf("ignored: remove %s status %v", names(p.RemoveFinalizers), p.Status)
	}
}

func TestBackoffLimitPerIndex(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) {
		s.CompletionMode = kplanev1.JobCompletionIndexed
		s.Completions, s.Parallelism = proto.Int32(3), proto.Int32(3)
		s.BackoffLimitPerIndex, s.MaxFailedIndexes = proto.Int32(1), proto.Int32(1)
	})
	// Index 0 failed twice (the second pod carried failure count 1): the index fails.
	f := pod(j, "f", 0, kplanev1.PodFailed, 1, true)
	f.Metadata.Annotations[kplanev1.AnnotationJobIndexFailureCount] = "1"
	g := pod(j, "g", 1, kplanev1.PodFailed, 1, true) // first failure of index 1: retried
	p := decide(t, j, f, g)
	if p.Status.GetFailedIndexes() != "0" || fmt.Sprint(p.CreateIndexes) != "[1 2]" || p.IndexFailures[1] != 1 {
		t.Fatalf("failedIndexes %q create %v failures %v", p.Status.GetFailedIndexes(), p.CreateIndexes, p.IndexFailures)
	}
	if np := NewPod(j, 1, p.IndexFailures[1]); np.Metadata.Annotations[kplanev1.AnnotationJobIndexFailureCount] != "1" {
		t.Fatalf("replacement annotations %v", np.Metadata.Annotations)
	}
	// A second failed index exceeds maxFailedIndexes 1.
	g.Metadata.Annotations[kplanev1.AnnotationJobIndexFailureCount] = "1"
	p = decide(t, j, f, g)
	if c := condition(&kplanev1.Job{Status: p.Status}, kplanev1.JobFailureTarget); c.GetReason() != kplanev1.JobReasonMaxFailedIndexesExceeded {
		t.Fatalf("conditions %v", p.Status.GetConditions())
	}
}

func TestSuccessPolicy(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) {
		s.CompletionMode = kplanev1.JobCompletionIndexed
		s.Completions, s.Parallelism = proto.Int32(5), proto.Int32(5)
		s.SuccessPolicy = &kplanev1.SuccessPolicy{Rules: []*kplanev1.SuccessPolicyRule{{SucceededIndexes: proto.String("0-2"), SucceededCount: proto.Int32(2)}}}
	})
	j.Status.CompletedIndexes = "0,2"
	r := pod(j, "r", 4, "", 0, true)
	p := decide(t, j, r)
	js := &kplanev1.Job{Status: p.Status}
	if c := condition(js, kplanev1.JobSuccessCriteriaMet); c.GetReason() != kplanev1.JobReasonSuccessPolicy || names(p.Delete) != "[r]" || isTrue(js, kplanev1.JobComplete) {
		t.Fatalf("conditions %v delete %s", p.Status.GetConditions(), names(p.Delete))
	}
}

func TestSuspendedJobDeletesActiveAndDropsThem(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) { s.Suspend = proto.Bool(true) })
	a := pod(j, "a", -1, "", 0, true)
	p := decide(t, j, a)
	if names(p.Delete) != "[a]" || p.Create != 0 || !isTrue(&kplanev1.Job{Status: p.Status}, kplanev1.JobSuspended) {
		t.Fatalf("delete %s create %d conditions %v", names(p.Delete), p.Create, p.Status.GetConditions())
	}
	a.Metadata.DeletionTimestamp = timestamppb.New(t0)
	j.Status = p.Status
	p = decide(t, j, a)
	if names(p.RemoveFinalizers) != "[a]" || p.Status.GetUncountedTerminatedPods() != nil || p.Status.GetTerminating() != 1 {
		t.Fatalf("suspended deletion: remove %s status %v", names(p.RemoveFinalizers), p.Status)
	}
}

func TestDeadlineAndTTL(t *testing.T) {
	j := testJob(func(s *kplanev1.JobSpec) { s.ActiveDeadlineSeconds = proto.Int64(10) })
	p := decide(t, j)
	if p.RecheckAfter != 9*time.Second {
		t.Fatalf("recheck %v, want the 9 s left of the deadline", p.RecheckAfter)
	}
	p, _ = Decide(Input{Job: j, Now: t0.Add(10 * time.Second), Manage: true})
	js := &kplanev1.Job{Status: p.Status}
	if !isTrue(js, kplanev1.JobFailed) || condition(js, kplanev1.JobFailed).GetReason() != kplanev1.JobReasonDeadlineExceeded {
		t.Fatalf("conditions %v", p.Status.GetConditions())
	}
	j = testJob(func(s *kplanev1.JobSpec) { s.TtlSecondsAfterFinished = proto.Int32(60) })
	j.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.JobComplete, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.New(t0)}}
	j.Status.CompletionTime = timestamppb.New(t0)
	if p = decide(t, j); p.Expired || p.RecheckAfter != 59*time.Second {
		t.Fatalf("ttl: expired %v recheck %v", p.Expired, p.RecheckAfter)
	}
	if p, _ = Decide(Input{Job: j, Now: t0.Add(time.Minute)}); !p.Expired {
		t.Fatal("ttl not expired after 60 s")
	}
}

func TestPodReplacementPolicy(t *testing.T) {
	for policy, wantCreate := range map[string]int{kplanev1.JobPodReplacementTerminatingOrFailed: 2, kplanev1.JobPodReplacementFailed: 1} {
		j := testJob(func(s *kplanev1.JobSpec) { s.PodReplacementPolicy = proto.String(policy) })
		j.Status.Failed = 1
		gone := pod(j, "gone", -1, "", 0, false) // counted, finalizer removed, still terminating
		gone.Metadata.DeletionTimestamp = timestamppb.New(t0.Add(-time.Hour))
		p := decide(t, j, gone)
		if p.Create != wantCreate || p.Status.GetTerminating() != 1 {
			t.Errorf("%s: create %d (want %d), terminating %d", policy, p.Create, wantCreate, p.Status.GetTerminating())
		}
	}
}

func TestNewPodIsControlledAndTracked(t *testing.T) {
	j := testJob(nil)
	p := NewPod(j, -1, 0)
	ref := p.GetMetadata().GetOwnerReferences()
	if len(ref) != 1 || ref[0].GetUid() != "job-uid" || !ref[0].GetController() || !ref[0].GetBlockOwnerDeletion() || ref[0].GetKind() != "Job" {
		t.Fatalf("owner references %v", ref)
	}
	if p.GetMetadata().GetGenerateName() != "j-" || !hasFinalizer(p) || p.GetSpec().GetHostname() != "" {
		t.Fatalf("pod %v", p.GetMetadata())
	}
	if _, ok := p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]; ok {
		t.Fatal("a NonIndexed pod has an index")
	}
	// The template is not modified by building a pod from it.
	ij := testJob(func(s *kplanev1.JobSpec) { s.CompletionMode = kplanev1.JobCompletionIndexed })
	NewPod(ij, 1, 0)
	ip := NewPod(ij, 2, 0)
	if env := ip.GetSpec().GetContainers()[0].GetEnv(); len(env) != 1 || env[0].GetValue() != "2" ||
		len(ij.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetEnv()) != 0 {
		t.Fatalf("env %v; the template's must stay empty", env)
	}
}
