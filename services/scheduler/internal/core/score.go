package core

import (
	"math/rand/v2"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// MaxNodeScore is the best score a scorer gives a node.
const MaxNodeScore = 100

// Scorer ranks the nodes a pod fits. Fn gives a node's raw score; when
// Normalize is set it maps the raw scores of all feasible nodes (in place)
// onto 0..MaxNodeScore, for scores that only mean something relative to
// the other nodes. The weighted sum of all scorers decides.
type Scorer struct {
	Name      string
	Weight    int64
	Fn        func(pod *PodInfo, node *NodeInfo) int64
	Normalize func(scores []int64)
}

// Scorers are the scores in use, weighted as Kubernetes weighs its
// defaults: resources 1 each, spreading 2, taint preferences 3.
var Scorers = []Scorer{
	{Name: "LeastAllocated", Weight: 1, Fn: ScoreLeastAllocated},
	{Name: "BalancedAllocation", Weight: 1, Fn: ScoreBalancedAllocation},
	{Name: "OwnerSpread", Weight: 2, Fn: ScoreOwnerSpread, Normalize: NormalizeReverse},
	{Name: "TaintToleration", Weight: 3, Fn: ScoreTaints, Normalize: NormalizeReverse},
}

// ScoreLeastAllocated favours the node with the most room left after
// placing the pod: the mean over cpu and memory of the free fraction, in
// 0..MaxNodeScore. Pods without requests count with the scoring defaults.
func ScoreLeastAllocated(pod *PodInfo, node *NodeInfo) int64 {
	after := node.NonZeroRequested.Add(pod.NonZero)
	return (leastAllocated(after.MilliCPU, node.Allocatable.MilliCPU) +
		leastAllocated(after.Memory, node.Allocatable.Memory)) / 2
}

func leastAllocated(requested, allocatable int64) int64 {
	if allocatable <= 0 || requested > allocatable {
		return 0
	}
	return (allocatable - requested) * MaxNodeScore / allocatable
}

// ScoreBalancedAllocation favours the node whose cpu and memory would be
// used in the same proportion after placing the pod, so that neither runs
// out while the other sits idle: MaxNodeScore times one minus the standard
// deviation of the two used fractions.
func ScoreBalancedAllocation(pod *PodInfo, node *NodeInfo) int64 {
	after := node.NonZeroRequested.Add(pod.NonZero)
	cpu := fraction(after.MilliCPU, node.Allocatable.MilliCPU)
	mem := fraction(after.Memory, node.Allocatable.Memory)
	d := cpu - mem
	if d < 0 {
		d = -d
	}
	// For two values the standard deviation is half their difference.
	return int64((1 - d/2) * MaxNodeScore)
}

func fraction(requested, allocatable int64) float64 {
	if allocatable <= 0 {
		return 1
	}
	f := float64(requested) / float64(allocatable)
	return min(f, 1)
}

// ScoreOwnerSpread is the raw spreading score: how many pods of the pod's
// controlling owner the node already has (fewer is better; see
// NormalizeReverse). A pod without an owner scores alike everywhere.
func ScoreOwnerSpread(pod *PodInfo, node *NodeInfo) int64 {
	if pod.OwnerUID == "" {
		return 0
	}
	return int64(node.OwnerCount(pod.OwnerUID))
}

// ScoreTaints is the raw taint score: how many PreferNoSchedule taints of
// the node the pod does not tolerate (fewer is better).
func ScoreTaints(pod *PodInfo, node *NodeInfo) int64 {
	var n int64
	for _, t := range node.Taints {
		if t.GetEffect() == kplanev1.TaintEffectPreferNoSchedule && !tolerated(pod, t.GetKey(), t.GetValue(), t.GetEffect()) {
			n++
		}
	}
	return n
}

// NormalizeReverse maps counts where less is better onto 0..MaxNodeScore:
// the smallest count gets the most, the largest gets 0; all equal gets
// MaxNodeScore.
func NormalizeReverse(scores []int64) {
	var highest int64
	for _, s := range scores {
		highest = max(highest, s)
	}
	for i, s := range scores {
		if highest == 0 {
			scores[i] = MaxNodeScore
			continue
		}
		scores[i] = MaxNodeScore * (highest - s) / highest
	}
}

// Prioritize returns the weighted total score of each node (same order),
// for a pod that fits all of them.
func Prioritize(pod *PodInfo, nodes []*NodeInfo) []int64 {
	totals := make([]int64, len(nodes))
	raw := make([]int64, len(nodes))
	for _, s := range Scorers {
		for i, n := range nodes {
			raw[i] = s.Fn(pod, n)
		}
		if s.Normalize != nil {
			s.Normalize(raw)
		}
		for i := range nodes {
			totals[i] += s.Weight * raw[i]
		}
	}
	return totals
}

// SelectHost returns the index of the best score, choosing uniformly at
// random among equal best scores (reservoir sampling), so that identical
// nodes share the load instead of the first one taking everything.
// scores must not be empty.
func SelectHost(scores []int64, rnd *rand.Rand) int {
	best, seen := 0, 1
	for i := 1; i < len(scores); i++ {
		switch {
		case scores[i] > scores[best]:
			best, seen = i, 1
		case scores[i] == scores[best]:
			seen++
			if rnd.IntN(seen) == 0 {
				best = i
			}
		}
	}
	return best
}
