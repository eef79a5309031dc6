// Package plugins holds kplane's in-tree scheduler plugins, named and
// behaving as kube-scheduler's: NodeUnschedulable, TaintToleration,
// NodeAffinity, NodePorts, NodeResourcesFit (LeastAllocated,
// MostAllocated, RequestedToCapacityRatio),
// NodeResourcesBalancedAllocation, InterPodAffinity, PodTopologySpread,
// VolumeBinding, DefaultBinder; plus
// NodeReady and SelectorSpread (see their docs).
package plugins

import "github.com/kplane/kplane/services/scheduler/framework"

// Plugin names.
const (
	NodeReadyName                       = "NodeReady"
	NodeUnschedulableName               = "NodeUnschedulable"
	TaintTolerationName                 = "TaintToleration"
	NodeAffinityName                    = "NodeAffinity"
	NodePortsName                       = "NodePorts"
	NodeResourcesFitName                = "NodeResourcesFit"
	NodeResourcesBalancedAllocationName = "NodeResourcesBalancedAllocation"
	SelectorSpreadName                  = "SelectorSpread"
	VolumeBindingName                   = "VolumeBinding"
	InterPodAffinityName                = "InterPodAffinity"
	PodTopologySpreadName               = "PodTopologySpread"
	DefaultBinderName                   = "DefaultBinder"
)

// NewInTreeRegistry returns the factories of every in-tree plugin.
func NewInTreeRegistry() framework.Registry {
	return framework.Registry{
		PrioritySortName:                    noArgs(func(framework.Handle) framework.Plugin { return PrioritySort{} }),
		NodeReadyName:                       noArgs(func(framework.Handle) framework.Plugin { return NodeReady{} }),
		NodeUnschedulableName:               noArgs(func(framework.Handle) framework.Plugin { return NodeUnschedulable{} }),
		TaintTolerationName:                 noArgs(func(framework.Handle) framework.Plugin { return TaintToleration{} }),
		NodeAffinityName:                    noArgs(func(framework.Handle) framework.Plugin { return NodeAffinity{} }),
		NodePortsName:                       noArgs(func(framework.Handle) framework.Plugin { return NodePorts{} }),
		NodeResourcesFitName:                NewNodeResourcesFit,
		NodeResourcesBalancedAllocationName: noArgs(func(framework.Handle) framework.Plugin { return BalancedAllocation{} }),
		SelectorSpreadName:                  noArgs(func(framework.Handle) framework.Plugin { return SelectorSpread{} }),
		InterPodAffinityName:                noArgs(func(h framework.Handle) framework.Plugin { return NewInterPodAffinity(h) }),
		PodTopologySpreadName:               NewPodTopologySpread,
		VolumeBindingName:                   noArgs(func(h framework.Handle) framework.Plugin { return NewVolumeBinding(h) }),
		DefaultPreemptionName:               noArgs(func(h framework.Handle) framework.Plugin { return NewDefaultPreemption(h) }),
		DefaultBinderName:                   noArgs(func(h framework.Handle) framework.Plugin { return DefaultBinder{h: h} }),
	}
}

// DefaultPlugins is the default profile, in the order the filters run
// (cheap checks of the node's own state first, resources and volumes
// last) with kube-scheduler's default Score weights.
func DefaultPlugins() []framework.DefaultPlugin {
	return []framework.DefaultPlugin{
		{Name: PrioritySortName},
		{Name: NodeReadyName},
		{Name: NodeUnschedulableName},
		{Name: TaintTolerationName, Weight: 3},
		{Name: NodeAffinityName, Weight: 2},
		{Name: NodePortsName},
		{Name: NodeResourcesFitName, Weight: 1},
		{Name: VolumeBindingName},
		{Name: PodTopologySpreadName, Weight: 2},
		{Name: InterPodAffinityName, Weight: 2},
		{Name: NodeResourcesBalancedAllocationName, Weight: 1},
		{Name: SelectorSpreadName, Weight: 2},
		{Name: DefaultPreemptionName},
		{Name: DefaultBinderName},
	}
}
