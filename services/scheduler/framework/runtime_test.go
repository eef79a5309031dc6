package framework_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/framework/plugins"
)

// gate is a Permit plugin that holds every pod, and a Reserve plugin
// that records its calls.
type gate struct {
	calls   *[]string
	timeout time.Duration
}

func (gate) Name() string { return "Gate" }
func (g gate) Permit(context.Context, *framework.CycleState, *framework.PodInfo, string) (*framework.Status, time.Duration) {
	return framework.NewStatus(framework.Wait), g.timeout
}
func (g gate) Reserve(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, node string) *framework.Status {
	*g.calls = append(*g.calls, "reserve "+node)
	if node == "bad" {
		return framework.NewStatus(framework.Error, "no room in the ledger")
	}
	return nil
}
func (g gate) Unreserve(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, node string) {
	*g.calls = append(*g.calls, "unreserve "+node)
}

func gateProfile(t *testing.T, g gate) *framework.Framework {
	t.Helper()
	registry := plugins.NewInTreeRegistry()
	if err := registry.Merge(framework.Registry{"Gate": func(json.RawMessage, framework.Handle) (framework.Plugin, error) { return g, nil }}); err != nil {
		t.Fatal(err)
	}
	profiles, err := build2(registry, head+"profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: Gate\n")
	if err != nil {
		t.Fatal(err)
	}
	return profiles[framework.DefaultSchedulerName]
}

func build2(r framework.Registry, doc string) (map[string]*framework.Framework, error) {
	cfg, err := framework.ParseConfig([]byte(doc))
	if err != nil {
		return nil, err
	}
	return framework.NewProfiles(cfg, r, plugins.DefaultPlugins(), nil, 1)
}

func TestPermitWaitAllowRejectTimeout(t *testing.T) {
	var calls []string
	fwk := gateProfile(t, gate{calls: &calls, timeout: time.Minute})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		release func(w framework.WaitingPod)
		want    framework.Code
	}{
		{"allowed", func(w framework.WaitingPod) { w.Allow("Gate") }, framework.Success},
		{"rejected", func(w framework.WaitingPod) { w.Reject("Gate", "not today") }, framework.Unschedulable},
	} {
		p := mustPod(t, newPod("p-"+tc.name, "", ""))
		done := make(chan *framework.Status, 1)
		go func() { done <- fwk.RunPermitPlugins(ctx, framework.NewCycleState(), p, "n1") }()
		var w framework.WaitingPod
		deadline := time.Now().Add(10 * time.Second)
		for w == nil {
			if time.Now().After(deadline) {
				t.Fatal("the pod never waited")
			}
			w = fwk.WaitingPod(p.UID)
			if w == nil {
				time.Sleep(time.Millisecond) // polling interval while the goroutine registers
			}
		}
		tc.release(w)
		if st := <-done; st.Code() != tc.want {
			t.Errorf("%s: %v %q, want %v", tc.name, st.Code(), st.Message(), tc.want)
		}
		if fwk.WaitingPod(p.UID) != nil {
			t.Errorf("%s: still waiting after release", tc.name)
		}
	}
	short := gateProfile(t, gate{calls: &calls, timeout: 20 * time.Millisecond})
	st := short.RunPermitPlugins(ctx, framework.NewCycleState(), mustPod(t, newPod("slow", "", "")), "n1")
	if st.Code() != framework.Unschedulable || !strings.Contains(st.Message(), "rejected due to timeout") {
		t.Fatalf("timeout: %v %q", st.Code(), st.Message())
	}
}

func TestReserveFailureUnreserves(t *testing.T) {
	var calls []string
	fwk := gateProfile(t, gate{calls: &calls, timeout: time.Minute})
	p := mustPod(t, newPod("p", "", ""))
	if st := fwk.RunReservePlugins(context.Background(), framework.NewCycleState(), p, "bad"); st.Code() != framework.Error || st.Plugin() != "Gate" {
		t.Fatalf("reserve on bad: %v from %q", st.Code(), st.Plugin())
	}
	if got := strings.Join(calls, ","); got != "reserve bad,unreserve bad" {
		t.Fatalf("calls %s", got)
	}
}
