package plugins

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The args: System (the default) takes no list; List takes valid
// constraints; every error names its field.
func TestPodTopologySpreadArgs(t *testing.T) {
	for _, tc := range []struct {
		args    string
		wantErr string
		want    []DefaultSpreadConstraint
	}{
		{``, "", SystemDefaultConstraints},
		{`{"defaultingType":"System"}`, "", SystemDefaultConstraints},
		{`{"defaultingType":"List"}`, "", nil},
		{`{"defaultingType":"List","defaultConstraints":[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule"}]}`, "",
			[]DefaultSpreadConstraint{{1, "kubernetes.io/hostname", DoNotSchedule}}},
		{`{"defaultingType":"Sometimes"}`, `args.defaultingType: Unsupported value: "Sometimes"`, nil},
		{`{"defaultConstraints":[{"maxSkew":1,"topologyKey":"k","whenUnsatisfiable":"DoNotSchedule"}]}`, `args.defaultConstraints: Invalid value: 1 constraints: must be empty when .defaultingType is "System"`, nil},
		{`{"defaultingType":"List","defaultConstraints":[{"maxSkew":0,"topologyKey":"k","whenUnsatisfiable":"DoNotSchedule"}]}`, "args.defaultConstraints[0].maxSkew: Invalid value: 0", nil},
		{`{"defaultingType":"List","defaultConstraints":[{"maxSkew":1,"whenUnsatisfiable":"DoNotSchedule"}]}`, "args.defaultConstraints[0].topologyKey: Required value", nil},
		{`{"defaultingType":"List","defaultConstraints":[{"maxSkew":1,"topologyKey":"k","whenUnsatisfiable":"Maybe"}]}`, `args.defaultConstraints[0].whenUnsatisfiable: Unsupported value: "Maybe"`, nil},
		{`{"defaultingType":"List","defaultConstraints":[{"maxSkew":1,"topologyKey":"k","whenUnsatisfiable":"DoNotSchedule"},{"maxSkew":2,"topologyKey":"k","whenUnsatisfiable":"DoNotSchedule"}]}`, "args.defaultConstraints[1]: Duplicate value", nil},
		{`{"defaultingType":"List","defaultConstraints":[{"maxSkew":1,"topologyKey":"k","whenUnsatisfiable":"DoNotSchedule","labelSelector":{}}]}`, "labelSelector", nil},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var args PodTopologySpreadArgs
			err := strictJSON(json.RawMessage(tc.args), &args)
			var got []DefaultSpreadConstraint
			if err == nil {
				got, err = validateSpreadArgs(args)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("defaults %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// A pod without constraints of its own gets the defaults with its
// owners' selector: with the system defaults it prefers the node and zone
// with fewer of its group (node d, without a zone label, still spreads
// by node); a pod that belongs to no group, or has constraints of its
// own, does not get them. List defaults may filter.
func TestPodTopologySpreadDefaults(t *testing.T) {
	web := func(i int) *kplanev1.Pod { return pod(fmt.Sprint("w", i), labelled("app", "web")) }
	bySelector := func(p *kplanev1.Pod) labels.Selector {
		if p.GetMetadata().GetLabels()["app"] == "web" {
			return labels.SelectorFromSet(map[string]string{"app": "web"})
		}
		return labels.Everything() // no Service or controller
	}
	system := PodTopologySpread{systemDefaults: true, defaultSelector: bySelector}
	for _, d := range SystemDefaultConstraints {
		system.defaults = append(system.defaults, &kplanev1.TopologySpreadConstraint{MaxSkew: d.MaxSkew, TopologyKey: d.TopologyKey, WhenUnsatisfiable: d.WhenUnsatisfiable})
	}
	placed := map[string][]*kplanev1.Pod{"a": {web(0), web(1)}, "b": {web(2)}}
	got := newCluster(t, placed, true).scores(system, pod("p", labelled("app", "web")))
	// a: 2 on the node + 3 in zone-1 = 5; b: 1 + 3 = 4; c: 0 + 0; d: 0 (no zone).
	if got["c"] != 100 || got["d"] != 100 || got["a"] != 0 || got["b"] != 20 {
		t.Errorf("system default scores %v", got)
	}
	if got := newCluster(t, placed, true).scores(system, pod("p", labelled("app", "db"))); len(got) != 0 {
		t.Errorf("a pod of no group was scored: %v", got)
	}
	own := func(p *kplanev1.Pod) {
		p.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
			WhenUnsatisfiable: ScheduleAnyway, LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "none"}}}}
	}
	if got := newCluster(t, placed, true).scores(system, pod("p", labelled("app", "web"), own)); got["a"] != got["c"] {
		t.Errorf("the pod's own constraints were not used alone: %v", got)
	}

	list := PodTopologySpread{defaultSelector: bySelector, defaults: []*kplanev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: DoNotSchedule}}}
	if ok, why := newCluster(t, placed, false).feasible(list, pod("p", labelled("app", "web"))); ok != "c" || why != ReasonTopologySpread {
		t.Errorf("List DoNotSchedule default: feasible %q (%q), want c", ok, why)
	}
	if ok, _ := newCluster(t, placed, false).feasible(list, pod("p", labelled("app", "db"))); ok != "abc" {
		t.Errorf("a pod of no group was filtered: %q", ok)
	}
	if _, err := NewPodTopologySpread(json.RawMessage(`{"defaultingType":"List"}`), nil); err != nil {
		t.Fatal(err)
	}
}
