package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func init() {
	binaries["jobctl"] = "services/jobctl"
	binaries["gcctl"] = "services/gcctl"
	binaries["ipamctl"] = "services/ipamctl"
}

// jobCluster is an apiserver, the scheduler, two exec-runtime node agents
// (pods are real processes with real exit codes), gcctl and jobctl with a
// back-off scaled down to 100 ms.
func newJobCluster(t *testing.T) *naCluster {
	t.Helper()
	c := newNACluster(t, true, "job-1", "job-2")
	startProcess(t, "gcctl", "gcctl", "", append(c.cfg.connArgs("gcctl"), "--log-level", "warn", "--leader-elect=false")...)
	startProcess(t, "jobctl", "jobctl", "", append(c.cfg.connArgs("jobctl"), "--log-level", "debug", "--leader-elect=false", "--backoff-scale", "0.01")...)
	return c
}

func e2eJob(name string, command string, mutate func(*kplanev1.JobSpec)) *kplanev1.Job {
	s := &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{
		RestartPolicy: kplanev1.RestartPolicyNever,
		Containers:    []*kplanev1.Container{{Name: "main", Image: "local", Command: []string{"sh", "-c", command}}},
	}}}
	mutate(s)
	return &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"}, Spec: s}
}

func (c *naCluster) createJob(j *kplanev1.Job) *kplanev1.Job {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(j)}, opt)
	if err != nil {
		c.t.Fatalf("create job %s: %v", j.GetMetadata().GetName(), err)
	}
	return resp.GetObject().GetJob()
}

func (c *naCluster) getJob(name string) *kplanev1.Job {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Job", Namespace: "default", Name: name}, opt)
	if err != nil {
		c.t.Fatalf("get job %s: %v", name, err)
	}
	return resp.GetObject().GetJob()
}

func (c *naCluster) jobPods(j *kplanev1.Job) []*kplanev1.Pod {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default",
		LabelSelector: kplanev1.LabelControllerUID + "=" + j.GetMetadata().GetUid()}, opt)
	if err != nil {
		c.t.Fatalf("list pods: %v", err)
	}
	out := make([]*kplanev1.Pod, 0, len(resp.GetItems()))
	for _, o := range resp.GetItems() {
		out = append(out, o.GetPod())
	}
	return out
}

func jobCond(j *kplanev1.Job, typ string) *kplanev1.Condition {
	for _, c := range j.GetStatus().GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// waitJob waits for the final condition, checking on the way that the
// status never reports more than maxActive active pods.
func (c *naCluster) waitJob(name, final string, maxActive int32) *kplanev1.Job {
	c.t.Helper()
	var j *kplanev1.Job
	c.eventually("job "+name+" "+final, func() bool {
		j = c.getJob(name)
		if a := j.GetStatus().GetActive(); a > maxActive {
			c.t.Fatalf("job %s reports %d active pods, parallelism %d", name, a, maxActive)
		}
		for _, t := range []string{kplanev1.JobComplete, kplanev1.JobFailed} {
			if jobCond(j, t).GetStatus() == kplanev1.ConditionTrue && t != final {
				c.t.Fatalf("job %s ended %s (%s), want %s", name, t, jobCond(j, t).GetReason(), final)
			}
		}
		return jobCond(j, final).GetStatus() == kplanev1.ConditionTrue
	})
	return j
}

func countPhases(pods []*kplanev1.Pod) (succeeded, failed int) {
	for _, p := range pods {
		switch p.GetStatus().GetPhase() {
		case kplanev1.PodSucceeded:
			succeeded++
		case kplanev1.PodFailed:
			failed++
		}
	}
	return succeeded, failed
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

// seededFails is the test's rule: attempt n (1-based, in the order the
// pods start) exits 1 when (n*7) mod 5 < 2, else 0.
func seededFails(n int) bool { return (n*7)%5 < 2 }

func TestJobsRunRealProcesses(t *testing.T) {
	c := newJobCluster(t)
	dir := t.TempDir()

	t.Run("exact counts with parallelism 3", func(t *testing.T) {
		log := filepath.Join(dir, "attempts")
		// Each pod appends "start <pod>", finds its attempt number among
		// the starts, sleeps a little so that pods overlap, appends
		// "end <pod> <code>" and exits with the seeded code.
		script := fmt.Sprintf(`f=%s; echo "start $KPLANE_POD_NAME" >> $f
n=$(grep '^start ' $f | grep -n "^start $KPLANE_POD_NAME\$" | cut -d: -f1)
code=0; if [ $(( (n * 7) %% 5 )) -lt 2 ]; then code=1; fi
sleep 0.3; echo "end $KPLANE_POD_NAME $code" >> $f; exit $code`, log)
		c.createJob(e2eJob("seeded", script, func(s *kplanev1.JobSpec) {
			s.Completions, s.Parallelism, s.BackoffLimit = proto.Int32(10), proto.Int32(3), proto.Int32(100)
		}))
		j := c.waitJob("seeded", kplanev1.JobComplete, 3)
		// The expected failures follow from the rule: attempts run until the 10th success.
		wantFail, ok := 0, 0
		for n := 1; ok < 10; n++ {
			if seededFails(n) {
				wantFail++
			} else {
				ok++
			}
		}
		lines := readLines(t, log)
		running, most, okLines, failLines := 0, 0, 0, 0
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "start_"):
				running++
				most = max(most, running)
			case strings.HasSuffix(l, "_0"):
				running--
				okLines++
			case strings.HasSuffix(l, "_1"):
				running--
				failLines++
			}
		}
		st := j.GetStatus()
		podOK, podFail := countPhases(c.jobPods(j))
		if st.GetSucceeded() != 10 || okLines != 10 || podOK != 10 {
			t.Errorf("succeeded: status %d, processes %d, pods %d; want 10", st.GetSucceeded(), okLines, podOK)
		}
		if int(st.GetFailed()) != wantFail || failLines != wantFail || podFail != wantFail {
			t.Errorf("failed: status %d, processes %d, pods %d; want %d", st.GetFailed(), failLines, podFail, wantFail)
		}
		if most > 3 {
			t.Errorf("%d processes ran at once, parallelism 3", most)
		}
		t.Logf("10 completions, %d failures, at most %d processes at once", wantFail, most)
	})

	t.Run("indexed pods each append their index once", func(t *testing.T) {
		out := filepath.Join(dir, "indexes")
		c.createJob(e2eJob("indexed", fmt.Sprintf(`echo "$KPLANE_JOB_COMPLETION_INDEX" >> %s`, out), func(s *kplanev1.JobSpec) {
			s.Completions, s.Parallelism = proto.Int32(5), proto.Int32(2)
			s.CompletionMode = kplanev1.JobCompletionIndexed
		}))
		j := c.waitJob("indexed", kplanev1.JobComplete, 2)
		lines := readLines(t, out)
		slices.Sort(lines)
		if strings.Join(lines, ",") != "0,1,2,3,4" {
			t.Errorf("indexes written: %v, want 0..4 once each", lines)
		}
		if st := j.GetStatus(); st.GetCompletedIndexes() != "0-4" || st.GetSucceeded() != 5 {
			t.Errorf("status %v", st)
		}
	})

	t.Run("deleting a job deletes its running pods", func(t *testing.T) {
		// The pods still carry the tracking finalizer: gcctl deletes them,
		// jobctl releases them once their Job is gone, the agents stop them.
		j := c.createJob(e2eJob("doomed", "sleep 600", func(s *kplanev1.JobSpec) {
			s.Parallelism, s.Completions = proto.Int32(2), proto.Int32(2)
		}))
		c.eventually("2 pods running", func() bool {
			n := 0
			for _, p := range c.jobPods(j) {
				if p.GetStatus().GetPhase() == kplanev1.PodRunning && slices.Contains(p.GetMetadata().GetFinalizers(), kplanev1.FinalizerJobTracking) {
					n++
				}
			}
			return n == 2
		})
		ctx, opt := call(t)
		if _, err := c.api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Job", Namespace: "default", Name: "doomed"}, opt); err != nil {
			t.Fatal(err)
		}
		c.eventually("the deleted job's pods gone", func() bool { return len(c.jobPods(j)) == 0 })
	})

	t.Run("always failing stops at backoffLimit", func(t *testing.T) {
		c.createJob(e2eJob("hopeless", "exit 3", func(s *kplanev1.JobSpec) { s.BackoffLimit = proto.Int32(2) }))
		j := c.waitJob("hopeless", kplanev1.JobFailed, 1)
		if r := jobCond(j, kplanev1.JobFailed).GetReason(); r != kplanev1.JobReasonBackoffLimitExceeded {
			t.Errorf("reason %q", r)
		}
		_, podFail := countPhases(c.jobPods(j))
		if j.GetStatus().GetFailed() != 3 || podFail != 3 {
			t.Errorf("failed: status %d, pods %d; want 3 (backoffLimit 2 + 1)", j.GetStatus().GetFailed(), podFail)
		}
	})

	t.Run("activeDeadlineSeconds stops running pods", func(t *testing.T) {
		j := c.createJob(e2eJob("slow", "sleep 600", func(s *kplanev1.JobSpec) {
			s.Parallelism, s.Completions, s.ActiveDeadlineSeconds = proto.Int32(2), proto.Int32(2), proto.Int64(2)
		}))
		c.eventually("2 pods running", func() bool {
			n := 0
			for _, p := range c.jobPods(j) {
				if p.GetStatus().GetPhase() == kplanev1.PodRunning {
					n++
				}
			}
			return n == 2
		})
		j = c.waitJob("slow", kplanev1.JobFailed, 2)
		if r := jobCond(j, kplanev1.JobFailed).GetReason(); r != kplanev1.JobReasonDeadlineExceeded {
			t.Errorf("reason %q", r)
		}
		c.eventually("the deadline's pods gone", func() bool { return len(c.jobPods(j)) == 0 })
		if j.GetStatus().GetActive() != 0 {
			t.Errorf("active %d after the deadline", j.GetStatus().GetActive())
		}
	})

	t.Run("podFailurePolicy Ignore on exit code 42", func(t *testing.T) {
		f := filepath.Join(dir, "ignored")
		// The first two attempts exit 42, the third succeeds; backoffLimit 0.
		script := fmt.Sprintf(`echo x >> %[1]s; n=$(wc -l < %[1]s); if [ "$n" -le 2 ]; then exit 42; fi; exit 0`, f)
		c.createJob(e2eJob("ignore42", script, func(s *kplanev1.JobSpec) {
			s.BackoffLimit = proto.Int32(0)
			s.PodFailurePolicy = &kplanev1.PodFailurePolicy{Rules: []*kplanev1.PodFailurePolicyRule{{
				Action:      kplanev1.PodFailurePolicyActionIgnore,
				OnExitCodes: &kplanev1.PodFailurePolicyOnExitCodesRequirement{Operator: kplanev1.PodFailurePolicyOpIn, Values: []int32{42}},
			}}}
		}))
		j := c.waitJob("ignore42", kplanev1.JobComplete, 1)
		podOK, podFail := countPhases(c.jobPods(j))
		if st := j.GetStatus(); st.GetFailed() != 0 || st.GetSucceeded() != 1 || podFail != 2 || podOK != 1 {
			t.Errorf("status failed %d succeeded %d; pods failed %d succeeded %d (want 0, 1; 2, 1)", st.GetFailed(), st.GetSucceeded(), podFail, podOK)
		}
		if n := len(readLines(t, f)); n != 3 {
			t.Errorf("%d attempts, want 3", n)
		}
	})
}
