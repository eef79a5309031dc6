package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// fakeIndexedJob is an Indexed Job whose pods the fake runtime finishes
// with exit code 0 after exitAfter.
func fakeIndexedJob(name string, completions, parallelism int32, exitAfter time.Duration) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Job{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.JobSpec{
			Completions: proto.Int32(completions), Parallelism: proto.Int32(parallelism),
			CompletionMode: kplanev1.JobCompletionIndexed,
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Annotations: map[string]string{
					"kplane.io/fake-exit-after": exitAfter.String(), "kplane.io/fake-exit-code": "0"}},
				Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
					Containers: []*kplanev1.Container{{Name: "work", Image: "local"}}},
			},
		},
	})
}

func (c *cluster) job(name string) (*kplanev1.Job, error) {
	resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "Job", Namespace: "default", Name: name})
	return resp.GetObject().GetJob(), err
}

// succeededPerIndex counts the Succeeded pods of each index of the job.
func (c *cluster) succeededPerIndex(uid string) (map[int]int, error) {
	resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: kplanev1.LabelControllerUID + "=" + uid})
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	for _, o := range resp.GetItems() {
		p := o.GetPod()
		if p.GetStatus().GetPhase() != kplanev1.PodSucceeded {
			continue
		}
		i, err := strconv.Atoi(p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex])
		if err != nil {
			return nil, fmt.Errorf("pod %s: index: %w", p.GetMetadata().GetName(), err)
		}
		out[i]++
	}
	return out, nil
}

// TestJobExactThroughKills: SIGKILL jobctl, and in the second case the
// apiserver, in the middle of a 200-completion Indexed Job on fake nodes;
// the Job still ends with exactly 200 succeeded, every index once.
func TestJobExactThroughKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole control plane")
	}
	for _, victim := range []string{"jobctl", "apiserver"} {
		t.Run("kill "+victim, func(t *testing.T) {
			c := startCluster(t)
			c.startController("scheduler", "scheduler", "--log-level", "warn")
			c.startController("ipamctl", "ipamctl", "--log-level", "warn")
			c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "10", "--node-name", "jk", "--root-dir", t.TempDir(), "--log-level", "warn")
			jobctl, _ := c.startController("jobctl", "jobctl", "--leader-elect=false", "--backoff-scale", "0.01")
			resp, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: fakeIndexedJob("through-"+victim, 200, 20, 200*time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			uid := resp.GetObject().Meta().GetUid()
			name := resp.GetObject().Meta().GetName()

			kill := map[string]*launcher.Process{"jobctl": jobctl, "apiserver": c.apiserver}[victim]
			// Two kills: at 50 and at 120 completions.
			for _, at := range []int32{50, 120} {
				c.eventually(2*time.Minute, func() string {
					j, err := c.job(name)
					if err != nil {
						return err.Error()
					}
					if s := j.GetStatus().GetSucceeded(); s < at {
						return fmt.Sprintf("%d/%d succeeded before the kill", s, at)
					}
					return ""
				})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := kill.Kill(ctx)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if err := kill.Restart(); err != nil {
					t.Fatal(err)
				}
				t.Logf("SIGKILLed %s at %d+ completions and started it again", victim, at)
			}
			var j *kplanev1.Job
			c.eventually(3*time.Minute, func() string {
				if j, err = c.job(name); err != nil {
					return err.Error()
				}
				for _, cond := range j.GetStatus().GetConditions() {
					if cond.GetType() == kplanev1.JobComplete && cond.GetStatus() == kplanev1.ConditionTrue {
						return ""
					}
				}
				return fmt.Sprintf("job not Complete: %d succeeded", j.GetStatus().GetSucceeded())
			})
			st := j.GetStatus()
			if st.GetSucceeded() != 200 || st.GetCompletedIndexes() != "0-199" {
				t.Errorf("succeeded %d, completedIndexes %q; want exactly 200, 0-199", st.GetSucceeded(), st.GetCompletedIndexes())
			}
			per, err := c.succeededPerIndex(uid)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				if per[i] != 1 {
					t.Errorf("index %d succeeded %d times", i, per[i])
				}
			}
			if len(per) != 200 {
				t.Errorf("%d indexes succeeded, want 200", len(per))
			}
		})
	}
}
