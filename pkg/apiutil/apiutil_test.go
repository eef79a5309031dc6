package apiutil

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// SetStatusCondition keeps the transition time while the status stays,
// takes the new one when it changes, and modifies neither argument.
func TestSetStatusCondition(t *testing.T) {
	t0, t1 := timestamppb.New(time.Unix(100, 0)), timestamppb.New(time.Unix(200, 0))
	conds := []*kplanev1.Condition{{Type: "A", Status: kplanev1.ConditionTrue, Reason: "Old", LastTransitionTime: t0}}
	same := &kplanev1.Condition{Type: "A", Status: kplanev1.ConditionTrue, Reason: "New", LastTransitionTime: t1}
	next := SetStatusCondition(conds, same)
	if c := FindCondition(next, "A"); len(next) != 1 || c.GetReason() != "New" || !proto.Equal(c.GetLastTransitionTime(), t0) {
		t.Fatalf("same status: got %v, want reason New with the old transition time", next)
	}
	if !proto.Equal(same.GetLastTransitionTime(), t1) || conds[0].GetReason() != "Old" {
		t.Fatal("SetStatusCondition modified its arguments")
	}
	changed := &kplanev1.Condition{Type: "A", Status: kplanev1.ConditionFalse, LastTransitionTime: t1}
	if c := FindCondition(SetStatusCondition(conds, changed), "A"); !proto.Equal(c.GetLastTransitionTime(), t1) {
		t.Fatalf("changed status: transition time %v, want the new one", c.GetLastTransitionTime())
	}
	added := SetStatusCondition(conds, &kplanev1.Condition{Type: "B", Status: kplanev1.ConditionTrue, LastTransitionTime: t1})
	if len(added) != 2 || !proto.Equal(FindCondition(added, "B").GetLastTransitionTime(), t1) {
		t.Fatalf("new type: got %v", added)
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

func TestPortsResolveByNumberOrName(t *testing.T) {
	web := &kplanev1.Container{Name: "web", Ports: []*kplanev1.ContainerPort{
		{Name: "http", ContainerPort: 8080},
		{Name: "dns", ContainerPort: 5353, Protocol: kplanev1.ProtocolUDP},
	}}
	pod := &kplanev1.Pod{Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "side"}, web}}}
	for _, c := range []struct {
		port     *kplanev1.IntOrString
		protocol string
		want     int32
		ok       bool
	}{
		{kplanev1.IntOrStringFromInt32(9000), "", 9000, true},
		{kplanev1.IntOrStringFromString("http"), "", 8080, true},
		{kplanev1.IntOrStringFromString("http"), kplanev1.ProtocolTCP, 8080, true},
		{kplanev1.IntOrStringFromString("dns"), kplanev1.ProtocolUDP, 5353, true},
		{kplanev1.IntOrStringFromString("dns"), kplanev1.ProtocolTCP, 0, false}, // the name exists, for another protocol
		{kplanev1.IntOrStringFromString("metrics"), "", 0, false},
	} {
		got, ok := PodPort(pod, c.port, c.protocol)
		if got != c.want || ok != c.ok {
			t.Errorf("PodPort(%s, %q) = %d, %v; want %d, %v", c.port.Text(), c.protocol, got, ok, c.want, c.ok)
		}
	}
	if got, err := ContainerPort(web, kplanev1.IntOrStringFromString("http")); got != 8080 || err != nil {
		t.Errorf("ContainerPort(http) = %d, %v", got, err)
	}
	if _, err := ContainerPort(web, kplanev1.IntOrStringFromString("metrics")); err == nil || !strings.Contains(err.Error(), `container "web" has no port named "metrics"`) {
		t.Errorf("ContainerPort(metrics) error = %v", err)
	}
}

func TestIsPodActive(t *testing.T) {
	pod := func(phase string, deleting bool) *kplanev1.Pod {
		p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p"}, Status: &kplanev1.PodStatus{Phase: phase}}
		if deleting {
			p.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		return p
	}
	for _, c := range []struct {
		pod  *kplanev1.Pod
		want bool
	}{
		{pod(kplanev1.PodPending, false), true},
		{pod(kplanev1.PodRunning, false), true},
		{pod(kplanev1.PodRunning, true), false},
		{pod(kplanev1.PodSucceeded, false), false},
		{pod(kplanev1.PodFailed, false), false},
	} {
		if got := IsPodActive(c.pod); got != c.want {
			t.Errorf("IsPodActive(phase %s, deleting %v) = %v; want %v", c.pod.GetStatus().GetPhase(),
				c.pod.GetMetadata().GetDeletionTimestamp() != nil, got, c.want)
		}
	}
}
