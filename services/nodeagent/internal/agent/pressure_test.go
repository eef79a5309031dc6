package agent

import (
	"strings"
	"sync"
	"testing"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const mi = int64(1) << 20

func TestParseEvictionHard(t *testing.T) {
	got, err := ParseEvictionHard("memory.available<100Mi, nodefs.available<10%,pid.available<5%,nodefs.inodesFree<2.5%")
	if err != nil {
		t.Fatal(err)
	}
	want := []Threshold{
		{Signal: SignalMemoryAvailable, Quantity: 100 * mi},
		{Signal: SignalNodefsAvailable, Percent: 10},
		{Signal: SignalPIDAvailable, Percent: 5},
		{Signal: SignalNodefsInodes, Percent: 2.5},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d thresholds, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Signal != want[i].Signal || got[i].Quantity != want[i].Quantity || got[i].Percent != want[i].Percent {
			t.Errorf("threshold %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[1].min(1000) != 100 || got[0].min(1000) != 100*mi {
		t.Errorf("min: %d, %d", got[1].min(1000), got[0].min(1000))
	}
	if th, err := ParseEvictionHard(""); err != nil || len(th) != 0 {
		t.Errorf("empty: %v, %v", th, err)
	}
	if _, err := ParseEvictionHard(DefaultEvictionHard); err != nil {
		t.Errorf("default: %v", err)
	}

	for _, tc := range []struct{ in, want string }{
		{"memory.available>100Mi", "only the < operator"},
		{"memory.available", "want signal<value"},
		{"imagefs.available<15%", `unknown signal "imagefs.available"`},
		{"memory.available<lots", "memory.available:"},
		{"memory.available<-1Mi", "memory.available:"},
		{"memory.available<0", "memory.available: quantity must be positive"},
		{"nodefs.available<0%", "nodefs.available: percentage"},
		{"nodefs.available<150%", "nodefs.available: percentage"},
		{"nodefs.available<x%", "nodefs.available: percentage"},
		{"pid.available<5%,pid.available<6%", "signal pid.available given twice"},
	} {
		_, err := ParseEvictionHard(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "--eviction-hard: ") {
			t.Errorf("ParseEvictionHard(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestRankForEviction(t *testing.T) {
	pod := func(name string) *kplanev1.Pod {
		return &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: name}}
	}
	for _, tc := range []struct {
		name string
		in   []candidate
		want []string
	}{
		{"over requests before within, whatever the priority", []candidate{
			{pod: pod("within-low"), usage: 50, request: 100, priority: -10},
			{pod: pod("over-high"), usage: 200, request: 100, priority: 1000},
		}, []string{"over-high", "within-low"}},
		{"then lower priority before bigger overuse", []candidate{
			{pod: pod("big-high"), usage: 900, request: 0, priority: 100},
			{pod: pod("small-low"), usage: 200, request: 100, priority: 0},
		}, []string{"small-low", "big-high"}},
		{"then the bigger overuse", []candidate{
			{pod: pod("small"), usage: 150, request: 100},
			{pod: pod("big"), usage: 500, request: 100},
			{pod: pod("within"), usage: 10, request: 100},
		}, []string{"big", "small", "within"}},
		{"within requests: lower priority, then closer to the request", []candidate{
			{pod: pod("far"), usage: 10, request: 100, priority: 5},
			{pod: pod("close"), usage: 90, request: 100, priority: 5},
			{pod: pod("low"), usage: 1, request: 100, priority: 1},
		}, []string{"low", "close", "far"}},
		{"no usage known (pid signal): priority alone, stable", []candidate{
			{pod: pod("a"), priority: 3},
			{pod: pod("b"), priority: 1},
			{pod: pod("c"), priority: 3},
		}, []string{"b", "a", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rankForEviction(tc.in)
			var got []string
			for _, c := range tc.in {
				got = append(got, c.pod.GetMetadata().GetName())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProcStatsReadsHost reads the real /proc and statfs of a temp dir.
func TestProcStatsReadsHost(t *testing.T) {
	p := &procStats{proc: "/proc", root: t.TempDir()}
	s, err := p.NodeStats()
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryCapacity <= 0 || s.MemoryAvailable <= 0 || s.MemoryAvailable > s.MemoryCapacity {
		t.Errorf("memory available %d of %d", s.MemoryAvailable, s.MemoryCapacity)
	}
	if s.NodefsCapacity <= 0 || s.NodefsAvailable < 0 || s.NodefsAvailable > s.NodefsCapacity {
		t.Errorf("nodefs available %d of %d", s.NodefsAvailable, s.NodefsCapacity)
	}
	if s.Inodes > 0 && s.InodesFree > s.Inodes {
		t.Errorf("inodes free %d of %d", s.InodesFree, s.Inodes)
	}
	// This test's own threads hold pids.
	if s.PIDCapacity <= 0 || s.PIDAvailable <= 0 || s.PIDAvailable >= s.PIDCapacity {
		t.Errorf("pids available %d of %d", s.PIDAvailable, s.PIDCapacity)
	}
	if _, err := (&procStats{proc: t.TempDir(), root: t.TempDir()}).NodeStats(); err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Errorf("missing /proc: %v", err)
	}
}

// fedStats is the test's StatsSource: memory available is the fed total
// less what the runtime's running pods use, so evicting a pod relieves
// the pressure as it would on a host.
type fedStats struct {
	a     *Agent
	mu    sync.Mutex
	total int64
	usage map[string]int64 // by pod name
}

func (f *fedStats) NodeStats() (NodeStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	used := int64(0)
	for _, rp := range f.a.rt.Pods() {
		if rp.Running {
			used += f.usage[rp.Name]
		}
	}
	return NodeStats{MemoryCapacity: f.total, MemoryAvailable: f.total - used,
		NodefsCapacity: 100 << 30, NodefsAvailable: 50 << 30, Inodes: 1000, InodesFree: 900, PIDCapacity: 1000, PIDAvailable: 900}, nil
}

func (f *fedStats) PodStats(uid string) PodStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rp := range f.a.rt.Pods() {
		if rp.UID == uid {
			return PodStats{Memory: f.usage[rp.Name]}
		}
	}
	return PodStats{}
}

func TestMemoryPressureEvicts(t *testing.T) {
	fed := &fedStats{total: 1100 * mi, usage: map[string]int64{"steady": 100 * mi, "hog": 500 * mi, "important": 480 * mi}}
	old := newStatsSource
	newStatsSource = func(a *Agent) StatsSource { fed.a = a; return fed }
	t.Cleanup(func() { newStatsSource = old })

	e := newEnv(t)
	e.startAgent("--runtime", "fake", "--memory", "1100Mi", "--ephemeral-storage", "10Gi",
		"--eviction-hard", "memory.available<100Mi", "--eviction-pressure-transition-period", "2s")
	node := e.waitNode("MemoryPressure=False", func(n *kplanev1.Node) bool {
		return apiutil.FindCondition(n.GetStatus().GetConditions(), NodeMemoryPressure).GetStatus() == kplanev1.ConditionFalse
	})
	ns := node.GetStatus()
	if ns.GetCapacity()["memory"] != "1100Mi" || ns.GetAllocatable()["memory"] != "1000Mi" ||
		ns.GetCapacity()["ephemeral-storage"] != "10Gi" || ns.GetAllocatable()["ephemeral-storage"] != "10Gi" {
		t.Fatalf("capacity %v allocatable %v", ns.GetCapacity(), ns.GetAllocatable())
	}
	for _, typ := range []string{NodeDiskPressure, NodePIDPressure} {
		if c := apiutil.FindCondition(ns.GetConditions(), typ); c.GetStatus() != kplanev1.ConditionFalse {
			t.Errorf("%s = %v", typ, c)
		}
	}

	// Priority comes from a PriorityClass: admission refuses a literal one.
	if _, err := client.For[*kplanev1.PriorityClass](e.api).Create(e.ctx, &kplanev1.PriorityClass{
		Metadata: &kplanev1.ObjectMeta{Name: "important"}, Value: 1000,
	}); err != nil {
		t.Fatal(err)
	}
	withMemory := func(request string, priority int32) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			if priority > 0 {
				p.Spec.PriorityClassName = "important"
			}
			if request != "" {
				p.Spec.Containers[0].Resources = &kplanev1.ResourceRequirements{Requests: map[string]string{"memory": request}}
			}
		}
	}
	// steady stays within its request; hog and important exceed theirs,
	// important by more but at a higher priority: hog goes.
	steady := e.createPod("steady", "node-a", withMemory("200Mi", 0))
	hog := e.createPod("hog", "node-a", withMemory("100Mi", 0))
	important := e.createPod("important", "node-a", withMemory("", 1000))

	e.waitNode("MemoryPressure=True", func(n *kplanev1.Node) bool {
		c := apiutil.FindCondition(n.GetStatus().GetConditions(), NodeMemoryPressure)
		return c.GetStatus() == kplanev1.ConditionTrue && c.GetReason() == "KubeletHasInsufficientMemory"
	})
	got := e.waitCreated(hog, "evicted", func(p *kplanev1.Pod) bool {
		return p.GetStatus().GetPhase() == kplanev1.PodFailed && p.GetStatus().GetReason() == ReasonEvicted
	})
	if msg := got.GetStatus().GetMessage(); !strings.Contains(msg, "low on resource: memory") || !strings.Contains(msg, "memory.available<100Mi") {
		t.Errorf("eviction message %q", msg)
	}
	waitFor(t, e.ctx, "Evicted event for hog", func() bool {
		for _, ev := range e.events(hog) {
			if strings.HasPrefix(ev, ReasonEvicted+": The node was low on resource: memory") {
				return true
			}
		}
		return false
	})
	// Relieved, the condition clears after the transition period, and
	// nothing else was evicted.
	e.waitNode("MemoryPressure=False again", func(n *kplanev1.Node) bool {
		c := apiutil.FindCondition(n.GetStatus().GetConditions(), NodeMemoryPressure)
		return c.GetStatus() == kplanev1.ConditionFalse && c.GetReason() == "KubeletHasSufficientMemory"
	})
	for _, p := range []*kplanev1.Pod{steady, important} {
		if cur := e.waitCreated(p, "running", phase(kplanev1.PodRunning)); cur.GetStatus().GetReason() != "" {
			t.Errorf("pod %s: %v", p.GetMetadata().GetName(), cur.GetStatus())
		}
	}
}

// waitNode polls node-a until cond holds and returns it.
func (e *env) waitNode(what string, cond func(*kplanev1.Node) bool) *kplanev1.Node {
	e.t.Helper()
	var n *kplanev1.Node
	waitFor(e.t, e.ctx, "node-a "+what, func() bool {
		var err error
		n, err = client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "node-a")
		return err == nil && cond(n)
	})
	return n
}
