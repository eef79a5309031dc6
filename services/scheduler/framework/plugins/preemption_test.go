package plugins

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

func priority(v int32) func(*kplanev1.Pod) { return func(p *kplanev1.Pod) { p.Spec.Priority = v } }

// nominatedCluster is one node "a" (4 cpu) holding a 2-cpu pod of
// priority 1, with "waiting" (priority 100, 2 cpu) nominated to it.
func nominatedCluster(t *testing.T) (*core.Cache, *framework.PodInfo) {
	t.Helper()
	c := core.NewCache(0, nil, 1)
	c.SetNode(nodeObj("a"))
	placed := pod("placed", requests("2", ""), priority(1))
	placed.Spec.NodeName = "a"
	c.SyncPod(placed)
	waiting := info(t, pod("waiting", requests("2", ""), priority(100)))
	c.Nominate(waiting, "a")
	return c, waiting
}

// The room preemption made for a nominated pod is kept from pods of lower
// or equal priority while its victims terminate (Kubernetes'
// addNominatedPods); a more important pod, and the nominated pod itself,
// may take it.
func TestNominatedPodsHoldTheirRoom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prio     int32
		self     bool
		wantFits bool
	}{
		{"lower priority", 50, false, false},
		{"equal priority", 100, false, false},
		{"higher priority", 200, false, true},
		{"the nominated pod itself", 100, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, waiting := nominatedCluster(t)
			p := info(t, pod("incoming", requests("2", ""), priority(tc.prio)))
			if tc.self {
				p = waiting
			}
			fwk := defaultProfile(t)
			ctx, state := context.Background(), framework.NewCycleState()
			if st := fwk.RunPreFilterPlugins(ctx, state, p); !st.IsSuccess() {
				t.Fatal(st.AsError())
			}
			_, err := c.Schedule(p, func(nodes []*core.NodeInfo) (*core.NodeInfo, error) {
				best, _, err := fwk.SelectNode(ctx, state, p, nodes)
				return best, err
			})
			if fits := err == nil; fits != tc.wantFits {
				t.Fatalf("fits = %v (%v), want %v", fits, err, tc.wantFits)
			}
		})
	}
}

// goHandle is a Handle whose Go keeps the function for the test to run.
type goHandle struct {
	framework.Handle
	started []func(context.Context)
}

func (h *goHandle) Go(fn func(context.Context)) { h.started = append(h.started, fn) }
func (h *goHandle) Logger() hclog.Logger        { return hclog.NewNullLogger() }
func (h *goHandle) Client() kplanev1.ResourcesClient {
	return nil
}
func (h *goHandle) Informer(string) *informer.Informer { return nil }

// PostFilter nominates without waiting for the victims' eviction, which
// runs on Handle.Go; until it ends the pod does not preempt again. When
// no node can be helped, the result is empty (the scheduler clears the
// pod's nomination); when the pod may not preempt, there is no result
// (a nomination stays).
func TestDefaultPreemptionPostFilter(t *testing.T) {
	ctx := context.Background()
	fwk := defaultProfile(t)
	h := &goHandle{}
	pre := NewDefaultPreemption(h)
	low := pod("low", requests("4", ""), priority(1))
	nodes := []*framework.NodeInfo{nodeInfo(t, nodeObj("a"), low)}
	run := func(p *framework.PodInfo, filtered framework.NodeToStatus) (*framework.PostFilterResult, *framework.Status) {
		state := framework.NewCycleState()
		state.SetNodes(nodes)
		fwk.UseFilters(state)
		return pre.PostFilter(ctx, state, p, nodes, filtered)
	}
	unschedulable := framework.NodeToStatus{"a": framework.NewStatus(framework.Unschedulable, "Insufficient cpu")}

	high := info(t, pod("high", requests("2", ""), priority(100)))
	res, st := run(high, unschedulable)
	if !st.IsSuccess() || res == nil || res.NominatedNodeName != "a" {
		t.Fatalf("PostFilter = %+v, %v; want a nomination to a", res, st)
	}
	if len(h.started) != 1 {
		t.Fatalf("%d evictions started, want 1 (asynchronous)", len(h.started))
	}
	res, st = run(high, unschedulable)
	if res != nil || !strings.Contains(st.Message(), "evicting the victims of its earlier preemption") {
		t.Fatalf("second PostFilter while evicting = %+v, %v", res, st)
	}
	// The eviction stops with its context (the term ended) and the pod
	// may preempt again.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	h.started[0](cancelled)
	if res, st = run(high, unschedulable); !st.IsSuccess() || res.NominatedNodeName != "a" {
		t.Fatalf("PostFilter after the eviction ended = %+v, %v", res, st)
	}

	for _, tc := range []struct {
		name       string
		pod        *kplanev1.Pod
		filtered   framework.NodeToStatus
		wantResult bool
		wantMsg    string
	}{
		{"unresolvable everywhere", pod("p1", requests("2", ""), priority(100)),
			framework.NodeToStatus{"a": framework.NewStatus(framework.UnschedulableAndUnresolvable, "node(s) didn't match Pod's node affinity/selector")},
			true, "0/1 nodes are available: 1 Preemption is not helpful for scheduling."},
		{"no lower-priority victims", pod("p2", requests("2", ""), priority(1)), unschedulable,
			true, "0/1 nodes are available: 1 No preemption victims found for incoming pod."},
		{"preemptionPolicy Never", pod("p3", requests("2", ""), priority(100), func(p *kplanev1.Pod) {
			never := kplanev1.PreemptNever
			p.Spec.PreemptionPolicy = &never
		}), unschedulable, false, "not eligible due to preemptionPolicy=Never."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, st := run(info(t, tc.pod), tc.filtered)
			if st.Code() != framework.Unschedulable || st.Message() != tc.wantMsg {
				t.Fatalf("status %v %q, want Unschedulable %q", st.Code(), st.Message(), tc.wantMsg)
			}
			if (res != nil) != tc.wantResult || (res != nil && res.NominatedNodeName != "") {
				t.Fatalf("result %+v, want an empty one: %v", res, tc.wantResult)
			}
		})
	}
}
