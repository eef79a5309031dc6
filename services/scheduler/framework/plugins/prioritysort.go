package plugins

import "github.com/kplane/kplane/services/scheduler/framework"

// PrioritySortName is the default QueueSort plugin.
const PrioritySortName = "PrioritySort"

// PrioritySort orders the scheduling queue by spec.priority, highest
// first, then by the time the pod was queued, oldest first.
type PrioritySort struct{}

// Name implements framework.Plugin.
func (PrioritySort) Name() string { return PrioritySortName }

// Less implements framework.QueueSortPlugin.
func (PrioritySort) Less(a, b *framework.QueuedPodInfo) bool {
	pa, pb := a.Pod.GetSpec().GetPriority(), b.Pod.GetSpec().GetPriority()
	return pa > pb || (pa == pb && a.Timestamp.Before(b.Timestamp))
}
