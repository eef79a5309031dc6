package framework_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/framework/plugins"
)

func build(t *testing.T, doc string) (map[string]*framework.Framework, error) {
	t.Helper()
	cfg, err := framework.ParseConfig([]byte(doc))
	if err != nil {
		return nil, err
	}
	return framework.NewProfiles(cfg, plugins.NewInTreeRegistry(), plugins.DefaultPlugins(), nil, 1)
}

const head = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

func TestProfilesFromConfig(t *testing.T) {
	profiles, err := build(t, head+`profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  plugins:
    score:
      disabled:
      - name: SelectorSpread
      enabled:
      - name: NodeResourcesFit
        weight: 5
    filter:
      disabled:
      - name: NodePorts
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(profiles) != 2 {
		t.Fatalf("profiles: %d, want 2", len(profiles))
	}
	def := profiles["default-scheduler"].PluginNames()
	wantDefault := map[string]string{
		"preFilter": "NodeAffinity,NodePorts,VolumeBinding,PodTopologySpread",
		"filter":    "NodeReady,NodeUnschedulable,TaintToleration,NodeAffinity,NodePorts,NodeResourcesFit,VolumeBinding,PodTopologySpread,InterPodAffinity",
		"preScore":  "NodeAffinity,PodTopologySpread,InterPodAffinity",
		"score":     "TaintToleration:3,NodeAffinity:2,NodeResourcesFit:1,PodTopologySpread:2,InterPodAffinity:2,NodeResourcesBalancedAllocation:1,SelectorSpread:2",
		"preBind":   "VolumeBinding",
		"bind":      "DefaultBinder",
	}
	for point, want := range wantDefault {
		if got := strings.Join(def[point], ","); got != want {
			t.Errorf("default %s = %s, want %s", point, got, want)
		}
	}
	packer := profiles["packer"].PluginNames()
	if got, want := strings.Join(packer["score"], ","), "TaintToleration:3,NodeAffinity:2,PodTopologySpread:2,InterPodAffinity:2,NodeResourcesBalancedAllocation:1,NodeResourcesFit:5"; got != want {
		t.Errorf("packer score = %s, want %s", got, want)
	}
	if got := strings.Join(packer["filter"], ","); strings.Contains(got, "NodePorts") {
		t.Errorf("packer filter still has NodePorts: %s", got)
	}
	if got := strings.Join(packer["preFilter"], ","); got != "NodeAffinity,NodePorts,VolumeBinding,PodTopologySpread" {
		t.Errorf("packer preFilter = %s (disabling a filter leaves the prefilter)", got)
	}

	// The packer profile's MostAllocated strategy fills the fuller node;
	// the default spreads to the emptier one.
	full := node("full", "4", "8Gi", "3", "6Gi")
	empty := node("empty", "4", "8Gi", "", "")
	pod := mustPod(t, newPod("p", "500m", "512Mi"))
	for name, want := range map[string]string{"default-scheduler": "empty", "packer": "full"} {
		totals, err := profiles[name].RunScorePlugins(context.Background(), framework.NewCycleState(), pod, []*framework.NodeInfo{full(t), empty(t)})
		if err != nil {
			t.Fatal(err)
		}
		got := "full"
		if totals[1] > totals[0] {
			got = "empty"
		}
		if got != want {
			t.Errorf("%s prefers %s (scores %v), want %s", name, got, totals, want)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"api version", "apiVersion: v1\nkind: KubeSchedulerConfiguration\n", `apiVersion: Unsupported value: "v1"`},
		{"kind", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: Pod\n", `kind: Unsupported value: "Pod"`},
		{"unknown field", head + "profiles:\n- schedulerName: a\n  plugin: {}\n", `unknown field "plugin"`},
		{"duplicate profile", head + "profiles:\n- schedulerName: a\n- schedulerName: a\n", `profiles[1].schedulerName: Duplicate value: "a"`},
		{"unknown plugin", head + "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: Nope\n", `profiles[0].plugins.score.enabled[0].name: Unsupported value: "Nope"`},
		{"wrong point", head + "profiles:\n- plugins:\n    bind:\n      enabled:\n      - name: NodePorts\n", `profiles[0].plugins.bind.enabled[0].name: Invalid value: "NodePorts": the plugin does not implement bind`},
		{"weight range", head + "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 101\n", `profiles[0].plugins.score.enabled[0].weight: Invalid value: 101`},
		{"weight off score", head + "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NodePorts\n        weight: 2\n", `profiles[0].plugins.filter.enabled[0].weight: Invalid value: 2: only score plugins have a weight`},
		{"no binder", head + "profiles:\n- plugins:\n    bind:\n      disabled:\n      - name: '*'\n", `profiles[0].plugins.bind: Required value`},
		{"bad strategy", head + "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: Fullest}}\n", `args.scoringStrategy.type: Unsupported value: "Fullest"`},
		{"bad shape", head + "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: RequestedToCapacityRatio, requestedToCapacityRatio: {shape: [{utilization: 50, score: 11}]}}}\n", `shape[0].score: Invalid value: 11`},
		{"args to a plain plugin", head + "profiles:\n- pluginConfig:\n  - name: NodePorts\n    args: {x: 1}\n", `plugin NodePorts: args: Forbidden`},
		{"args of a disabled plugin", head + "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: NodePorts\n  pluginConfig:\n  - name: NodePorts\n", `pluginConfig: Invalid value: "NodePorts"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build(t, tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if _, err := framework.LoadConfig(path); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := framework.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Profiles) != 1 || c.Profiles[0].SchedulerName != kplanev1.DefaultSchedulerName {
		t.Fatalf("no profiles means the default one; got %+v", c.Profiles)
	}
}
