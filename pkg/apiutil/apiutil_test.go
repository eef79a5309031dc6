package apiutil

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestSetAndFindCondition(t *testing.T) {
	conds := []*kplanev1.Condition{{Type: "A", Status: kplanev1.ConditionFalse}}
	next := SetCondition(conds, &kplanev1.Condition{Type: "A", Status: kplanev1.ConditionTrue})
	if len(next) != 1 || !IsConditionTrue(next, "A") {
		t.Fatalf("replace: got %v", next)
	}
	if conds[0].GetStatus() != kplanev1.ConditionFalse {
		t.Fatal("SetCondition modified its input")
	}
	next = SetCondition(next, &kplanev1.Condition{Type: "B", Status: kplanev1.ConditionUnknown})
	if len(next) != 2 || FindCondition(next, "B").GetStatus() != kplanev1.ConditionUnknown {
		t.Fatalf("append: got %v", next)
	}
	if FindCondition(next, "C") != nil {
		t.Fatal("found a condition that is not there")
	}
}

func TestToleratesTaint(t *testing.T) {
	taint := &kplanev1.Taint{Key: "k", Value: "v", Effect: kplanev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		tol  *kplanev1.Toleration
		want bool
	}{
		{&kplanev1.Toleration{Key: "k", Value: "v"}, true},
		{&kplanev1.Toleration{Key: "k", Operator: kplanev1.TolerationOpEqual, Value: "w"}, false},
		{&kplanev1.Toleration{Key: "k", Operator: kplanev1.TolerationOpExists}, true},
		{&kplanev1.Toleration{Operator: kplanev1.TolerationOpExists}, true},
		{&kplanev1.Toleration{Operator: kplanev1.TolerationOpExists, Effect: kplanev1.TaintEffectNoSchedule}, false},
		{&kplanev1.Toleration{Value: "v"}, false}, // Equal needs a key
		{&kplanev1.Toleration{Key: "other", Operator: kplanev1.TolerationOpExists}, false},
		{&kplanev1.Toleration{Key: "k", Operator: "Bogus"}, false},
	} {
		if got := Tolerates(tc.tol, taint); got != tc.want {
			t.Errorf("Tolerates(%v) = %v, want %v", tc.tol, got, tc.want)
		}
	}
}

func TestPodPredicates(t *testing.T) {
	pod := &kplanev1.Pod{Status: &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
		Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue}}}}
	if IsPodTerminal(pod) || !IsPodReady(pod) {
		t.Fatal("running ready pod judged wrongly")
	}
	pod.Status.Phase = kplanev1.PodFailed
	if !IsPodTerminal(pod) {
		t.Fatal("failed pod is terminal")
	}
}

func TestParseResourceVersion(t *testing.T) {
	for rv, want := range map[string]int64{"": 0, "0": 0, "42": 42} {
		if got, err := ParseResourceVersion(rv); err != nil || got != want {
			t.Errorf("ParseResourceVersion(%q) = %d, %v; want %d", rv, got, err, want)
		}
	}
	for _, rv := range []string{"abc", "-1", "1.5", " 1"} {
		if _, err := ParseResourceVersion(rv); err == nil {
			t.Errorf("ParseResourceVersion(%q) accepted a non-revision", rv)
		}
	}
}
