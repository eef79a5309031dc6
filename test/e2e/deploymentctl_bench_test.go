package e2e

import (
	"fmt"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// BenchmarkRollout1000 (make bench-rollout) measures, with real
// processes (apiserver, replicactl, deploymentctl, scheduler, ipamctl
// and a node agent faking 100 nodes), a Deployment of 1000 replicas with
// maxSurge and maxUnavailable 25% rolled to a new template: the time from
// the template change until the rollout is complete (every replica
// updated and available, no old pod left) and the pods replaced per
// second. An observer checks both bounds at every pod event meanwhile;
// the figures count only when none was broken.
func BenchmarkRollout1000(b *testing.B) {
	const n = 1000
	for range b.N {
		c := deployCluster(b, 100, "--log-level", "warn")
		obs := c.observePods()
		bench := obs.of("bench")
		d := e2eDeployment("bench", n, "bench:1", "100ms")
		bench.SetBounds(n+250, -1, false, time.Now())
		start := time.Now()
		if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(d)}); err != nil {
			b.Fatal(err)
		}
		c.rolledOut("bench", 5*time.Minute)
		created := time.Since(start)
		c.armFloor(bench, n, n+250, n-250)

		cur := c.deployment("bench")
		cur.Spec.Template.Spec.Containers[0].Image = "bench:2"
		start = time.Now()
		if _, err := c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(cur)}); err != nil {
			b.Fatal(err)
		}
		c.rolledOut("bench", 10*time.Minute)
		rolled := time.Since(start)
		events, peak, low, v := bench.Report()
		if len(v) > 0 {
			b.Fatalf("bounds broken %d times, first: %s", len(v), v[0])
		}
		rate := float64(n) / rolled.Seconds()
		b.ReportMetric(rolled.Seconds(), "s/rollout")
		b.ReportMetric(rate, "pods-replaced/s")
		fmt.Printf("first rollout (1000 pods from nothing): %v\n", created.Round(time.Millisecond))
		fmt.Printf("rolling update of 1000 pods, 25%%/25%%, 100 fake nodes, pods ready 100ms after start: %v, %.0f pods replaced/s\n",
			rolled.Round(time.Millisecond), rate)
		fmt.Printf("observer: %d pod events checked, peak %d pods (bound %d), lowest availability %d (floor %d)\n",
			events, peak, n+250, low, n-250)
	}
}
