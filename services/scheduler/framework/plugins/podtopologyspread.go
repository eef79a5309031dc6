package plugins

import (
	"context"
	"maps"

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
//
// A pod without constraints of its own gets the default constraints
// (args defaultingType: System, the default, or List; see
// NewPodTopologySpread) with its owners' selector, when it has owners.
type PodTopologySpread struct {
	// defaults are the default constraints (no selector); none when nil.
	defaults []*kplanev1.TopologySpreadConstraint
	// defaultSelector returns the selector of a pod's Services and
	// controller (empty when it has none).
	defaultSelector func(*kplanev1.Pod) labels.Selector
	// systemDefaults: the defaults are the system ones, under which a
	// node missing one of the keys still counts for the others (as in
	// Kubernetes, so clusters without zone labels still spread by node).
	systemDefaults bool
	// matching keeps per-node counts of matching pods between cycles
	// (nil: count afresh, as tests that build the plugin bare do).
	matching *matchCounts
}

// Name implements framework.Plugin.
func (PodTopologySpread) Name() string { return PodTopologySpreadName }

type spreadConstraint struct {
	maxSkew      int64
	key          string
	selector     labels.Selector
	minDomains   int
	honorAffinty bool
	honorTaints  bool
	// optionalKey: a node without key is left out of this constraint
	// only, rather than of all (system default constraints).
	optionalKey bool
}

type spreadState struct {
	constraints []spreadConstraint
	// counts per constraint: domain value → matching pods; every domain
	// of an eligible node is present (possibly 0).
	counts []map[string]int64
	// self per constraint: the pod matches its own selector.
	self []int64
	// least per constraint: the smallest count, or 0 while there are
	// fewer domains than minDomains (what Filter compares with; set by
	// findLeast).
	least []int64
}

// constraintsOf returns the pod's own constraints or, when it has none,
// the default ones with the selector of its owners (nil when it has
// none: the defaults do not apply), as Kubernetes' PodTopologySpread.
func (pl PodTopologySpread) constraintsOf(pod *framework.PodInfo) ([]*kplanev1.TopologySpreadConstraint, labels.Selector) {
	if own := pod.Pod.GetSpec().GetTopologySpreadConstraints(); len(own) > 0 || len(pl.defaults) == 0 || pl.defaultSelector == nil {
		return own, nil
	}
	sel := pl.defaultSelector(pod.Pod)
	if sel.Empty() {
		return nil, nil
	}
	return pl.defaults, sel
}

func (pl PodTopologySpread) parseConstraints(pod *framework.PodInfo, when string) []spreadConstraint {
	var out []spreadConstraint
	list, defaultSel := pl.constraintsOf(pod)
	for _, c := range list {
		if c.GetWhenUnsatisfiable() != when {
			continue
		}
		if defaultSel != nil {
			out = append(out, spreadConstraint{maxSkew: int64(c.GetMaxSkew()), key: c.GetTopologyKey(), selector: defaultSel,
				minDomains: 1, honorAffinty: true, optionalKey: pl.systemDefaults})
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
//
// When nodes are the scheduler cache's own, under its lock (a cycle's
// Filter and PreScore), the cache's SpreadCounts give each node's count
// of matching pods without walking its pods; and for a constraint whose
// eligible nodes are simply the nodes carrying the keys (the pod has no
// required node affinity, or the constraint ignores it, and the
// constraint ignores taints: the system defaults' case) they give the
// per-domain totals themselves, kept up to date by the cache's updates,
// so no node is visited. Otherwise (preemption's snapshots, clones)
// every node is visited and matching counts its pods.
//
// With borrow, those totals are the cache's own maps, not copies: the
// result must then be read only while the cache's lock is held, i.e.
// within the cycle's SelectNode (Score, which PreScore's result is for);
// without it they are copied (Filter's result, which preemption may read
// again after the lock is released).
func count(pod *framework.PodInfo, constraints []spreadConstraint, nodes []*framework.NodeInfo, matching *matchCounts, borrow bool) *spreadState {
	s := &spreadState{constraints: constraints, counts: make([]map[string]int64, len(constraints)),
		self: make([]int64, len(constraints)), least: make([]int64, len(constraints))}
	keys := make([]string, len(constraints))
	// required: the keys every eligible node of every constraint carries
	// (see hasKeys below).
	var required []string
	for i, c := range constraints {
		keys[i] = selectorKey(pod.Namespace, c.selector)
		if c.selector.Matches(pod.Labels) {
			s.self[i] = 1
		}
		if !c.optionalKey {
			required = append(required, c.key)
		}
	}
	// kept: the cache's counts per constraint (nil without them);
	// totalled: the constraints whose counts came from its domain totals.
	var kept []*core.SelectorCounts
	totalled := make([]bool, len(constraints))
	if live := core.SpreadCountsOf(nodes); live != nil {
		kept = make([]*core.SelectorCounts, len(constraints))
		withAffinity := hasRequiredNodeAffinity(pod.Pod)
		all := true
		for i, c := range constraints {
			kept[i] = live.Selector(keys[i], pod.Namespace, c.selector)
			if !c.honorTaints && (!c.honorAffinty || !withAffinity) {
				s.counts[i], totalled[i] = kept[i].Domains(c.key, required), true
				if !borrow {
					s.counts[i] = maps.Clone(s.counts[i])
				}
			} else {
				all = false
			}
		}
		if all {
			return s
		}
	}
	for i := range constraints {
		if !totalled[i] {
			s.counts[i] = map[string]int64{}
		}
	}
	// One node label lookup per constraint and node, and the match
	// counts' lock taken once for the whole pass: this loop runs over
	// every node for every pod placed.
	values := make([]string, len(constraints))
	present := make([]bool, len(constraints))
	var counter counter
	if kept == nil {
		counter = matching.begin()
		defer counter.end()
	}
	for _, n := range nodes {
		if !n.Known {
			continue
		}
		hasKeys := true
		for i, c := range constraints {
			values[i], present[i] = n.Labels[c.key]
			if !present[i] && !c.optionalKey {
				hasKeys = false
				break
			}
		}
		if !hasKeys {
			continue
		}
		for i, c := range constraints {
			if !present[i] {
				continue // an optional key (see hasKeys)
			}
			if totalled[i] {
				continue
			}
			if c.honorAffinty && !RequiredNodeAffinityMatches(pod.Pod, n.Name, n.Labels) {
				continue
			}
			if c.honorTaints && len(core.FilterTaints(pod, n)) > 0 {
				continue
			}
			if kept != nil {
				s.counts[i][values[i]] += kept[i].Node(n)
			} else {
				s.counts[i][values[i]] += counter.count(keys[i], pod.Namespace, c.selector, n)
			}
		}
	}
	return s
}

// hasRequiredNodeAffinity reports whether RequiredNodeAffinityMatches
// can be false for pod on some node.
func hasRequiredNodeAffinity(pod *kplanev1.Pod) bool {
	return len(pod.GetSpec().GetNodeSelector()) > 0 || pod.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() != nil
}

// findLeast sets least from counts.
func (s *spreadState) findLeast() {
	for i, c := range s.constraints {
		s.least[i] = 0
		if len(s.counts[i]) < c.minDomains {
			continue
		}
		first := true
		for _, n := range s.counts[i] {
			if first || n < s.least[i] {
				s.least[i], first = n, false
			}
		}
	}
}

// PreFilter implements framework.PreFilterPlugin: a pod without
// DoNotSchedule constraints skips the Filter.
func (pl PodTopologySpread) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	list, _ := pl.constraintsOf(pod)
	for _, c := range list {
		if c.GetWhenUnsatisfiable() == DoNotSchedule {
			return nil
		}
	}
	return framework.NewStatus(framework.Skip)
}

// Filter implements framework.FilterPlugin.
func (pl PodTopologySpread) Filter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	var s *spreadState
	if v, ok := state.Read(spreadFilterKey); ok {
		s = v.(*spreadState)
	} else {
		cs := pl.parseConstraints(pod, DoNotSchedule)
		if len(cs) > 0 {
			s = count(pod, cs, state.Nodes(), pl.matching, false)
			s.findLeast()
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
		if s.counts[i][v]+s.self[i]-s.least[i] > c.maxSkew {
			return framework.NewStatus(framework.Unschedulable, ReasonTopologySpread)
		}
	}
	return nil
}

// PreScore implements framework.PreScorePlugin: it counts for the
// ScheduleAnyway constraints, or skips when there are none.
func (pl PodTopologySpread) PreScore(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	cs := pl.parseConstraints(pod, ScheduleAnyway)
	if len(cs) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	// The counts may be the cache's own (borrowed): Score reads them
	// within the same SelectNode, under the cache's lock, and
	// NormalizeScore, the last step of this plugin's scoring, drops them.
	state.Write(spreadScoreKey, count(pod, cs, state.Nodes(), pl.matching, true))
	return nil
}

// Score implements framework.ScorePlugin: the matching pods in the
// node's domains (fewer is better), -1 for a node missing a key.
func (PodTopologySpread) Score(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	v, _ := state.Read(spreadScoreKey)
	s, _ := v.(*spreadState)
	if s == nil {
		return 0, nil
	}
	var sum int64
	for i, c := range s.constraints {
		d, ok := node.Labels[c.key]
		if !ok {
			if c.optionalKey {
				continue
			}
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

func (spreadNormalize) NormalizeScore(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	// Scoring is over: PreScore's counts, which may be the cache's own
	// maps (see count), must not outlive the cache's lock.
	if state != nil {
		state.Write(spreadScoreKey, nil)
	}
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
