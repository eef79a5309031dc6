package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func ownedBy(uid string, p *kplanev1.Pod) *kplanev1.Pod {
	p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Uid: uid, Controller: true}}
	return p
}

func TestScoreLeastAllocated(t *testing.T) {
	tests := []struct {
		name string
		pod  *kplanev1.Pod
		node *NodeInfo
		want int64
	}{
		{"empty node, pod takes a quarter", testPod("p", [2]string{"1", "1Gi"}), nodeInfo(testNode("n", "4", "4Gi", 10)), 75},
		{"assigned pods count", testPod("p", [2]string{"1", "1Gi"}),
			nodeInfo(testNode("n", "4", "4Gi", 10), testPod("a", [2]string{"1", "3Gi"})), (50 + 0) / 2},
		{"no requests use the scoring defaults", testPod("p"), nodeInfo(testNode("n", "1", "800Mi", 10)), (90 + 75) / 2},
		{"over-full resource scores 0", testPod("p", [2]string{"2", "1Gi"}), nodeInfo(testNode("n", "1", "2Gi", 10)), (0 + 50) / 2},
		{"no allocatable scores 0", testPod("p", [2]string{"1", "1Gi"}), nodeInfo(testNode("n", "", "", 10)), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ScoreLeastAllocated(mustInfo(tt.pod), tt.node); got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestScoreBalancedAllocation(t *testing.T) {
	tests := []struct {
		name string
		pod  *kplanev1.Pod
		node *NodeInfo
		want int64
	}{
		{"same fractions are perfectly balanced", testPod("p", [2]string{"1", "1Gi"}), nodeInfo(testNode("n", "4", "4Gi", 10)), 100},
		{"all cpu no memory", testPod("p", [2]string{"4", "1"}), nodeInfo(testNode("n", "4", "4Gi", 10)), 50},
		{"half apart", testPod("p", [2]string{"3", "1Gi"}),
			nodeInfo(testNode("n", "4", "4Gi", 10)), 75},
		{"fractions are capped at one", testPod("p", [2]string{"8", "4Gi"}), nodeInfo(testNode("n", "4", "4Gi", 10)), 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ScoreBalancedAllocation(mustInfo(tt.pod), tt.node); got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestScoreOwnerSpread(t *testing.T) {
	pod := ownedBy("rs-1", testPod("p"))
	nodes := []*NodeInfo{
		nodeInfo(testNode("a", "4", "4Gi", 10), ownedBy("rs-1", testPod("x1")), ownedBy("rs-1", testPod("x2"))),
		nodeInfo(testNode("b", "4", "4Gi", 10), ownedBy("rs-1", testPod("x3")), ownedBy("rs-2", testPod("y1"))),
		nodeInfo(testNode("c", "4", "4Gi", 10), ownedBy("rs-2", testPod("y2"))),
	}
	raw := make([]int64, len(nodes))
	for i, n := range nodes {
		raw[i] = ScoreOwnerSpread(mustInfo(pod), n)
	}
	if !slices.Equal(raw, []int64{2, 1, 0}) {
		t.Fatalf("raw = %v", raw)
	}
	NormalizeReverse(raw)
	if !slices.Equal(raw, []int64{0, 50, 100}) {
		t.Fatalf("normalized = %v", raw)
	}
	if got := ScoreOwnerSpread(mustInfo(testPod("orphan")), nodes[0]); got != 0 {
		t.Fatalf("a pod without owner scored %d", got)
	}
}

func TestScoreTaints(t *testing.T) {
	pod := testPod("p")
	pod.Spec.Tolerations = []*kplanev1.Toleration{{Key: "ok", Operator: "Exists", Effect: "PreferNoSchedule"}}
	tests := []struct {
		name string
		node *NodeInfo
		want int64
	}{
		{"untainted", nodeInfo(testNode("n", "1", "1Gi", 1)), 0},
		{"tolerated prefer", nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("ok", "", "PreferNoSchedule"))), 0},
		{"two untolerated prefer", nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("a", "", "PreferNoSchedule"),
			withTaint("b", "x", "PreferNoSchedule"), withTaint("c", "", "NoSchedule"))), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ScoreTaints(mustInfo(pod), tt.node); got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestNormalizeReverse(t *testing.T) {
	for _, tt := range []struct{ in, want []int64 }{
		{[]int64{0, 0, 0}, []int64{100, 100, 100}},
		{[]int64{4, 2, 0}, []int64{0, 50, 100}},
		{[]int64{3}, []int64{0}},
	} {
		got := slices.Clone(tt.in)
		NormalizeReverse(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("NormalizeReverse(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestPrioritizePrefersEmptierUntaintedSpreadNodes(t *testing.T) {
	pod := ownedBy("rs", testPod("p", [2]string{"1", "1Gi"}))
	busy := nodeInfo(testNode("busy", "4", "4Gi", 10), testPod("a", [2]string{"2", "2Gi"}))
	idle := nodeInfo(testNode("idle", "4", "4Gi", 10))
	if s := Prioritize(mustInfo(pod), []*NodeInfo{busy, idle}); s[1] <= s[0] {
		t.Fatalf("scores %v: the idle node must win", s)
	}
	sibling := nodeInfo(testNode("sibling", "4", "4Gi", 10), ownedBy("rs", testPod("s", [2]string{"", "1"})))
	other := nodeInfo(testNode("other", "4", "4Gi", 10), testPod("o", [2]string{"", "1"}))
	if s := Prioritize(mustInfo(pod), []*NodeInfo{sibling, other}); s[1] <= s[0] {
		t.Fatalf("scores %v: the node without a sibling must win", s)
	}
	prefer := nodeInfo(testNode("prefer", "4", "4Gi", 10, withTaint("x", "", "PreferNoSchedule")))
	if s := Prioritize(mustInfo(pod), []*NodeInfo{prefer, idle}); s[1] <= s[0] {
		t.Fatalf("scores %v: the untainted node must win", s)
	}
}

func TestSelectHostBreaksTiesAtRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	if got := SelectHost([]int64{1, 5, 3}, rnd); got != 1 {
		t.Fatalf("best = %d, want 1", got)
	}
	seen := map[int]int{}
	for range 300 {
		seen[SelectHost([]int64{2, 7, 7, 1, 7}, rnd)]++
	}
	for _, i := range []int{1, 2, 4} {
		if seen[i] < 50 {
			t.Fatalf("tie %d chosen %d/300 times (%v): ties must be shared", i, seen[i], seen)
		}
	}
	if seen[0]+seen[3] != 0 {
		t.Fatalf("a lower score was chosen: %v", seen)
	}
}
