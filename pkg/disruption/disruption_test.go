package disruption

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func pod(name, phase string, ready bool, lbl map[string]string) *kplanev1.Pod {
	st := &kplanev1.PodStatus{Phase: phase}
	if ready {
		st.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue}}
	}
	return &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "d", Name: name, Labels: lbl}, Status: st}
}

func budget(name string, allowed, current, desired int32, sel *kplanev1.LabelSelector) *kplanev1.PodDisruptionBudget {
	return &kplanev1.PodDisruptionBudget{
		Metadata: &kplanev1.ObjectMeta{Namespace: "d", Name: name, Generation: 1},
		Spec:     &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(desired), Selector: sel},
		Status:   &kplanev1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: allowed, CurrentHealthy: current, DesiredHealthy: desired},
	}
}

var web = map[string]string{"app": "web"}

func TestSelects(t *testing.T) {
	p := pod("a", "Running", true, web)
	for _, c := range []struct {
		name string
		sel  *kplanev1.LabelSelector
		ns   string
		want bool
	}{
		{"match", &kplanev1.LabelSelector{MatchLabels: web}, "d", true},
		{"other labels", &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, "d", false},
		{"empty selects all", &kplanev1.LabelSelector{}, "d", true},
		{"nil selects none", nil, "d", false},
		{"other namespace", &kplanev1.LabelSelector{MatchLabels: web}, "e", false},
		{"bad operator", &kplanev1.LabelSelector{MatchExpressions: []*kplanev1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}, "d", false},
	} {
		b := budget("b", 1, 1, 1, c.sel)
		b.Metadata.Namespace = c.ns
		if got := Selects(b, p); got != c.want {
			t.Errorf("%s: Selects = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCheckEviction(t *testing.T) {
	sel := &kplanev1.LabelSelector{MatchLabels: web}
	ready, unready := pod("a", "Running", true, web), pod("a", "Running", false, web)
	stale := budget("b", 1, 3, 2, sel)
	stale.Metadata.Generation = 2
	always := budget("b", 0, 1, 2, sel)
	always.Spec.UnhealthyPodEvictionPolicy = new(string)
	*always.Spec.UnhealthyPodEvictionPolicy = kplanev1.UnhealthyPodEvictionAlwaysAllow
	for _, c := range []struct {
		name    string
		pdb     *kplanev1.PodDisruptionBudget
		pod     *kplanev1.Pod
		take    bool
		refused string
	}{
		{"allowed", budget("b", 1, 3, 2, sel), ready, true, ""},
		{"none allowed", budget("b", 0, 2, 2, sel), ready, false, "The disruption budget b needs 2 healthy pods and has 2 currently"},
		{"not observed", stale, ready, false, "The disruption budget b is still being processed by the server."},
		{"unready while budget met", budget("b", 0, 2, 2, sel), unready, false, ""},
		{"unready while budget not met", budget("b", 0, 1, 2, sel), unready, false, "The disruption budget b needs 2 healthy pods and has 1 currently"},
		{"unready AlwaysAllow", always, unready, false, ""},
	} {
		take, err := CheckEviction(c.pdb, c.pod)
		var r *Refusal
		switch {
		case c.refused != "" && (!errors.As(err, &r) || r.Cause != c.refused || err.Error() != kplanev1.EvictionRefusedMessage):
			t.Errorf("%s: err = %v (%+v), want refusal %q", c.name, err, r, c.refused)
		case c.refused == "" && err != nil:
			t.Errorf("%s: err = %v", c.name, err)
		case take != c.take:
			t.Errorf("%s: take = %v, want %v", c.name, take, c.take)
		}
	}
	full := budget("b", 5, 5, 1, sel)
	full.Status.DisruptedPods = map[string]*timestamppb.Timestamp{}
	for i := 0; i <= MaxDisruptedPods; i++ {
		full.Status.DisruptedPods[string(rune('a'+i%26))+time.Duration(i).String()] = timestamppb.Now()
	}
	if _, err := CheckEviction(full, ready); !errors.Is(err, ErrTooManyDisrupted) {
		t.Errorf("full disruptedPods: err = %v", err)
	}
}

func TestTake(t *testing.T) {
	b := budget("b", 1, 3, 2, &kplanev1.LabelSelector{MatchLabels: web})
	now := time.Unix(1000, 0)
	Take(b, "a", now)
	st := b.GetStatus()
	if st.GetDisruptionsAllowed() != 0 || !st.GetDisruptedPods()["a"].AsTime().Equal(now) {
		t.Fatalf("status after Take: %v", st)
	}
	if c := st.GetConditions(); len(c) != 1 || c[0].GetStatus() != kplanev1.ConditionFalse || c[0].GetReason() != kplanev1.ReasonInsufficientPods {
		t.Fatalf("conditions: %v", c)
	}
}

func TestSplitViolating(t *testing.T) {
	sel := &kplanev1.LabelSelector{MatchLabels: web}
	a, b, c := pod("a", "Running", true, web), pod("b", "Running", true, web), pod("c", "Running", true, map[string]string{"app": "db"})
	one := budget("web", 1, 3, 2, sel)
	v, nv := SplitViolating([]*kplanev1.Pod{a, b, c}, []*kplanev1.PodDisruptionBudget{one})
	if len(v) != 1 || v[0] != b || len(nv) != 2 || nv[0] != a || nv[1] != c {
		t.Fatalf("violating %v, non-violating %v", v, nv)
	}
	// A pod already counted as disrupted takes nothing from the budget.
	one.Status.DisruptedPods = map[string]*timestamppb.Timestamp{"a": timestamppb.Now()}
	if n := Violations([]*kplanev1.Pod{a, b}, []*kplanev1.PodDisruptionBudget{one}); n != 0 {
		t.Fatalf("violations with a disrupted = %d, want 0", n)
	}
}
