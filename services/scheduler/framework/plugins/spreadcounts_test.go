package plugins

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// errNoAssume ends a decide without assuming anything.
var errNoAssume = errors.New("counted only")

// TestPropertySpreadCountsFromCache: what PodTopologySpread counts from
// the cache's kept counts in a cycle (its own nodes under its lock) is
// what it counts by walking a snapshot of the same nodes, for pods of
// every shape (system defaults, own constraints over one or two keys,
// node affinity honoured or ignored, taints honoured, minDomains),
// through random changes of the cluster (pods bound, assumed, relabelled,
// marked, removed; nodes relabelled, tainted, removed).
func TestPropertySpreadCountsFromCache(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := core.NewCache(0, nil, 1)
		nodeNames := []string{"n0", "n1", "n2", "n3"}
		apps := []string{"web", "db"}
		bySelector := func(p *kplanev1.Pod) labels.Selector {
			return labels.SelectorFromSet(map[string]string{"app": p.GetMetadata().GetLabels()["app"]})
		}
		system := PodTopologySpread{systemDefaults: true, defaultSelector: bySelector}
		for _, d := range SystemDefaultConstraints {
			system.defaults = append(system.defaults, &kplanev1.TopologySpreadConstraint{MaxSkew: d.MaxSkew, TopologyKey: d.TopologyKey, WhenUnsatisfiable: d.WhenUnsatisfiable})
		}
		pods := map[string]*kplanev1.Pod{}
		next := 0
		for step := range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0:
				name := rapid.SampledFrom(nodeNames).Draw(t, "node")
				mods := []func(*kplanev1.Node){nodeLabels(kplanev1.LabelHostname, name)}
				if rapid.IntRange(0, 3).Draw(t, "zoned") > 0 {
					mods = append(mods, nodeLabels(zoneKey, rapid.SampledFrom([]string{"z1", "z2"}).Draw(t, "zone")))
				}
				if rapid.Bool().Draw(t, "ssd") {
					mods = append(mods, nodeLabels("disk", "ssd"))
				}
				if rapid.IntRange(0, 3).Draw(t, "tainted") == 0 {
					mods = append(mods, func(n *kplanev1.Node) {
						n.Spec.Taints = []*kplanev1.Taint{{Key: "dedicated", Value: "x", Effect: "NoSchedule"}}
					})
				}
				c.SetNode(nodeObj(name, mods...))
			case 1:
				if rapid.IntRange(0, 3).Draw(t, "remove") == 0 {
					c.RemoveNode(rapid.SampledFrom(nodeNames).Draw(t, "node"))
				}
			case 2, 3:
				next++
				p := pod(fmt.Sprintf("p%d", next), labelled("app", rapid.SampledFrom(apps).Draw(t, "app")))
				if rapid.IntRange(0, 4).Draw(t, "ns") == 0 {
					p.Metadata.Namespace = "other"
				}
				node := rapid.SampledFrom(nodeNames).Draw(t, "node")
				if rapid.Bool().Draw(t, "assumed") {
					pi, err := framework.NewPodInfo(p)
					if err != nil {
						t.Fatal(err)
					}
					if err := c.Assume(pi, node); err != nil {
						t.Fatal(err)
					}
				} else {
					p.Spec.NodeName = node
					c.SyncPod(p)
				}
				q := proto.CloneOf(p)
				q.Spec.NodeName = node
				pods[p.Metadata.Name] = q
			default:
				if len(pods) == 0 {
					continue
				}
				name := rapid.SampledFrom(slices.Sorted(maps.Keys(pods))).Draw(t, "pod")
				p := proto.CloneOf(pods[name])
				switch rapid.IntRange(0, 2).Draw(t, "podOp") {
				case 0:
					p.Metadata.Labels = map[string]string{"app": rapid.SampledFrom(apps).Draw(t, "app")}
					c.SyncPod(p)
					pods[name] = p
				case 1:
					p.Metadata.DeletionTimestamp = timestamppb.Now()
					c.SyncPod(p)
					pods[name] = p
				case 2:
					c.RemovePod(p)
					delete(pods, name)
				}
			}
			incoming := spreadPodShape(t)
			pl := PodTopologySpread{}
			if len(incoming.Spec.TopologySpreadConstraints) == 0 {
				pl = system
			}
			pi, err := framework.NewPodInfo(incoming)
			if err != nil {
				t.Fatal(err)
			}
			for _, when := range []string{DoNotSchedule, ScheduleAnyway} {
				cs := pl.parseConstraints(pi, when)
				if len(cs) == 0 {
					continue
				}
				var fromCache *spreadState
				_, err := c.Schedule(pi, func(nodes []*framework.NodeInfo) (*framework.NodeInfo, error) {
					if core.SpreadCountsOf(nodes) == nil && len(nodes) > 0 {
						t.Fatal("the cache's own nodes give no counts")
					}
					// Borrowed counts are read here, under the lock.
					fromCache = count(pi, cs, nodes, nil, true)
					for i, m := range fromCache.counts {
						fromCache.counts[i] = maps.Clone(m)
					}
					return nil, errNoAssume
				})
				if !errors.Is(err, errNoAssume) {
					t.Fatalf("Schedule: %v", err)
				}
				snap := c.Snapshot()
				if core.SpreadCountsOf(snap) != nil {
					t.Fatal("a snapshot gives the cache's counts")
				}
				walked := count(pi, cs, snap, nil, false)
				fromCache.findLeast()
				walked.findLeast()
				if !reflect.DeepEqual(fromCache.counts, walked.counts) || !reflect.DeepEqual(fromCache.self, walked.self) || !reflect.DeepEqual(fromCache.least, walked.least) {
					t.Fatalf("step %d, %s constraints of %v: from the cache %v (least %v), walked %v (least %v)",
						step, when, incoming.Spec.TopologySpreadConstraints, fromCache.counts, fromCache.least, walked.counts, walked.least)
				}
			}
		}
	})
}

// spreadPodShape draws an incoming pod: no constraints of its own (the
// system defaults apply), or one or two of its own with random policies.
func spreadPodShape(t *rapid.T) *kplanev1.Pod {
	app := rapid.SampledFrom([]string{"web", "db"}).Draw(t, "incomingApp")
	p := pod("incoming", labelled("app", app))
	if rapid.Bool().Draw(t, "nodeSelector") {
		p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	}
	if rapid.Bool().Draw(t, "tolerates") {
		p.Spec.Tolerations = []*kplanev1.Toleration{{Key: "dedicated", Operator: "Exists"}}
	}
	for i := range rapid.IntRange(0, 2).Draw(t, "constraints") {
		c := &kplanev1.TopologySpreadConstraint{MaxSkew: 1,
			TopologyKey:       rapid.SampledFrom([]string{zoneKey, kplanev1.LabelHostname}).Draw(t, fmt.Sprint("key", i)),
			WhenUnsatisfiable: rapid.SampledFrom([]string{DoNotSchedule, ScheduleAnyway}).Draw(t, fmt.Sprint("when", i)),
			LabelSelector:     &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": rapid.SampledFrom([]string{"web", "db"}).Draw(t, fmt.Sprint("sel", i))}}}
		if rapid.Bool().Draw(t, fmt.Sprint("ignoreAffinity", i)) {
			c.NodeAffinityPolicy = PolicyIgnore
		}
		if rapid.Bool().Draw(t, fmt.Sprint("honorTaints", i)) {
			c.NodeTaintsPolicy = PolicyHonor
		}
		if rapid.Bool().Draw(t, fmt.Sprint("minDomains", i)) {
			c.MinDomains = proto.Int32(3)
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
	return p
}
