package plugins

import (
	"context"
	"fmt"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// BenchmarkSchedulingCycle is the scheduling cycle alone (PreFilter,
// Filter and Score of the default profile on 1,000 nodes of 10 zones,
// each holding 5 pods), with no apiserver: the framework's own cost per
// pod, which BenchmarkSchedulerPerf's figures include among the
// apiserver's. Decisions are not assumed, so every iteration sees the
// same cluster.
//
//	cd services/scheduler && go test -run '^$' -bench SchedulingCycle -benchmem ./framework/plugins/
func BenchmarkSchedulingCycle(b *testing.B) {
	spread := func(p *kplanev1.Pod) {
		p.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey,
			WhenUnsatisfiable: DoNotSchedule, LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "perf"}}}}
	}
	anti := antiAffinity(term("kubernetes.io/hostname", "other"))
	for _, shape := range []struct {
		name string
		mods []func(*kplanev1.Pod)
	}{
		{"plain", nil},
		{"anti-affinity", []func(*kplanev1.Pod){anti}},
		{"spread", []func(*kplanev1.Pod){spread}},
	} {
		b.Run(shape.name, func(b *testing.B) {
			c := core.NewCache(0, nil, 1)
			for i := range 1000 {
				name := fmt.Sprintf("node-%d", i)
				c.SetNode(nodeObj(name, nodeLabels("kubernetes.io/hostname", name, zoneKey, fmt.Sprintf("zone-%d", i%10))))
				for j := range 5 {
					p := pod(fmt.Sprintf("placed-%d-%d", i, j), requests("100m", "64Mi"), labelled("app", "perf"))
					p.Spec.NodeName = name
					c.SyncPod(p)
				}
			}
			fwk := defaultProfile(b)
			p, err := framework.NewPodInfo(pod("incoming", append([]func(*kplanev1.Pod){requests("100m", "64Mi"), labelled("app", "perf")}, shape.mods...)...))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			nodes := c.Snapshot()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				state := framework.NewCycleState()
				if st := fwk.RunPreFilterPlugins(ctx, state, p); !st.IsSuccess() {
					b.Fatal(st.AsError())
				}
				if _, _, err := fwk.SelectNode(ctx, state, p, nodes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
