package plugins

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// noArgs makes a factory for a plugin that takes no arguments: arguments
// given anyway are an error rather than silently ignored.
func noArgs(mk func(framework.Handle) framework.Plugin) framework.PluginFactory {
	return func(args json.RawMessage, h framework.Handle) (framework.Plugin, error) {
		if len(args) > 0 && string(args) != "null" && string(args) != "{}" {
			return nil, errors.New("args: Forbidden: the plugin takes no arguments")
		}
		return mk(h), nil
	}
}

func status(reasons []string) *framework.Status {
	if len(reasons) == 0 {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, reasons...)
}

// NodeReady rejects nodes whose Ready condition is not True. Kubernetes
// leaves this to the not-ready/unreachable NoSchedule taints; kplane's
// node lifecycle sets those too, and this filter also covers the moment
// before it does.
type NodeReady struct{}

// Name implements framework.Plugin.
func (NodeReady) Name() string { return NodeReadyName }

// Filter implements framework.FilterPlugin.
func (NodeReady) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if r := core.FilterReady(pod, node); len(r) > 0 {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, r...)
	}
	return nil
}

// NodeUnschedulable rejects cordoned nodes unless the pod tolerates the
// node.kubernetes.io/unschedulable taint.
type NodeUnschedulable struct{}

// Name implements framework.Plugin.
func (NodeUnschedulable) Name() string { return NodeUnschedulableName }

// Filter implements framework.FilterPlugin.
func (NodeUnschedulable) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if r := core.FilterUnschedulable(pod, node); len(r) > 0 {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, r...)
	}
	return nil
}

// TaintToleration rejects nodes with an untolerated NoSchedule or
// NoExecute taint and prefers nodes with fewer untolerated
// PreferNoSchedule taints.
type TaintToleration struct{}

// Name implements framework.Plugin.
func (TaintToleration) Name() string { return TaintTolerationName }

// Filter implements framework.FilterPlugin.
func (TaintToleration) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if r := core.FilterTaints(pod, node); len(r) > 0 {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, r...)
	}
	return nil
}

// Score implements framework.ScorePlugin: the count of untolerated
// PreferNoSchedule taints (reversed by NormalizeScore).
func (TaintToleration) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	return core.ScoreTaints(pod, node), nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (TaintToleration) ScoreExtensions() framework.ScoreExtensions { return reverse{} }

// reverse normalizes counts where fewer is better.
type reverse struct{}

func (reverse) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	var highest int64
	for _, s := range scores {
		highest = max(highest, s.Score)
	}
	for i, s := range scores {
		if highest == 0 {
			scores[i].Score = framework.MaxNodeScore
			continue
		}
		scores[i].Score = framework.MaxNodeScore * (highest - s.Score) / highest
	}
	return nil
}

// SelectorSpread prefers nodes with fewer pods of the pod's controlling
// owner, so a ReplicaSet's pods spread over nodes by default (as
// Kubernetes' SelectorSpread did before PodTopologySpread's system
// defaults replaced it).
type SelectorSpread struct{}

// Name implements framework.Plugin.
func (SelectorSpread) Name() string { return SelectorSpreadName }

// Score implements framework.ScorePlugin.
func (SelectorSpread) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	return core.ScoreOwnerSpread(pod, node), nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (SelectorSpread) ScoreExtensions() framework.ScoreExtensions { return reverse{} }

// BalancedAllocation prefers nodes whose cpu and memory would be used in
// the same proportion.
type BalancedAllocation struct{}

// Name implements framework.Plugin.
func (BalancedAllocation) Name() string { return NodeResourcesBalancedAllocationName }

// Score implements framework.ScorePlugin.
func (BalancedAllocation) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	return core.ScoreBalancedAllocation(pod, node), nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (BalancedAllocation) ScoreExtensions() framework.ScoreExtensions { return nil }

// NodePorts rejects nodes where a pod already uses a hostPort the pod
// asks for (same protocol and port; host IPs are not modelled).
type NodePorts struct{}

// ReasonNodePorts is NodePorts' reason.
const ReasonNodePorts = "node(s) didn't have free ports for the requested pod ports"

// Name implements framework.Plugin.
func (NodePorts) Name() string { return NodePortsName }

type hostPort struct {
	protocol string
	port     int32
}

const nodePortsKey = NodePortsName

// PreFilter implements framework.PreFilterPlugin: it collects the pod's
// host ports, and skips the Filter when there are none.
func (NodePorts) PreFilter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	ports := podHostPorts(pod)
	if len(ports) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	state.Write(nodePortsKey, ports)
	return nil
}

// Filter implements framework.FilterPlugin.
func (NodePorts) Filter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	v, ok := state.Read(nodePortsKey)
	if !ok {
		v = podHostPorts(pod)
	}
	want := v.([]hostPort)
	conflict := false
	node.Pods(func(other *framework.PodInfo) bool {
		for _, hp := range podHostPorts(other) {
			for _, w := range want {
				if hp == w {
					conflict = true
					return false
				}
			}
		}
		return true
	})
	if conflict {
		return framework.NewStatus(framework.Unschedulable, ReasonNodePorts)
	}
	return nil
}

func podHostPorts(pod *framework.PodInfo) []hostPort {
	var out []hostPort
	for _, c := range pod.Pod.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			if p.GetHostPort() > 0 {
				proto := p.GetProtocol()
				if proto == "" {
					proto = "TCP"
				}
				out = append(out, hostPort{proto, p.GetHostPort()})
			}
		}
	}
	return out
}
