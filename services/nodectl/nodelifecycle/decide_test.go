package nodelifecycle

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

func nodeWith(ready *kplanev1.Condition, taints ...*kplanev1.Taint) *kplanev1.Node {
	n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n1", Uid: "u1"}, Spec: &kplanev1.NodeSpec{Taints: taints}}
	if ready != nil {
		n.Status = &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{ready}}
	}
	return n
}

// withConds adds conditions given as type, status pairs.
func withConds(n *kplanev1.Node, typeStatus ...string) *kplanev1.Node {
	for i := 0; i+1 < len(typeStatus); i += 2 {
		n.Status.Conditions = append(n.Status.Conditions, &kplanev1.Condition{Type: typeStatus[i], Status: typeStatus[i+1]})
	}
	return n
}

func cond(status, reason string, heartbeat *timestamppb.Timestamp) *kplanev1.Condition {
	return &kplanev1.Condition{Type: kplanev1.NodeReady, Status: status, Reason: reason, LastTransitionTime: ts(-time.Hour), LastHeartbeatTime: heartbeat}
}

func TestHeartbeatObserve(t *testing.T) {
	var hb heartbeat
	hb = hb.observe(ts(0), t0)
	if !hb.seenAt.Equal(t0) {
		t.Fatalf("first sight: seenAt %v", hb.seenAt)
	}
	// The same renewTime seen later does not move seenAt: the lease is aging.
	if got := hb.observe(ts(0), t0.Add(30*time.Second)); !got.seenAt.Equal(t0) {
		t.Fatalf("unchanged renewTime moved seenAt to %v", got.seenAt)
	}
	// A new renewTime, even one from a clock far behind ours, is a renewal.
	if got := hb.observe(ts(-time.Hour), t0.Add(30*time.Second)); !got.seenAt.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("changed renewTime: seenAt %v", got.seenAt)
	}
}

func TestDecideReady(t *testing.T) {
	const grace = 40 * time.Second
	renew := ts(-5 * time.Minute) // the agent's clock: irrelevant to staleness
	fresh := heartbeat{renewTime: renew, seenAt: t0.Add(-10 * time.Second)}
	stale := heartbeat{renewTime: renew, seenAt: t0.Add(-41 * time.Second)}
	cases := []struct {
		name       string
		node       *kplanev1.Node
		renew      *timestamppb.Timestamp
		hb         heartbeat
		wantStatus string // "" = no write
		wantReason string
		wantStale  time.Duration
	}{
		{name: "fresh ready node: nothing", node: nodeWith(cond(kplanev1.ConditionTrue, "AgentReady", nil)), renew: renew, hb: fresh, wantStale: 30 * time.Second},
		{name: "exactly at grace: not yet", node: nodeWith(cond(kplanev1.ConditionTrue, "", nil)), renew: renew, hb: heartbeat{renewTime: renew, seenAt: t0.Add(-grace)}},
		{name: "stale ready node: Unknown", node: nodeWith(cond(kplanev1.ConditionTrue, "AgentReady", nil)), renew: renew, hb: stale, wantStatus: kplanev1.ConditionUnknown, wantReason: reasonStatusUnknown},
		{name: "stale not-ready node: Unknown", node: nodeWith(cond(kplanev1.ConditionFalse, "AgentNotReady", nil)), renew: renew, hb: stale, wantStatus: kplanev1.ConditionUnknown, wantReason: reasonStatusUnknown},
		{name: "stale node without conditions: Unknown", node: nodeWith(nil), renew: nil, hb: stale, wantStatus: kplanev1.ConditionUnknown, wantReason: reasonStatusUnknown},
		{name: "stale and already Unknown: no second mark", node: nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, renew)), renew: renew, hb: stale},
		{name: "fresh start, marked, not renewed since: stays Unknown", node: nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, renew)), renew: renew, hb: fresh, wantStale: 30 * time.Second},
		{name: "renewed since marked: True", node: nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, renew)), renew: ts(time.Second), hb: heartbeat{renewTime: ts(time.Second), seenAt: t0}, wantStatus: kplanev1.ConditionTrue, wantReason: reasonLeaseRenewed, wantStale: grace},
		{name: "lease created after marking without one: True", node: nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, nil)), renew: ts(0), hb: heartbeat{renewTime: ts(0), seenAt: t0}, wantStatus: kplanev1.ConditionTrue, wantReason: reasonLeaseRenewed, wantStale: grace},
		{name: "Unknown reported by someone else is not ours to lift", node: nodeWith(cond(kplanev1.ConditionUnknown, "AgentSaysSo", nil)), renew: ts(0), hb: heartbeat{renewTime: ts(0), seenAt: t0}, wantStale: grace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideReady(tc.node, tc.renew, tc.hb, t0, grace)
			if tc.wantStatus == "" {
				if d.cond != nil {
					t.Fatalf("unexpected write %v", d.cond)
				}
			} else {
				if d.cond == nil {
					t.Fatalf("no write; want %s", tc.wantStatus)
				}
				if d.cond.Status != tc.wantStatus || d.cond.Reason != tc.wantReason {
					t.Fatalf("got %s/%s, want %s/%s", d.cond.Status, d.cond.Reason, tc.wantStatus, tc.wantReason)
				}
				if !d.cond.LastTransitionTime.AsTime().Equal(t0) {
					t.Fatalf("lastTransitionTime %v", d.cond.LastTransitionTime.AsTime())
				}
				if tc.wantStatus == kplanev1.ConditionUnknown && d.cond.LastHeartbeatTime.AsTime() != tc.renew.AsTime() {
					t.Fatalf("Unknown must record the last renewTime seen, got %v", d.cond.LastHeartbeatTime)
				}
			}
			if d.staleIn != tc.wantStale {
				t.Fatalf("staleIn %v, want %v", d.staleIn, tc.wantStale)
			}
		})
	}
}

func ids(taints []*kplanev1.Taint) []string {
	var out []string
	for _, t := range taints {
		out = append(out, taintID(t))
	}
	return out
}

func TestDesiredTaints(t *testing.T) {
	old := ts(-time.Minute)
	userNoExec := &kplanev1.Taint{Key: "dedicated", Value: "db", Effect: kplanev1.TaintEffectNoExecute}
	cases := []struct {
		name        string
		node        *kplanev1.Node
		want        []string
		wantChanged bool
	}{
		{name: "ready, untainted", node: nodeWith(cond(kplanev1.ConditionTrue, "", nil)), want: nil},
		{name: "unknown: unreachable added", node: nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, nil)),
			want: []string{kplanev1.TaintNodeUnreachable + ":NoSchedule", kplanev1.TaintNodeUnreachable + ":NoExecute"}, wantChanged: true},
		{name: "unknown, already tainted: untouched",
			node: nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, nil),
				&kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old},
				&kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoExecute, TimeAdded: old}),
			want: []string{kplanev1.TaintNodeUnreachable + ":NoSchedule", kplanev1.TaintNodeUnreachable + ":NoExecute"}},
		{name: "false: not-ready swapped in for unreachable",
			node: nodeWith(cond(kplanev1.ConditionFalse, "", nil),
				&kplanev1.Taint{Key: "keep", Effect: kplanev1.TaintEffectNoSchedule},
				&kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old},
				&kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoExecute, TimeAdded: old}),
			want: []string{"keep:NoSchedule", kplanev1.TaintNodeNotReady + ":NoSchedule", kplanev1.TaintNodeNotReady + ":NoExecute"}, wantChanged: true},
		{name: "true again: ours removed, others kept",
			node: nodeWith(cond(kplanev1.ConditionTrue, "", nil),
				&kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old},
				&kplanev1.Taint{Key: "keep", Effect: kplanev1.TaintEffectNoSchedule},
				&kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoExecute, TimeAdded: old}),
			want: []string{"keep:NoSchedule"}, wantChanged: true},
		{name: "no Ready condition: ours left alone",
			node: nodeWith(nil, &kplanev1.Taint{Key: kplanev1.TaintNodeNotReady, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old}),
			want: []string{kplanev1.TaintNodeNotReady + ":NoSchedule"}},
		{name: "memory pressure: NoSchedule taint beside Ready",
			node: withConds(nodeWith(cond(kplanev1.ConditionTrue, "", nil)), kplanev1.NodeMemoryPressure, kplanev1.ConditionTrue),
			want: []string{kplanev1.TaintNodeMemoryPressure + ":NoSchedule"}, wantChanged: true},
		{name: "pressure gone: its taint removed, the others' kept",
			node: withConds(nodeWith(cond(kplanev1.ConditionTrue, "", nil),
				&kplanev1.Taint{Key: kplanev1.TaintNodeDiskPressure, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old},
				&kplanev1.Taint{Key: kplanev1.TaintNodePIDPressure, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old},
				&kplanev1.Taint{Key: kplanev1.TaintNodeMemoryPressure, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: old}),
				kplanev1.NodeDiskPressure, kplanev1.ConditionFalse, kplanev1.NodePIDPressure, kplanev1.ConditionTrue),
			want: []string{kplanev1.TaintNodePIDPressure + ":NoSchedule", kplanev1.TaintNodeMemoryPressure + ":NoSchedule"}, wantChanged: true},
		{name: "pressure and not ready together",
			node: withConds(nodeWith(cond(kplanev1.ConditionFalse, "", nil)), kplanev1.NodePIDPressure, kplanev1.ConditionTrue),
			want: []string{kplanev1.TaintNodeNotReady + ":NoSchedule", kplanev1.TaintNodeNotReady + ":NoExecute", kplanev1.TaintNodePIDPressure + ":NoSchedule"}, wantChanged: true},
		{name: "a NoExecute taint without timeAdded is stamped", node: nodeWith(cond(kplanev1.ConditionTrue, "", nil), userNoExec),
			want: []string{"dedicated:NoExecute"}, wantChanged: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := ids(tc.node.GetSpec().GetTaints())
			got, ch := desiredTaints(tc.node, t0)
			if g := ids(got); len(g) != len(tc.want) || (len(g) > 0 && !equalStrings(g, tc.want)) {
				t.Fatalf("taints %v, want %v", g, tc.want)
			}
			if ch.changed() != tc.wantChanged {
				t.Fatalf("changed %v, want %v (%+v)", ch.changed(), tc.wantChanged, ch)
			}
			if !equalStrings(ids(tc.node.GetSpec().GetTaints()), before) || userNoExec.TimeAdded != nil {
				t.Fatal("the input node was modified")
			}
			for _, tt := range got {
				if tt.GetEffect() == kplanev1.TaintEffectNoExecute && tt.GetTimeAdded() == nil {
					t.Fatalf("NoExecute taint %s without timeAdded", taintID(tt))
				}
				if tt.GetKey() != "keep" && tt.GetKey() != "dedicated" {
					// Kept taints keep their timeAdded; new ones get now.
					if at := tt.GetTimeAdded().AsTime(); !at.Equal(t0) && !at.Equal(old.AsTime()) {
						t.Fatalf("timeAdded %v", at)
					}
				}
			}
		})
	}
	// Idempotence: applying the result again changes nothing.
	n := nodeWith(cond(kplanev1.ConditionUnknown, reasonStatusUnknown, nil))
	n.Spec.Taints, _ = desiredTaints(n, t0)
	if _, ch := desiredTaints(n, t0.Add(time.Minute)); ch.changed() {
		t.Fatalf("second pass changed %+v", ch)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func secs(s int64) *int64 { return &s }

func podWith(tols ...*kplanev1.Toleration) *kplanev1.Pod {
	return &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: &kplanev1.PodSpec{Tolerations: tols}}
}

func TestEvictionDeadline(t *testing.T) {
	const timeout = 5 * time.Minute
	unreachable := &kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoExecute, TimeAdded: ts(0)}
	noSched := &kplanev1.Taint{Key: kplanev1.TaintNodeUnreachable, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: ts(0)}
	later := &kplanev1.Taint{Key: "dedicated", Value: "x", Effect: kplanev1.TaintEffectNoExecute, TimeAdded: ts(time.Minute)}
	cases := []struct {
		name   string
		taints []*kplanev1.Taint
		pod    *kplanev1.Pod
		want   time.Duration // from t0
		never  bool
	}{
		{name: "no taints", pod: podWith(), never: true},
		{name: "NoSchedule only", taints: []*kplanev1.Taint{noSched}, pod: podWith(), never: true},
		{name: "not tolerated: timeout", taints: []*kplanev1.Taint{noSched, unreachable}, pod: podWith(), want: timeout},
		{name: "tolerated with seconds", taints: []*kplanev1.Taint{unreachable}, pod: podWith(&kplanev1.Toleration{Key: kplanev1.TaintNodeUnreachable, Operator: "Exists", Effect: kplanev1.TaintEffectNoExecute, TolerationSeconds: secs(30)}), want: 30 * time.Second},
		{name: "tolerated forever", taints: []*kplanev1.Taint{unreachable}, pod: podWith(&kplanev1.Toleration{Key: kplanev1.TaintNodeUnreachable, Operator: "Exists"}), never: true},
		{name: "wildcard toleration", taints: []*kplanev1.Taint{unreachable}, pod: podWith(&kplanev1.Toleration{Operator: "Exists"}), never: true},
		{name: "smallest seconds wins over forever", taints: []*kplanev1.Taint{unreachable}, pod: podWith(
			&kplanev1.Toleration{Key: kplanev1.TaintNodeUnreachable, Operator: "Exists"},
			&kplanev1.Toleration{Key: kplanev1.TaintNodeUnreachable, Operator: "Exists", Effect: kplanev1.TaintEffectNoExecute, TolerationSeconds: secs(600)},
			&kplanev1.Toleration{Operator: "Exists", Effect: kplanev1.TaintEffectNoExecute, TolerationSeconds: secs(60)}), want: time.Minute},
		{name: "negative seconds: at once", taints: []*kplanev1.Taint{unreachable}, pod: podWith(&kplanev1.Toleration{Key: kplanev1.TaintNodeUnreachable, Operator: "Exists", Effect: kplanev1.TaintEffectNoExecute, TolerationSeconds: secs(-5)}), want: 0},
		{name: "toleration for another taint does not help", taints: []*kplanev1.Taint{unreachable}, pod: podWith(&kplanev1.Toleration{Key: kplanev1.TaintNodeNotReady, Operator: "Exists"}), want: timeout},
		{name: "Equal needs the value", taints: []*kplanev1.Taint{later}, pod: podWith(&kplanev1.Toleration{Key: "dedicated", Value: "y", Effect: kplanev1.TaintEffectNoExecute, TolerationSeconds: secs(1)}), want: time.Minute + timeout},
		{name: "earliest taint deadline wins", taints: []*kplanev1.Taint{later, unreachable}, pod: podWith(&kplanev1.Toleration{Key: "dedicated", Value: "x", TolerationSeconds: secs(1), Effect: kplanev1.TaintEffectNoExecute}), want: time.Minute + time.Second},
		{name: "taint without timeAdded is not judged", taints: []*kplanev1.Taint{{Key: "k", Effect: kplanev1.TaintEffectNoExecute}}, pod: podWith(), never: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dl, ok := evictionDeadline(tc.taints, tc.pod, timeout)
			if ok == tc.never {
				t.Fatalf("ok=%v deadline %v", ok, dl)
			}
			if ok && !dl.Equal(t0.Add(tc.want)) {
				t.Fatalf("deadline t0+%v, want t0+%v", dl.Sub(t0), tc.want)
			}
		})
	}
}

func TestPodNotReady(t *testing.T) {
	readyPod := func(status, phase string) *kplanev1.Pod {
		return &kplanev1.Pod{Status: &kplanev1.PodStatus{Phase: phase, Conditions: []*kplanev1.Condition{
			{Type: "PodScheduled", Status: kplanev1.ConditionTrue},
			{Type: kplanev1.NodeReady, Status: status, LastTransitionTime: ts(-time.Hour)},
		}}}
	}
	st := podNotReady(readyPod(kplanev1.ConditionTrue, "Running"), "n1", t0)
	if st == nil {
		t.Fatal("a ready pod on a lost node was not marked")
	}
	c := apiutil.FindCondition(st.Conditions, kplanev1.NodeReady)
	if c.Status != kplanev1.ConditionFalse || !c.LastTransitionTime.AsTime().Equal(t0) || len(st.Conditions) != 2 || st.Phase != "Running" {
		t.Fatalf("marked status %v", st)
	}
	for name, p := range map[string]*kplanev1.Pod{
		"already not ready": readyPod(kplanev1.ConditionFalse, "Running"),
		"finished":          readyPod(kplanev1.ConditionTrue, kplanev1.PodSucceeded),
		"no Ready":          {Status: &kplanev1.PodStatus{Phase: "Pending"}},
	} {
		if podNotReady(p, "n1", t0) != nil {
			t.Errorf("%s: marked", name)
		}
	}
}

func TestDisrupted(t *testing.T) {
	for _, tc := range []struct {
		unready, total int
		want           bool
	}{{0, 0, false}, {0, 10, false}, {1, 10, false}, {5, 10, false}, {6, 10, true}, {7, 10, true}, {1, 1, true}, {1, 3, false}, {2, 3, true}} {
		if got := disrupted(tc.unready, tc.total, 0.55); got != tc.want {
			t.Errorf("disrupted(%d/%d) = %v", tc.unready, tc.total, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := config{monitorPeriod: time.Second, gracePeriod: time.Second, evictionRate: 0.1, unhealthyThreshold: 0.55}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(c *config){
		func(c *config) { c.monitorPeriod = 0 },
		func(c *config) { c.gracePeriod = -1 },
		func(c *config) { c.evictionTimeout = -1 },
		func(c *config) { c.evictionRate = 0 },
		func(c *config) { c.unhealthyThreshold = 1.5 },
	} {
		c := good
		bad(&c)
		if c.validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestGrantRateLimitsNodes(t *testing.T) {
	c := newController()
	c.cfg.evictionRate = 0.1
	c.limiter = rate.NewLimiter(rate.Limit(c.cfg.evictionRate), 1)
	if d := c.grant("a", "ua@1", t0); d != 0 {
		t.Fatalf("first node waited %v", d)
	}
	if d := c.grant("a", "ua@1", t0); d != 0 {
		t.Fatalf("a granted node's episode waited %v", d)
	}
	if d := c.grant("b", "ub@1", t0.Add(time.Second)); d != 9*time.Second {
		t.Fatalf("second node: wait %v, want 9s at 0.1 nodes/s", d)
	}
	// Asking again must not have used up a token: still 10s after the first.
	if d := c.grant("b", "ub@1", t0.Add(5*time.Second)); d != 5*time.Second {
		t.Fatalf("second node again: wait %v", d)
	}
	if d := c.grant("b", "ub@1", t0.Add(10*time.Second)); d != 0 {
		t.Fatalf("second node after 1/rate: wait %v", d)
	}
	// A new episode of a node (tainted again) needs a new token.
	if d := c.grant("a", "ua@2", t0.Add(10*time.Second)); d == 0 {
		t.Fatal("a new episode got through without a token")
	}
}

// TestPodsOnWithoutIndexDoesNotPanic: a pod informer without the
// pods-by-node index (a programming error) is logged and read as "no
// pods", like the other controllers' missing-index cases, instead of
// taking the process down.
func TestPodsOnWithoutIndexDoesNotPanic(t *testing.T) {
	pods, err := informer.New(nil, informer.Options{Selection: informer.Selection{Kind: "Pod"}})
	if err != nil {
		t.Fatal(err)
	}
	c := newController()
	c.log, c.pods = hclog.NewNullLogger(), pods
	if got := c.podsOn("n1"); len(got) != 0 {
		t.Fatalf("podsOn without an index: %v", got)
	}
}
