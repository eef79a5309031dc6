package plugins

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// PodTopologySpread's reasons and the field values, as Kubernetes has them.
const (
	ReasonTopologySpreadMissingLabel = "node(s) didn't match pod topology spread constraints (missing required label)"
	ReasonTopologySpread             = "node(s) didn't match pod topology spread constraints"
	DoNotSchedule                    = "DoNotSchedule"
	ScheduleAnyway                   = "ScheduleAnyway"
	PolicyHonor                      = "Honor"
	PolicyIgnore                     = "Ignore"
	spreadFilterKey                  = PodTopologySpreadName + "/filter"
	spreadScoreKey                   = PodTopologySpreadName + "/score"
)

// PodTopologySpread is Kubernetes' PodTopologySpread plugin: for each of
// the pod's topologySpreadConstraints, the pods its selector matches (in
// the pod's namespace) are counted per domain (a node's value of
// topologyKey) over the eligible nodes — those with every constraint's
// key and, by the node inclusion policies, matching the pod's node
// affinity (nodeAffinityPolicy Honor, the default) and with taints it
// tolerates (nodeTaintsPolicy Honor; Ignore by default). DoNotSchedule
// constraints reject a node where placing the pod would make its
// domain's count exceed the smallest by more than maxSkew (the smallest
// is 0 while there are fewer domains than minDomains); ScheduleAnyway
// constraints prefer the domains with fewer matching pods.
type PodTopologySpread struct{}

// Name implements framework.Plugin.
func (PodTopologySpread) Name() string { return PodTopologySpreadName }

type spreadConstraint struct {
	maxSkew      int64
	key          string
	selector     labels.Selector
	minDomains   int
	honorAffinty bool
	honorTaints  bool
}

type spreadState struct {
	constraints []spreadConstraint
	// counts per constraint: domain value → matching pods; every domain
	// of an eligible node is present (possibly 0).
	counts []map[string]int64
	// self per constraint: the pod matches its own selector.
	self []int64
}

func parseConstraints(pod *framework.PodInfo, when string) []spreadConstraint {
	var out []spreadConstraint
	for _, c := range pod.Pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() != when {
			continue
		}
		ls := c.GetLabelSelector()
		if len(c.GetMatchLabelKeys()) > 0 {
			ls = proto.Clone(ls).(*kplanev1.LabelSelector)
			if ls == nil {
				ls = &kplanev1.LabelSelector{}
			}
			for _, k := range c.GetMatchLabelKeys() {
				if v, ok := pod.Labels[k]; ok {
					ls.MatchExpressions = append(ls.MatchExpressions, &kplanev1.LabelSelectorRequirement{Key: k, Operator: "In", Values: []string{v}})
				}
			}
		}
		// The apiserver validated the selector; one that does not parse
		// selects nothing.
		sel, err := labels.FromLabelSelector(ls)
		if err != nil {
			sel = labels.Nothing()
		}
		minDomains := 1
		if c.MinDomains != nil {
			minDomains = int(c.GetMinDomains())
		}
		out = append(out, spreadConstraint{
			maxSkew: int64(c.GetMaxSkew()), key: c.GetTopologyKey(), selector: sel, minDomains: minDomains,
			honorAffinty: c.GetNodeAffinityPolicy() != PolicyIgnore,
			honorTaints:  c.GetNodeTaintsPolicy() == PolicyHonor,
		})
	}
	return out
}

// count builds the per-domain counts of constraints over nodes.
func count(pod *framework.PodInfo, constraints []spreadConstraint, nodes []*framework.NodeInfo) *spreadState {
	s := &spreadState{constraints: constraints, counts: make([]map[string]int64, len(constraints)), self: make([]int64, len(constraints))}
	for i, c := range constraints {
		s.counts[i] = map[string]int64{}
		if c.selector.Matches(pod.Labels) {
			s.self[i] = 1
		}
	}
	for _, n := range nodes {
		if !n.Known {
			continue
		}
		hasKeys := true
		for _, c := range constraints {
			if _, ok := n.Labels[c.key]; !ok {
				hasKeys = false
				break
			}
		}
		if !hasKeys {
			continue
		}
		for i, c := range constraints {
			if c.honorAffinty && !RequiredNodeAffinityMatches(pod.Pod, n.Name, n.Labels) {
				continue
			}
			if c.honorTaints && len(core.FilterTaints(pod, n)) > 0 {
				continue
			}
			v := n.Labels[c.key]
			cnt := s.counts[i][v]
			n.Pods(func(e *framework.PodInfo) bool {
				if e.Namespace == pod.Namespace && e.Pod.GetMetadata().GetDeletionTimestamp() == nil && c.selector.Matches(e.Labels) {
					cnt++
				}
				return true
			})
			s.counts[i][v] = cnt
		}
	}
	return s
}

// PreFilter implements framework.PreFilterPlugin: a pod without
// DoNotSchedule constraints skips the Filter.
func (PodTopologySpread) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	for _, c := range pod.Pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() == DoNotSchedule {
			return nil
		}
	}
	return framework.NewStatus(framework.Skip)
}

// Filter implements framework.FilterPlugin.
func (PodTopologySpread) Filter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	var s *spreadState
	if v, ok := state.Read(spreadFilterKey); ok {
		s = v.(*spreadState)
	} else {
		cs := parseConstraints(pod, DoNotSchedule)
		if len(cs) > 0 {
			s = count(pod, cs, state.Nodes())
		}
		state.Write(spreadFilterKey, s)
	}
	if s == nil {
		return nil
	}
	for i, c := range s.constraints {
		v, ok := node.Labels[c.key]
		if !ok {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonTopologySpreadMissingLabel)
		}
		var minCount int64
		if len(s.counts[i]) >= c.minDomains {
			first := true
			for _, n := range s.counts[i] {
				if first || n < minCount {
					minCount, first = n, false
				}
			}
		}
		if s.counts[i][v]+s.self[i]-minCount > c.maxSkew {
			return framework.NewStatus(framework.Unschedulable, ReasonTopologySpread)
		}
	}
	return nil
}

// PreScore implements framework.PreScorePlugin: it counts for the
// ScheduleAnyway constraints, or skips when there are none.
func (PodTopologySpread) PreScore(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	cs := parseConstraints(pod, ScheduleAnyway)
	if len(cs) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	state.Write(spreadScoreKey, count(pod, cs, state.Nodes()))
	return nil
}

// Score implements framework.ScorePlugin: the matching pods in the
// node's domains (fewer is better), -1 for a node missing a key.
func (PodTopologySpread) Score(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	v, ok := state.Read(spreadScoreKey)
	if !ok {
		return 0, nil
	}
	s := v.(*spreadState)
	var sum int64
	for i, c := range s.constraints {
		d, ok := node.Labels[c.key]
		if !ok {
			return -1, nil
		}
		sum += s.counts[i][d]
	}
	return sum, nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (PodTopologySpread) ScoreExtensions() framework.ScoreExtensions { return spreadNormalize{} }

// spreadNormalize reverses the counts (fewest gets MaxNodeScore) and gives
// nodes missing a topology key (-1) nothing.
type spreadNormalize struct{}

func (spreadNormalize) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	var highest int64
	for _, s := range scores {
		highest = max(highest, s.Score)
	}
	for i, s := range scores {
		switch {
		case s.Score < 0:
			scores[i].Score = 0
		case highest == 0:
			scores[i].Score = framework.MaxNodeScore
		default:
			scores[i].Score = framework.MaxNodeScore * (highest - s.Score) / highest
		}
	}
	return nil
}
