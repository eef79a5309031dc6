// Package daemonset is daemonsetctl's control loop: a DaemonSet runs one
// pod on every node its template fits (nodeSelector, required node
// affinity, taints against its tolerations plus the ones every DaemonSet
// pod gets), and replaces them
// node by node within maxUnavailable and maxSurge when the template
// changes. This file holds the decisions, as pure functions.
package daemonset

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/rollout"
	"github.com/kplane/kplane/pkg/volume"
)

const (
	kindDaemonSet          = "DaemonSet"
	kindControllerRevision = "ControllerRevision"
)

// Node condition taints every DaemonSet pod tolerates, as Kubernetes adds
// them: a node agent is often what makes a node healthy again, so it must
// not be evicted for the node being unhealthy, and cordoned nodes still
// run their daemons.
//
// DefaultTolerations are added to every DaemonSet pod.
func DefaultTolerations() []*kplanev1.Toleration {
	exists := func(key, effect string) *kplanev1.Toleration {
		return &kplanev1.Toleration{Key: key, Operator: kplanev1.TolerationOpExists, Effect: effect}
	}
	return []*kplanev1.Toleration{
		exists(kplanev1.TaintNodeNotReady, kplanev1.TaintEffectNoExecute),
		exists(kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute),
		exists(kplanev1.TaintNodeDiskPressure, kplanev1.TaintEffectNoSchedule),
		exists(kplanev1.TaintNodeMemoryPressure, kplanev1.TaintEffectNoSchedule),
		exists(kplanev1.TaintNodePIDPressure, kplanev1.TaintEffectNoSchedule),
		exists(kplanev1.TaintNodeUnschedulable, kplanev1.TaintEffectNoSchedule),
	}
}

// withDefaultTolerations is the template's tolerations plus the defaults
// it does not already have.
func withDefaultTolerations(tols []*kplanev1.Toleration) []*kplanev1.Toleration {
	out := slices.Clone(tols)
	for _, d := range DefaultTolerations() {
		if !slices.ContainsFunc(out, func(t *kplanev1.Toleration) bool { return proto.Equal(t, d) }) {
			out = append(out, d)
		}
	}
	return out
}

// Fits says whether a node should run the DaemonSet's pod (shouldRun) and
// whether a pod already there may stay (shouldContinue): the nodeSelector
// and the required node affinity must match; an untolerated NoSchedule
// taint stops new pods but keeps running ones; an untolerated NoExecute
// taint does neither. Unschedulable (cordoned) nodes still run daemons,
// as in Kubernetes. Resources and host ports are the scheduler's to
// check: a pod that does not fit stays Pending with its reason.
func Fits(spec *kplanev1.PodSpec, node *kplanev1.Node) (shouldRun, shouldContinue bool) {
	if node.GetMetadata().GetDeletionTimestamp() != nil {
		return false, false
	}
	labels := node.GetMetadata().GetLabels()
	for k, v := range spec.GetNodeSelector() {
		if labels[k] != v {
			return false, false
		}
	}
	if req := spec.GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution(); req != nil {
		// Operators and values were validated by the apiserver.
		if ok, _ := volume.NodeSelectorMatches(req, node.GetMetadata().GetName(), labels); !ok {
			return false, false
		}
	}
	tols := withDefaultTolerations(spec.GetTolerations())
	shouldRun, shouldContinue = true, true
	for _, taint := range node.GetSpec().GetTaints() {
		if slices.ContainsFunc(tols, func(t *kplanev1.Toleration) bool { return apiutil.Tolerates(t, taint) }) {
			continue
		}
		switch taint.GetEffect() {
		case kplanev1.TaintEffectNoExecute:
			return false, false
		case kplanev1.TaintEffectNoSchedule:
			shouldRun = false
		}
	}
	return shouldRun, shouldContinue
}

// NodeState is one node as the DaemonSet sees it.
type NodeState struct {
	Name                      string
	ShouldRun, ShouldContinue bool
	// Pods are the DaemonSet's pods bound to the node, terminating ones
	// included.
	Pods []*kplanev1.Pod
}

// Bounds are a DaemonSet's update strategy, resolved against the number
// of nodes that should run it.
type Bounds struct {
	OnDelete       bool
	MaxSurge       int32
	MaxUnavailable int32
	MinReady       time.Duration
}

// BoundsOf resolves the strategy for desired nodes: percents round up (a
// rollout always moves), as Kubernetes does for DaemonSets.
func BoundsOf(ds *kplanev1.DaemonSet, desired int32) (Bounds, error) {
	s := ds.GetSpec()
	b := Bounds{OnDelete: s.GetUpdateStrategy().GetType() == kplanev1.UpdateStrategyOnDelete,
		MinReady: time.Duration(s.GetMinReadySeconds()) * time.Second}
	if b.OnDelete {
		return b, nil
	}
	ru := s.GetUpdateStrategy().GetRollingUpdate()
	var err error
	if b.MaxSurge, err = rollout.Scaled(ru.GetMaxSurge(), desired, true); err != nil {
		return b, fmt.Errorf("spec.updateStrategy.rollingUpdate.maxSurge: %w", err)
	}
	if ru.GetMaxUnavailable() == nil {
		b.MaxUnavailable = 1
	} else if b.MaxUnavailable, err = rollout.Scaled(ru.GetMaxUnavailable(), desired, true); err != nil {
		return b, fmt.Errorf("spec.updateStrategy.rollingUpdate.maxUnavailable: %w", err)
	}
	if b.MaxSurge == 0 && b.MaxUnavailable == 0 {
		b.MaxUnavailable = 1
	}
	return b, nil
}

// Hash is the controller-revision-hash of a pod.
func Hash(p *kplanev1.Pod) string {
	return p.GetMetadata().GetLabels()[kplanev1.LabelControllerRevisionHash]
}

func terminating(p *kplanev1.Pod) bool { return p.GetMetadata().GetDeletionTimestamp() != nil }

// Plan is what one reconcile does.
type Plan struct {
	// Create are the nodes to create a pod on.
	Create []string
	// Delete are the pods to delete.
	Delete []*kplanev1.Pod
	// Recheck is when a pod becomes available (minReadySeconds).
	Recheck time.Duration
}

// Decide plans one step: a pod for every node that should run one and
// has none (none terminating either: a node's daemon is replaced only
// after the old one is gone, unless surging), none where it may not
// continue, failed pods replaced, duplicates removed (keeping the oldest),
// then the rolling update toward updateHash. Without surge, old pods go
// while the nodes without an available pod stay within maxUnavailable
// (an unavailable old pod may always go); with surge, a new pod starts
// beside the old one on up to maxSurge nodes and the old one goes once
// the new one is available.
func Decide(b Bounds, nodes []NodeState, updateHash string, now time.Time) Plan {
	var p Plan
	avail := func(pod *kplanev1.Pod) bool {
		ok, wait := rollout.PodAvailable(pod, b.MinReady, now)
		if wait > 0 && (p.Recheck == 0 || wait < p.Recheck) {
			p.Recheck = wait
		}
		return ok
	}
	type rolling struct {
		node     string
		old      *kplanev1.Pod
		oldAvail bool
	}
	var candidates []rolling
	unavailable, surging := int32(0), int32(0)
	for _, n := range nodes {
		var live []*kplanev1.Pod
		anyTerminating := false
		for _, pod := range n.Pods {
			switch {
			case terminating(pod):
				anyTerminating = true
			case !n.ShouldContinue:
				p.Delete = append(p.Delete, pod)
			case apiutil.IsPodTerminal(pod):
				// Replaced on a later pass, once it is gone.
				p.Delete = append(p.Delete, pod)
				anyTerminating = true
			default:
				live = append(live, pod)
			}
		}
		if !n.ShouldContinue || (!n.ShouldRun && len(live) == 0) {
			continue
		}
		slices.SortStableFunc(live, func(a, c *kplanev1.Pod) int {
			return a.GetMetadata().GetCreationTimestamp().AsTime().Compare(c.GetMetadata().GetCreationTimestamp().AsTime())
		})
		var olds, news []*kplanev1.Pod
		for _, pod := range live {
			if Hash(pod) == updateHash {
				news = append(news, pod)
			} else {
				olds = append(olds, pod)
			}
		}
		switch {
		case len(live) == 0:
			if n.ShouldRun && !anyTerminating {
				p.Create = append(p.Create, n.Name)
			}
			if n.ShouldRun {
				unavailable++
			}
			continue
		case b.OnDelete || len(olds) == 0 || len(news) == 0:
			// One kind of pod: keep the oldest, drop duplicates.
			p.Delete = append(p.Delete, live[1:]...)
			if b.OnDelete || len(olds) == 0 {
				if !avail(live[0]) {
					unavailable++
				}
				continue
			}
			oa := avail(olds[0])
			if !oa {
				unavailable++
			}
			candidates = append(candidates, rolling{n.Name, olds[0], oa})
		default:
			// Old and new side by side (a surge): the old goes once the
			// new one is available; extra pods of either kind go now.
			p.Delete = append(p.Delete, olds[1:]...)
			p.Delete = append(p.Delete, news[1:]...)
			if avail(news[0]) {
				p.Delete = append(p.Delete, olds[0])
			} else {
				surging++
				if !avail(olds[0]) {
					unavailable++
				}
			}
		}
	}
	if b.OnDelete {
		return p
	}
	budget := b.MaxUnavailable - unavailable
	for _, c := range candidates {
		switch {
		case !c.oldAvail:
			p.Delete = append(p.Delete, c.old) // unavailable already: no cost
		case b.MaxSurge > 0 && surging < b.MaxSurge:
			p.Create = append(p.Create, c.node)
			surging++
		case b.MaxSurge == 0 && budget > 0:
			p.Delete = append(p.Delete, c.old)
			budget--
		}
	}
	return p
}

// Status counts the DaemonSet's nodes and pods, in Kubernetes' terms.
func Status(ds *kplanev1.DaemonSet, b Bounds, nodes []NodeState, updateHash string, collision *int32, now time.Time) *kplanev1.DaemonSetStatus {
	st := &kplanev1.DaemonSetStatus{ObservedGeneration: ds.GetMetadata().GetGeneration(), CollisionCount: collision,
		Conditions: ds.GetStatus().GetConditions()}
	for _, n := range nodes {
		var live []*kplanev1.Pod
		for _, pod := range n.Pods {
			if !terminating(pod) {
				live = append(live, pod)
			}
		}
		if !n.ShouldRun {
			if len(live) > 0 {
				st.NumberMisscheduled++
			}
			continue
		}
		st.DesiredNumberScheduled++
		if len(live) == 0 {
			continue
		}
		st.CurrentNumberScheduled++
		ready, available, updated := false, false, false
		for _, pod := range live {
			if apiutil.IsPodReady(pod) {
				ready = true
			}
			if ok, _ := rollout.PodAvailable(pod, b.MinReady, now); ok {
				available = true
			}
			if Hash(pod) == updateHash {
				updated = true
			}
		}
		if ready {
			st.NumberReady++
		}
		if available {
			st.NumberAvailable++
		}
		if updated {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	return st
}

// RevisionHash is the hash part of a revision name <ds>-<hash>, which
// pods carry as controller-revision-hash (Kubernetes' spelling for
// DaemonSets).
func RevisionHash(ds string, cr *kplanev1.ControllerRevision) string {
	return strings.TrimPrefix(cr.GetMetadata().GetName(), ds+"-")
}

// NewPod is the DaemonSet's pod for node, from template t: unbound, with
// a required node affinity that only node satisfies (the scheduler binds
// it, checking resources and host ports as for any pod), the default
// tolerations, the revision hash and the generation it was made from.
func NewPod(ds *kplanev1.DaemonSet, t *kplanev1.PodTemplateSpec, hash, node string) *kplanev1.Pod {
	m := ds.GetMetadata()
	spec := &kplanev1.PodSpec{}
	if t.GetSpec() != nil {
		spec = proto.Clone(t.GetSpec()).(*kplanev1.PodSpec)
	}
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{
			GenerateName: m.GetName() + "-", Namespace: m.GetNamespace(),
			Labels: map[string]string{},
			OwnerReferences: []*kplanev1.OwnerReference{{
				ApiVersion: kplanev1.APIVersion(kindDaemonSet), Kind: kindDaemonSet, Name: m.GetName(), Uid: m.GetUid(),
				Controller: true, BlockOwnerDeletion: true,
			}},
		},
		Spec: spec,
	}
	for k, v := range t.GetMetadata().GetLabels() {
		pod.Metadata.Labels[k] = v
	}
	if a := t.GetMetadata().GetAnnotations(); len(a) > 0 {
		pod.Metadata.Annotations = map[string]string{}
		for k, v := range a {
			pod.Metadata.Annotations[k] = v
		}
	}
	pod.Metadata.Labels[kplanev1.LabelControllerRevisionHash] = hash
	pod.Metadata.Labels[kplanev1.LabelDaemonSetTemplateGeneration] = strconv.FormatInt(m.GetGeneration(), 10)
	pod.Spec.Affinity = withNodeNameAffinity(pod.Spec.Affinity, node)
	pod.Spec.Tolerations = withDefaultTolerations(pod.Spec.Tolerations)
	return pod
}

// withNodeNameAffinity returns a (the template's affinity, a clone) with
// its required node affinity narrowed to the node called node: every
// required term gets the requirement matchFields metadata.name In [node]
// in place of any metadata.name requirement it had, so the template's own
// terms still apply (ANDed with the name); without required terms the
// name is the only term. Preferred terms and pod (anti-)affinity stay as
// they are.
func withNodeNameAffinity(a *kplanev1.Affinity, node string) *kplanev1.Affinity {
	out := &kplanev1.Affinity{}
	if a != nil {
		out = proto.Clone(a).(*kplanev1.Affinity)
	}
	if out.NodeAffinity == nil {
		out.NodeAffinity = &kplanev1.NodeAffinity{}
	}
	name := &kplanev1.NodeSelectorRequirement{Key: volume.FieldNodeName, Operator: "In", Values: []string{node}}
	req := out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.GetNodeSelectorTerms()) == 0 {
		out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &kplanev1.NodeSelector{
			NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchFields: []*kplanev1.NodeSelectorRequirement{name}}}}
		return out
	}
	for _, term := range req.NodeSelectorTerms {
		term.MatchFields = slices.DeleteFunc(term.MatchFields, func(r *kplanev1.NodeSelectorRequirement) bool {
			return r.GetKey() == volume.FieldNodeName
		})
		term.MatchFields = append(term.MatchFields, proto.Clone(name).(*kplanev1.NodeSelectorRequirement))
	}
	return out
}

// TargetNode is the node a DaemonSet pod is for: the one it is bound to,
// or, while it waits for the scheduler, the one its required node
// affinity names (matchFields metadata.name In with one value, as
// NewPod sets it). "" for a pod that names no node.
func TargetNode(p *kplanev1.Pod) string {
	if n := p.GetSpec().GetNodeName(); n != "" {
		return n
	}
	for _, term := range p.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms() {
		for _, r := range term.GetMatchFields() {
			if r.GetKey() == volume.FieldNodeName && r.GetOperator() == "In" && len(r.GetValues()) == 1 {
				return r.GetValues()[0]
			}
		}
	}
	return ""
}
