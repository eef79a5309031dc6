package core

import (
	"fmt"

	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// AffinityTerm is a pod (anti-)affinity term parsed once: which pods it
// selects and the node label whose value is the topology domain.
type AffinityTerm struct {
	Selector labels.Selector
	// Namespaces the selected pods may be in; with neither namespaces
	// nor a namespace selector, the pod's own namespace.
	Namespaces map[string]bool
	// NamespaceSelector selects namespaces by their labels (nil when the
	// term has none; an empty one selects every namespace).
	NamespaceSelector labels.Selector
	TopologyKey       string
	// Weight of a preferred term (0 for a required one).
	Weight int64
}

// NamespaceLabels returns a namespace's labels (nil when unknown).
type NamespaceLabels func(namespace string) map[string]string

// Matches reports whether the term selects pod p.
func (t *AffinityTerm) Matches(p *PodInfo, nsLabels NamespaceLabels) bool {
	if !t.Namespaces[p.Namespace] {
		if t.NamespaceSelector == nil {
			return false
		}
		var l map[string]string
		if nsLabels != nil {
			l = nsLabels(p.Namespace)
		}
		if !t.NamespaceSelector.Matches(l) {
			return false
		}
	}
	return t.Selector.Matches(p.Labels)
}

func parseAffinityTerm(term *kplanev1.PodAffinityTerm, ns string, weight int32) (AffinityTerm, error) {
	t := AffinityTerm{TopologyKey: term.GetTopologyKey(), Weight: int64(weight), Namespaces: map[string]bool{}}
	sel, err := labels.FromLabelSelector(term.GetLabelSelector())
	if err != nil {
		return t, fmt.Errorf("labelSelector: %w", err)
	}
	t.Selector = sel
	for _, n := range term.GetNamespaces() {
		t.Namespaces[n] = true
	}
	if term.GetNamespaceSelector() != nil {
		if t.NamespaceSelector, err = labels.FromLabelSelector(term.GetNamespaceSelector()); err != nil {
			return t, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	if len(t.Namespaces) == 0 && t.NamespaceSelector == nil {
		t.Namespaces[ns] = true
	}
	return t, nil
}

// parseAffinity fills the pod's parsed affinity terms.
func (p *PodInfo) parseAffinity(a *kplanev1.Affinity) error {
	req := func(terms []*kplanev1.PodAffinityTerm, what string) ([]AffinityTerm, error) {
		var out []AffinityTerm
		for i, t := range terms {
			at, err := parseAffinityTerm(t, p.Namespace, 0)
			if err != nil {
				return nil, fmt.Errorf("spec.affinity.%s.requiredDuringSchedulingIgnoredDuringExecution[%d].%w", what, i, err)
			}
			out = append(out, at)
		}
		return out, nil
	}
	pref := func(terms []*kplanev1.WeightedPodAffinityTerm, what string) ([]AffinityTerm, error) {
		var out []AffinityTerm
		for i, t := range terms {
			at, err := parseAffinityTerm(t.GetPodAffinityTerm(), p.Namespace, t.GetWeight())
			if err != nil {
				return nil, fmt.Errorf("spec.affinity.%s.preferredDuringSchedulingIgnoredDuringExecution[%d].podAffinityTerm.%w", what, i, err)
			}
			out = append(out, at)
		}
		return out, nil
	}
	var err error
	if p.RequiredAffinity, err = req(a.GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution(), "podAffinity"); err != nil {
		return err
	}
	if p.RequiredAntiAffinity, err = req(a.GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution(), "podAntiAffinity"); err != nil {
		return err
	}
	if p.PreferredAffinity, err = pref(a.GetPodAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution(), "podAffinity"); err != nil {
		return err
	}
	if p.PreferredAntiAffinity, err = pref(a.GetPodAntiAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution(), "podAntiAffinity"); err != nil {
		return err
	}
	return nil
}

// HasPodAffinity reports whether the pod has any pod affinity or
// anti-affinity term (the cache keeps such pods per node, so a pod whose
// placement other pods' terms constrain is found without a scan).
func (p *PodInfo) HasPodAffinity() bool {
	return len(p.RequiredAffinity)+len(p.RequiredAntiAffinity)+len(p.PreferredAffinity)+len(p.PreferredAntiAffinity) > 0
}
