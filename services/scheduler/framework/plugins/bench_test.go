package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/labels"
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

// BenchmarkSchedulingCycleReplicaSet is the cycle of a ReplicaSet's pods
// as bench-scale runs them: the system default spread constraints (by
// hostname and zone, ScheduleAnyway, with the set's selector) through
// the cache, as the scheduler decides (Schedule, under the cache's
// lock), each decision assumed and then confirmed as the watch would,
// so pods accumulate and every cycle changes a node. placed is how many
// of the set's pods are bound on the 1,000 nodes before the timing
// starts: the figure per cycle should not grow with it.
//
//	cd services/scheduler && go test -run '^$' -bench 'SchedulingCycleReplicaSet' -benchmem ./framework/plugins/
func BenchmarkSchedulingCycleReplicaSet(b *testing.B) {
	for _, placed := range []int{0, 50000} {
		b.Run(fmt.Sprintf("placed=%d", placed), func(b *testing.B) {
			owned := func(p *kplanev1.Pod) {
				p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Uid: "uid-rs", Controller: true}}
			}
			mk := func(name string) *kplanev1.Pod {
				return pod(name, requests("10m", "16Mi"), labelled("app", "rs"), owned)
			}
			c := core.NewCache(0, nil, 1)
			for i := range 1000 {
				name := fmt.Sprintf("node-%d", i)
				c.SetNode(nodeObj(name, nodeLabels("kubernetes.io/hostname", name, zoneKey, fmt.Sprintf("zone-%d", i%10))))
			}
			for i := range placed {
				p := mk(fmt.Sprintf("placed-%d", i))
				p.Spec.NodeName = fmt.Sprintf("node-%d", i%1000)
				c.SyncPod(p)
			}
			fwk := replicaSetProfile(b, labels.SelectorFromSet(map[string]string{"app": "rs"}))
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				p := mk(fmt.Sprintf("rs-%d", i))
				info, err := framework.NewPodInfo(p)
				if err != nil {
					b.Fatal(err)
				}
				state := framework.NewCycleState()
				if st := fwk.RunPreFilterPlugins(ctx, state, info); !st.IsSuccess() {
					b.Fatal(st.AsError())
				}
				node, err := c.Schedule(info, func(nodes []*framework.NodeInfo) (*framework.NodeInfo, error) {
					best, _, err := fwk.SelectNode(ctx, state, info, nodes)
					return best, err
				})
				if err != nil {
					b.Fatal(err)
				}
				bound := proto.CloneOf(p)
				bound.Spec.NodeName = node
				c.SyncPod(bound)
			}
		})
	}
}

// replicaSetProfile is the default profile whose PodTopologySpread
// applies the system default constraints with sel as every pod's owner
// selector (the informers the real factory reads are not there).
func replicaSetProfile(b *testing.B, sel labels.Selector) *framework.Framework {
	reg := NewInTreeRegistry()
	reg[PodTopologySpreadName] = func(raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
		pl, err := NewPodTopologySpread(raw, h)
		if err != nil {
			return nil, err
		}
		spread := pl.(PodTopologySpread)
		for _, d := range SystemDefaultConstraints {
			spread.defaults = append(spread.defaults, &kplanev1.TopologySpreadConstraint{MaxSkew: d.MaxSkew, TopologyKey: d.TopologyKey, WhenUnsatisfiable: d.WhenUnsatisfiable})
		}
		spread.defaultSelector = func(*kplanev1.Pod) labels.Selector { return sel }
		return spread, nil
	}
	cfg, err := framework.ParseConfig([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"))
	if err != nil {
		b.Fatal(err)
	}
	profiles, err := framework.NewProfiles(cfg, reg, DefaultPlugins(), nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	return profiles[framework.DefaultSchedulerName]
}
