package core

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Failure reasons, worded as Kubernetes words them so that users recognise
// them in "0/3 nodes are available: ..." messages.
const (
	ReasonNotReady          = "node(s) were not ready"
	ReasonUnschedulable     = "node(s) were unschedulable"
	ReasonNodeSelector      = "node(s) didn't match Pod's node affinity/selector"
	ReasonInsufficientCPU   = "Insufficient cpu"
	ReasonInsufficientMem   = "Insufficient memory"
	ReasonTooManyPods       = "Too many pods"
	reasonUntoleratedFormat = "node(s) had untolerated taint {%s: %s}"
)

// FilterFunc decides whether pod may go to node; it returns the reasons it
// may not (none means it fits).
type FilterFunc func(pod *PodInfo, node *NodeInfo) []string

// Filter is a named FilterFunc.
type Filter struct {
	Name string
	Fn   FilterFunc
}

// Filters are run in this order, and a node's first failing filter gives
// its reasons, as in Kubernetes: the cheap checks of the node's own state
// come first, resources last (they can report several reasons at once).
var Filters = []Filter{
	{"NodeReady", FilterReady},
	{"NodeUnschedulable", FilterUnschedulable},
	{"TaintToleration", FilterTaints},
	{"NodeSelector", FilterNodeSelector},
	{"NodeResourcesFit", FilterResources},
	{"VolumeBinding", FilterVolumes},
}

// RunFilters returns the reasons pod does not fit node (nil when it fits).
func RunFilters(pod *PodInfo, node *NodeInfo) []string {
	for _, f := range Filters {
		if reasons := f.Fn(pod, node); len(reasons) > 0 {
			return reasons
		}
	}
	return nil
}

// FilterReady requires the node's Ready condition to be True.
func FilterReady(_ *PodInfo, node *NodeInfo) []string {
	if !node.Ready {
		return []string{ReasonNotReady}
	}
	return nil
}

// FilterUnschedulable rejects cordoned nodes (spec.unschedulable), unless
// the pod tolerates the node.kubernetes.io/unschedulable taint, as daemon
// pods do in Kubernetes.
func FilterUnschedulable(pod *PodInfo, node *NodeInfo) []string {
	if !node.Unschedulable {
		return nil
	}
	for _, t := range pod.Tolerations {
		if apiutil.ToleratesTaint(t, kplanev1.TaintNodeUnschedulable, "", kplanev1.TaintEffectNoSchedule) {
			return nil
		}
	}
	return []string{ReasonUnschedulable}
}

// FilterTaints rejects a node with a NoSchedule or NoExecute taint that
// the pod does not tolerate; it names the first such taint.
// PreferNoSchedule taints only lower the score (ScoreTaints).
func FilterTaints(pod *PodInfo, node *NodeInfo) []string {
	for _, taint := range node.Taints {
		if taint.GetEffect() != kplanev1.TaintEffectNoSchedule && taint.GetEffect() != kplanev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(pod, taint.GetKey(), taint.GetValue(), taint.GetEffect()) {
			return []string{fmt.Sprintf(reasonUntoleratedFormat, taint.GetKey(), taint.GetValue())}
		}
	}
	return nil
}

// FilterNodeSelector requires every nodeSelector label on the node.
func FilterNodeSelector(pod *PodInfo, node *NodeInfo) []string {
	for k, v := range pod.NodeSelector {
		if w, ok := node.Labels[k]; !ok || w != v {
			return []string{ReasonNodeSelector}
		}
	}
	return nil
}

// FilterResources requires the pod's requests to fit what the node has
// left (allocatable minus the requests of its assigned pods, bound or
// assumed), and a free pod slot. It reports every resource that is short.
func FilterResources(pod *PodInfo, node *NodeInfo) []string {
	var reasons []string
	if node.Requested.Pods+pod.Requests.Pods > node.Allocatable.Pods {
		reasons = append(reasons, ReasonTooManyPods)
	}
	if pod.Requests.MilliCPU > 0 && node.Requested.MilliCPU+pod.Requests.MilliCPU > node.Allocatable.MilliCPU {
		reasons = append(reasons, ReasonInsufficientCPU)
	}
	if pod.Requests.Memory > 0 && node.Requested.Memory+pod.Requests.Memory > node.Allocatable.Memory {
		reasons = append(reasons, ReasonInsufficientMem)
	}
	return reasons
}

func tolerated(pod *PodInfo, key, value, effect string) bool {
	for _, t := range pod.Tolerations {
		if apiutil.ToleratesTaint(t, key, value, effect) {
			return true
		}
	}
	return false
}

// FitError says why a pod fits no node: how many nodes were considered and
// how many failed for each reason.
type FitError struct {
	NumNodes int
	Reasons  map[string]int
}

// Error renders the message kubectl users know, reasons by decreasing
// count (then alphabetically): "0/3 nodes are available: 2 Insufficient
// cpu, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
func (e *FitError) Error() string {
	if e.NumNodes == 0 {
		return "0/0 nodes are available: no nodes to schedule pods on."
	}
	reasons := slices.Collect(maps.Keys(e.Reasons))
	slices.SortFunc(reasons, func(a, b string) int {
		if d := e.Reasons[b] - e.Reasons[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "0/%d nodes are available", e.NumNodes)
	for i, r := range reasons {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", e.Reasons[r], r)
	}
	b.WriteString(".")
	return b.String()
}
