package plugins

import (
	"context"

	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// NodeAffinity is Kubernetes' NodeAffinity plugin: a node must carry
// every nodeSelector label and match one term of the pod's required node
// affinity; among those, nodes matching more (by weight) of its preferred
// terms score higher.
type NodeAffinity struct{}

// Name implements framework.Plugin.
func (NodeAffinity) Name() string { return NodeAffinityName }

// Filter implements framework.FilterPlugin.
// PreFilter implements framework.PreFilterPlugin: a pod with neither a
// nodeSelector nor required node affinity skips the Filter (as
// Kubernetes' NodeAffinity does), which saves a call per node for most
// pods.
func (NodeAffinity) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	spec := pod.Pod.GetSpec()
	if len(spec.GetNodeSelector()) == 0 && spec.GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() == nil {
		return framework.NewStatus(framework.Skip)
	}
	return nil
}

func (NodeAffinity) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if !RequiredNodeAffinityMatches(pod.Pod, node.Name, node.Labels) {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, core.ReasonNodeSelector)
	}
	return nil
}

// RequiredNodeAffinityMatches reports whether the node called nodeName
// with nodeLabels satisfies the pod's nodeSelector and required node
// affinity, matchFields included (PodTopologySpread's nodeAffinityPolicy
// Honor uses it too).
func RequiredNodeAffinityMatches(pod *kplanev1.Pod, nodeName string, nodeLabels map[string]string) bool {
	for k, v := range pod.GetSpec().GetNodeSelector() {
		if w, ok := nodeLabels[k]; !ok || w != v {
			return false
		}
	}
	req := pod.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	if req == nil {
		return true
	}
	// Operators and values were validated by the apiserver.
	ok, _ := volume.NodeSelectorMatches(req, nodeName, nodeLabels)
	return ok
}

// PreScore implements framework.PreScorePlugin: a pod without preferred
// terms skips scoring.
func (NodeAffinity) PreScore(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	if len(pod.Pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	return nil
}

// Score implements framework.ScorePlugin: the sum of the weights of the
// preferred terms the node matches.
func (NodeAffinity) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var sum int64
	for _, t := range pod.Pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution() {
		if ok, _ := volume.NodeSelectorTermMatches(t.GetPreference(), node.Name, node.Labels); ok {
			sum += int64(t.GetWeight())
		}
	}
	return sum, nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (NodeAffinity) ScoreExtensions() framework.ScoreExtensions { return scaleToMax{} }

// scaleToMax maps scores where more is better onto 0..MaxNodeScore by the
// highest (Kubernetes' default normalization).
type scaleToMax struct{}

func (scaleToMax) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	var highest int64
	for _, s := range scores {
		highest = max(highest, s.Score)
	}
	if highest == 0 {
		return nil
	}
	for i := range scores {
		scores[i].Score = scores[i].Score * framework.MaxNodeScore / highest
	}
	return nil
}
