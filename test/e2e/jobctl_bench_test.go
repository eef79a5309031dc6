package e2e

import (
	"fmt"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// BenchmarkJob5000 (make bench-jobs): 100 fake nodes, an Indexed Job of
// 5000 completions at parallelism 500 whose pods succeed 100 ms after
// they start. It reports the time from the create to Complete and the
// completions per second, and checks the count is exact.
func BenchmarkJob5000(b *testing.B) {
	const (
		n           = 5000
		parallelism = 500
		podRuntime  = 100 * time.Millisecond
	)
	for range b.N {
		c := startCluster(b)
		c.startController("scheduler", "scheduler", "--log-level", "warn")
		c.startController("ipamctl", "ipamctl", "--log-level", "warn")
		c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "100", "--node-name", "bench", "--root-dir", b.TempDir(), "--log-level", "warn")
		c.startController("jobctl", "jobctl", "--leader-elect=false", "--log-level", "warn")
		c.eventually(time.Minute, func() string {
			resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Node"})
			if err != nil {
				return err.Error()
			}
			if len(resp.GetItems()) < 100 {
				return fmt.Sprintf("%d/100 nodes", len(resp.GetItems()))
			}
			return ""
		})

		start := time.Now()
		if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: fakeIndexedJob("bench", n, parallelism, podRuntime)}); err != nil {
			b.Fatal(err)
		}
		var (
			j        *kplanev1.Job
			half     time.Duration
			maxActiv int32
		)
		c.eventually(10*time.Minute, func() string {
			var err error
			if j, err = c.job("bench"); err != nil {
				return err.Error()
			}
			st := j.GetStatus()
			maxActiv = max(maxActiv, st.GetActive())
			if half == 0 && st.GetSucceeded() >= n/2 {
				half = time.Since(start)
			}
			for _, cond := range st.GetConditions() {
				if cond.GetType() == kplanev1.JobComplete && cond.GetStatus() == kplanev1.ConditionTrue {
					return ""
				}
			}
			return fmt.Sprintf("%d/%d succeeded", st.GetSucceeded(), n)
		})
		took := time.Since(start)
		st := j.GetStatus()
		if st.GetSucceeded() != n || st.GetCompletedIndexes() != fmt.Sprintf("0-%d", n-1) || maxActiv > parallelism {
			b.Fatalf("succeeded %d, completedIndexes %q, most active %d", st.GetSucceeded(), st.GetCompletedIndexes(), maxActiv)
		}
		rate := float64(n) / took.Seconds()
		// The floor: 5000 pods at 500 at a time, 100 ms each, is 10 rounds, 1 s.
		floor := time.Duration(n/parallelism) * podRuntime
		b.ReportMetric(took.Seconds(), "s/5000-complete")
		b.ReportMetric(rate, "completions/s")
		fmt.Printf("Indexed Job, %d completions, parallelism %d, pods of %v on 100 fake nodes: Complete after %v (half after %v), %.0f completions/s; most active seen %d; %.1fx the %v floor of %d rounds of %v\n",
			n, parallelism, podRuntime, took.Round(time.Millisecond), half.Round(time.Millisecond), rate, maxActiv,
			took.Seconds()/floor.Seconds(), floor, n/parallelism, podRuntime)
	}
}
