package plugins

import (
	"context"

	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// InterPodAffinity's reasons, as Kubernetes words them.
const (
	ReasonAffinityRulesNotMatch              = "node(s) didn't match pod affinity rules"
	ReasonAntiAffinityRulesNotMatch          = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingAntiAffinityNotMatch       = "node(s) didn't satisfy existing pods anti-affinity rules"
	interPodAffinityFilterKey                = InterPodAffinityName + "/filter"
	interPodAffinityScoreKey                 = InterPodAffinityName + "/score"
	hardPodAffinityWeight              int64 = 1
)

// InterPodAffinity is Kubernetes' InterPodAffinity plugin: a pod's
// required podAffinity terms need, in the node's topology domain (the
// node's value of the term's topologyKey), a pod the term selects; its
// required podAntiAffinity terms need none there; and no pod already
// placed may have a required anti-affinity term that selects the pod in
// that domain. Preferred terms (the pod's and, symmetrically, those of
// pods already placed) add or subtract their weight per domain.
type InterPodAffinity struct {
	namespaces *informer.Informer
}

// NewInterPodAffinity returns the plugin; namespace selectors read the
// namespaces' labels from h's informer.
func NewInterPodAffinity(h framework.Handle) *InterPodAffinity {
	p := &InterPodAffinity{}
	if h != nil {
		p.namespaces = h.Informer("Namespace")
	}
	return p
}

// Name implements framework.Plugin.
func (*InterPodAffinity) Name() string { return InterPodAffinityName }

func (p *InterPodAffinity) nsLabels(ns string) map[string]string {
	if p.namespaces == nil {
		return nil
	}
	o, ok := p.namespaces.Store().GetByName("", ns)
	if !ok {
		return nil
	}
	return o.Meta().GetLabels()
}

// topologyPair is a domain: a topology key and a node's value of it.
type topologyPair struct{ key, value string }

type affinityFilterState struct {
	// existingAnti: domains (topology key → value → count) where a placed
	// pod's required anti-affinity selects the incoming pod.
	existingAnti map[string]map[string]int
	// affinity and anti: per required term of the incoming pod, the
	// selected pods per domain.
	affinity, anti []map[string]int
	// affinityTotal counts every pod any affinity term selects.
	affinityTotal int
	// matchesOwnAffinity: the pod is selected by all its own affinity
	// terms (the first pod of a group may then go anywhere that has the
	// topology keys).
	matchesOwnAffinity bool
}

func (p *InterPodAffinity) filterState(state *framework.CycleState, pod *framework.PodInfo) *affinityFilterState {
	if v, ok := state.Read(interPodAffinityFilterKey); ok {
		return v.(*affinityFilterState)
	}
	s := &affinityFilterState{existingAnti: map[string]map[string]int{}}
	ns := p.nsLabels
	for range pod.RequiredAffinity {
		s.affinity = append(s.affinity, map[string]int{})
	}
	for range pod.RequiredAntiAffinity {
		s.anti = append(s.anti, map[string]int{})
	}
	for _, n := range state.Nodes() {
		if n.NumPodsWithAffinity() > 0 {
			n.PodsWithAffinity(func(e *framework.PodInfo) bool {
				for i := range e.RequiredAntiAffinity {
					t := &e.RequiredAntiAffinity[i]
					if v, ok := n.Labels[t.TopologyKey]; ok && t.Matches(pod, ns) {
						if s.existingAnti[t.TopologyKey] == nil {
							s.existingAnti[t.TopologyKey] = map[string]int{}
						}
						s.existingAnti[t.TopologyKey][v]++
					}
				}
				return true
			})
		}
		if len(pod.RequiredAffinity)+len(pod.RequiredAntiAffinity) == 0 {
			continue
		}
		n.Pods(func(e *framework.PodInfo) bool {
			for i := range pod.RequiredAffinity {
				t := &pod.RequiredAffinity[i]
				if t.Matches(e, ns) {
					s.affinityTotal++
					if v, ok := n.Labels[t.TopologyKey]; ok {
						s.affinity[i][v]++
					}
				}
			}
			for i := range pod.RequiredAntiAffinity {
				t := &pod.RequiredAntiAffinity[i]
				if v, ok := n.Labels[t.TopologyKey]; ok && t.Matches(e, ns) {
					s.anti[i][v]++
				}
			}
			return true
		})
	}
	s.matchesOwnAffinity = len(pod.RequiredAffinity) > 0
	for i := range pod.RequiredAffinity {
		if !pod.RequiredAffinity[i].Matches(pod, ns) {
			s.matchesOwnAffinity = false
		}
	}
	state.Write(interPodAffinityFilterKey, s)
	return s
}

// Filter implements framework.FilterPlugin.
func (p *InterPodAffinity) Filter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	s := p.filterState(state, pod)
	// Checked in Kubernetes' order, which decides the reason reported.
	if len(pod.RequiredAffinity) > 0 {
		all, keys := true, true
		for i := range pod.RequiredAffinity {
			v, ok := node.Labels[pod.RequiredAffinity[i].TopologyKey]
			if !ok {
				keys = false
			}
			if !ok || s.affinity[i][v] == 0 {
				all = false
			}
		}
		// The first pod of a group that selects itself may go to any node
		// with the keys.
		firstOfGroup := keys && s.affinityTotal == 0 && s.matchesOwnAffinity
		if !all && !firstOfGroup {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonAffinityRulesNotMatch)
		}
	}
	for i := range pod.RequiredAntiAffinity {
		if v, ok := node.Labels[pod.RequiredAntiAffinity[i].TopologyKey]; ok && s.anti[i][v] > 0 {
			return framework.NewStatus(framework.Unschedulable, ReasonAntiAffinityRulesNotMatch)
		}
	}
	for key, values := range s.existingAnti {
		if v, ok := node.Labels[key]; ok && values[v] > 0 {
			return framework.NewStatus(framework.Unschedulable, ReasonExistingAntiAffinityNotMatch)
		}
	}
	return nil
}

// PreScore implements framework.PreScorePlugin: it sums, per domain, the
// weights of the preferred terms (the pod's over the pods placed there,
// and placed pods' terms that select the pod; a placed pod's required
// affinity counts with weight 1). Skip when there is nothing to weigh.
func (p *InterPodAffinity) PreScore(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	ns := p.nsLabels
	mine := len(pod.PreferredAffinity)+len(pod.PreferredAntiAffinity) > 0
	scores := map[topologyPair]int64{}
	for _, n := range state.Nodes() {
		if mine {
			n.Pods(func(e *framework.PodInfo) bool {
				addTerms(scores, pod.PreferredAffinity, e, n, ns, 1)
				addTerms(scores, pod.PreferredAntiAffinity, e, n, ns, -1)
				return true
			})
		}
		n.PodsWithAffinity(func(e *framework.PodInfo) bool {
			addTerms(scores, e.PreferredAffinity, pod, n, ns, 1)
			addTerms(scores, e.PreferredAntiAffinity, pod, n, ns, -1)
			for i := range e.RequiredAffinity {
				t := &e.RequiredAffinity[i]
				if v, ok := n.Labels[t.TopologyKey]; ok && t.Matches(pod, ns) {
					scores[topologyPair{t.TopologyKey, v}] += hardPodAffinityWeight
				}
			}
			return true
		})
	}
	if len(scores) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	state.Write(interPodAffinityScoreKey, scores)
	return nil
}

// addTerms adds sign × weight to the domain of node n for each term that
// selects pod.
func addTerms(scores map[topologyPair]int64, terms []core.AffinityTerm, pod *framework.PodInfo, n *framework.NodeInfo, ns core.NamespaceLabels, sign int64) {
	for i := range terms {
		t := &terms[i]
		if v, ok := n.Labels[t.TopologyKey]; ok && t.Matches(pod, ns) {
			scores[topologyPair{t.TopologyKey, v}] += sign * t.Weight
		}
	}
}

// Score implements framework.ScorePlugin: the sum over the node's
// domains.
func (*InterPodAffinity) Score(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	v, ok := state.Read(interPodAffinityScoreKey)
	if !ok {
		return 0, nil
	}
	var sum int64
	for pair, w := range v.(map[topologyPair]int64) {
		if nv, ok := node.Labels[pair.key]; ok && nv == pair.value {
			sum += w
		}
	}
	return sum, nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (*InterPodAffinity) ScoreExtensions() framework.ScoreExtensions { return minMax{} }

// minMax maps scores (possibly negative) onto 0..MaxNodeScore between the
// lowest and the highest.
type minMax struct{}

func (minMax) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0].Score, scores[0].Score
	for _, s := range scores {
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		if hi == lo {
			scores[i].Score = 0
			continue
		}
		scores[i].Score = framework.MaxNodeScore * (scores[i].Score - lo) / (hi - lo)
	}
	return nil
}
