package plugins

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Preemption honours PodDisruptionBudgets as Kubernetes does: on a node,
// victims that would violate a budget are given back first, and a
// violation counts against the node before any priority does.
func TestPreemptionPDB(t *testing.T) {
	budget := func(app string, allowed int32) *kplanev1.PodDisruptionBudget {
		return &kplanev1.PodDisruptionBudget{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: app},
			Spec:   &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(1), Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
			Status: &kplanev1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	aged := func(age time.Duration) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			p.Metadata.CreationTimestamp = timestamppb.New(time.Unix(1_000_000, 0).Add(-age))
			p.Spec.Priority = 1
		}
	}
	for _, tc := range []struct {
		name       string
		pdbs       []*kplanev1.PodDisruptionBudget
		victim     string
		violations int
	}{
		// Equal priority: the newest is given back first, the oldest goes.
		{"no budget", nil, "default/web", 0},
		{"budget with room", []*kplanev1.PodDisruptionBudget{budget("web", 1)}, "default/web", 0},
		{"budget without room reprieves web", []*kplanev1.PodDisruptionBudget{budget("web", 0)}, "default/other", 0},
		{"budget in another namespace", []*kplanev1.PodDisruptionBudget{func() *kplanev1.PodDisruptionBudget {
			b := budget("web", 0)
			b.Metadata.Namespace = "elsewhere"
			return b
		}()}, "default/web", 0},
		{"both budgeted: a violation is unavoidable", []*kplanev1.PodDisruptionBudget{budget("web", 0), budget("other", 0)}, "default/web", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			web := pod("web", labelled("app", "web"), requests("2", ""), aged(2*time.Hour))
			other := pod("other", labelled("app", "other"), requests("2", ""), aged(time.Hour))
			c := newCluster(t, map[string][]*kplanev1.Pod{"a": {web, other}}, false)
			high := pod("high", requests("2", ""))
			high.Spec.Priority = 100
			hi := info(t, high)
			ctx, state := context.Background(), framework.NewCycleState()
			state.SetNodes(c.nodes)
			defaultProfile(t).UseFilters(state)
			cand := (&DefaultPreemption{}).victimsOn(ctx, state, hi, c.nodes[0], c.nodes, false, tc.pdbs)
			if cand == nil || len(cand.victims) != 1 || cand.victims[0].Key != tc.victim || cand.violations != tc.violations {
				t.Fatalf("candidate %+v, want victim %s with %d violations", cand, tc.victim, tc.violations)
			}
		})
	}

	// Fewer violations beat less important victims.
	low := &framework.PodInfo{Pod: pod("low", func(p *kplanev1.Pod) { p.Spec.Priority = 1 })}
	mid := &framework.PodInfo{Pod: pod("mid", func(p *kplanev1.Pod) { p.Spec.Priority = 50 })}
	violating := &candidate{node: "a", victims: []*framework.PodInfo{low}, violations: 1}
	clean := &candidate{node: "b", victims: []*framework.PodInfo{mid}}
	if a, b := rank(violating), rank(clean); slices.Compare(b[:], a[:]) >= 0 {
		t.Fatalf("rank: violating %v should be worse than clean %v", a, b)
	}
}
