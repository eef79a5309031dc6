package e2e

import (
	"fmt"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// BenchmarkReplicaSet1000 (make bench-replicas) measures, with real
// processes:
//
//   - replicactl alone: a ReplicaSet of 1000 with no scheduler or node
//     agent running, from its creation until the 1000th pod exists, as
//     pods created per second;
//   - the whole path: with a scheduler and a node agent faking 100 nodes,
//     a ReplicaSet of 1000 from its creation until all 1000 pods are
//     Running (creation, scheduling and the agents' status included).
func BenchmarkReplicaSet1000(b *testing.B) {
	needBinaries(b, "replicactl", "scheduler", "nodeagent", "ipamctl")
	const n = 1000
	for range b.N {
		c := startCluster(b)
		pt := c.trackPods()
		c.startController("replicactl", "replicactl", "--log-level", "warn")
		c.eventually(30*time.Second, func() string {
			if c.leaseHolder("replicactl") == "" {
				return "replicactl does not lead yet"
			}
			return ""
		})

		// 1. replicactl alone.
		start := time.Now()
		solo := c.createRS("solo", n)
		c.eventually(2*time.Minute, func() string {
			if a, _ := pt.counts(solo.Meta().GetUid()); a < n {
				return fmt.Sprintf("%d/%d pods created", a, n)
			}
			return ""
		})
		pt.mu.Lock()
		created := nthTime(pt.addedAt, n).Sub(start)
		pt.mu.Unlock()
		c.scale("solo", 0)
		c.eventually(2*time.Minute, func() string {
			if a, _ := pt.counts(solo.Meta().GetUid()); a != 0 {
				return fmt.Sprintf("%d solo pods left", a)
			}
			return ""
		})

		// 2. the whole path, on 100 fake nodes.
		c.startController("scheduler", "scheduler", "--log-level", "warn")
		c.startController("ipamctl", "ipamctl", "--log-level", "warn")
		c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "100", "--node-name", "bench", "--root-dir", b.TempDir(), "--log-level", "warn")
		c.eventually(time.Minute, func() string {
			resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Node"})
			if err != nil {
				return err.Error()
			}
			ready := 0
			for _, o := range resp.GetItems() {
				for _, cond := range o.GetNode().GetStatus().GetConditions() {
					if cond.GetType() == "Ready" && cond.GetStatus() == "True" {
						ready++
					}
				}
			}
			if ready < 100 {
				return fmt.Sprintf("%d/100 nodes ready", ready)
			}
			return ""
		})
		pt.mu.Lock()
		pt.addedAt = nil
		pt.mu.Unlock()
		start = time.Now()
		full := c.createRS("full", n)
		c.eventually(2*time.Minute, func() string {
			if _, r := pt.counts(full.Meta().GetUid()); r < n {
				return fmt.Sprintf("%d/%d pods running", r, n)
			}
			return ""
		})
		pt.mu.Lock()
		allCreated := nthTime(pt.addedAt, n).Sub(start)
		allBound := nthTime(mapTimes(pt.bound), n).Sub(start)
		running := mapTimes(pt.running)
		allRunning := nthTime(running, n).Sub(start)
		halfRunning := nthTime(running, n/2).Sub(start)
		mostRunning := nthTime(running, n*9/10).Sub(start)
		pt.mu.Unlock()
		if m := pt.max(full.Meta().GetUid()); m != n {
			b.Fatalf("the set had %d active pods at most, want exactly %d", m, n)
		}

		rate := float64(n) / created.Seconds()
		b.ReportMetric(created.Seconds(), "s/1000-created-alone")
		b.ReportMetric(rate, "pods-created/s")
		b.ReportMetric(allRunning.Seconds(), "s/1000-running")
		fmt.Printf("replicactl alone: %d pods created in %v (%.0f pods/s)\n", n, created.Round(time.Millisecond), rate)
		fmt.Printf("whole path, 100 fake nodes: %d pods created after %v, all bound after %v, all Running after %v (half after %v, 90%% after %v; target < 3s)\n",
			n, allCreated.Round(time.Millisecond), allBound.Round(time.Millisecond), allRunning.Round(time.Millisecond),
			halfRunning.Round(time.Millisecond), mostRunning.Round(time.Millisecond))
		fmt.Printf("for scale: a client limited like kube-controller-manager's (20 QPS, burst 30) needs about %.0fs to create %d pods, %.0fx longer\n",
			float64(n-30)/20, n, (float64(n-30)/20)/created.Seconds())
	}
}
