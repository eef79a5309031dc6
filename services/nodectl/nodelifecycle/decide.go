package nodelifecycle

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Reasons this controller writes on conditions.
const (
	// reasonStatusUnknown marks a Ready condition this controller set
	// because the node's lease went stale.
	reasonStatusUnknown = "NodeStatusUnknown"
	// reasonLeaseRenewed marks a Ready condition this controller set back
	// to True because the lease was renewed after it went stale.
	reasonLeaseRenewed = "NodeLeaseRenewed"
	reasonPodNodeLost  = "NodeNotReady"
)

// heartbeat is what this controller has seen of a node's lease. The lease's
// renewTime is written by the agent's clock, so it is only compared with
// itself; staleness is judged by this controller's clock from seenAt, the
// moment the renewTime was first seen with its current value (as client-go's
// leader election does), which makes clock skew between hosts irrelevant.
type heartbeat struct {
	renewTime *timestamppb.Timestamp
	seenAt    time.Time
}

// observe returns hb updated with a lease's renewTime seen at now: seenAt
// moves only when the renewTime changed (or on the first sight).
func (hb heartbeat) observe(renew *timestamppb.Timestamp, now time.Time) heartbeat {
	if !hb.seenAt.IsZero() && proto.Equal(hb.renewTime, renew) {
		return hb
	}
	return heartbeat{renewTime: renew, seenAt: now}
}

// readyDecision is what the Ready condition of a node should become.
type readyDecision struct {
	// cond is the new Ready condition to write; nil leaves it alone.
	cond *kplanev1.Condition
	// staleIn is how long until the lease goes stale if it is not renewed
	// (0 when it already is), for scheduling the next check.
	staleIn time.Duration
}

// decideReady judges a node's Ready condition from its lease. renew is the
// lease's current renewTime (nil when there is no lease), hb what this
// controller has seen of it.
//
// A lease not renewed for longer than grace turns Ready to Unknown; the
// condition's lastHeartbeatTime records the renewTime that was current at
// that moment. That lets any replica, or this one after a restart, tell
// "renewed since it was marked" (renewTime differs: set Ready back to True)
// from "still silent" (keep it, without bumping lastTransitionTime) using
// only the objects, not memory.
func decideReady(node *kplanev1.Node, renew *timestamppb.Timestamp, hb heartbeat, now time.Time, grace time.Duration) readyDecision {
	ready := apiutil.FindCondition(node.GetStatus().GetConditions(), kplanev1.NodeReady)
	age := now.Sub(hb.seenAt)
	if age > grace {
		if ready.GetStatus() == kplanev1.ConditionUnknown {
			return readyDecision{}
		}
		return readyDecision{cond: &kplanev1.Condition{
			Type:               kplanev1.NodeReady,
			Status:             kplanev1.ConditionUnknown,
			Reason:             reasonStatusUnknown,
			Message:            fmt.Sprintf("Node agent stopped posting heartbeats: lease not renewed for more than %v.", grace),
			LastTransitionTime: timestamppb.New(now),
			LastHeartbeatTime:  renew,
		}}
	}
	d := readyDecision{staleIn: grace - age}
	if ready.GetStatus() == kplanev1.ConditionUnknown && ready.GetReason() == reasonStatusUnknown &&
		!sameSecond(ready.GetLastHeartbeatTime(), renew) {
		d.cond = &kplanev1.Condition{
			Type:               kplanev1.NodeReady,
			Status:             kplanev1.ConditionTrue,
			Reason:             reasonLeaseRenewed,
			Message:            "Node agent renewed its lease.",
			LastTransitionTime: timestamppb.New(now),
			LastHeartbeatTime:  renew,
		}
	}
	return d
}

// sameSecond compares a condition's lastHeartbeatTime with a lease's
// renewTime. The apiserver stores a Time (lastHeartbeatTime) to the second
// and a MicroTime (renewTime) to the microsecond, as Kubernetes does, so
// they are compared at the coarser one. A renewal after the node was
// marked comes at least the grace period later, so it never falls in the
// same second.
func sameSecond(a, b *timestamppb.Timestamp) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.AsTime().Truncate(time.Second).Equal(b.AsTime().Truncate(time.Second))
}

// taintChange describes what desiredTaints did.
type taintChange struct {
	added, removed []string // "key:effect"
	stamped        bool     // a NoExecute taint got its missing timeAdded
}

func (c taintChange) changed() bool { return len(c.added) > 0 || len(c.removed) > 0 || c.stamped }

func taintID(t *kplanev1.Taint) string { return t.GetKey() + ":" + t.GetEffect() }

// pressureTaints pairs each node pressure condition with its taint.
var pressureTaints = []struct{ cond, key string }{
	{kplanev1.NodeMemoryPressure, kplanev1.TaintNodeMemoryPressure},
	{kplanev1.NodeDiskPressure, kplanev1.TaintNodeDiskPressure},
	{kplanev1.NodePIDPressure, kplanev1.TaintNodePIDPressure},
}

// desiredTaints returns the node's taints as its conditions ask for. Ready:
// Unknown → unreachable NoSchedule+NoExecute, False → not-ready, True →
// neither; without a Ready condition these taints are left as they are.
// MemoryPressure, DiskPressure, PIDPressure: True → the matching
// NoSchedule taint (new pods stay off; the node agent evicts running
// ones), False → none, absent or Unknown → left as it is. Taints already
// present are kept untouched (their timeAdded is the start of every
// eviction window, so it must never move), new ones get timeAdded = now,
// and NoExecute taints someone else added without a timeAdded are stamped
// now so that eviction timing lives in the object.
func desiredTaints(node *kplanev1.Node, now time.Time) ([]*kplanev1.Taint, taintChange) {
	both := []string{kplanev1.TaintEffectNoSchedule, kplanev1.TaintEffectNoExecute}
	var want []*kplanev1.Taint
	drop := map[string]bool{} // "key:effect"
	wantKey := func(key string, effects ...string) {
		for _, e := range effects {
			want = append(want, &kplanev1.Taint{Key: key, Effect: e, TimeAdded: timestamppb.New(now)})
		}
	}
	dropKey := func(key string, effects ...string) {
		for _, e := range effects {
			drop[key+":"+e] = true
		}
	}
	conds := node.GetStatus().GetConditions()
	switch apiutil.FindCondition(conds, kplanev1.NodeReady).GetStatus() {
	case kplanev1.ConditionUnknown:
		wantKey(kplanev1.TaintNodeUnreachable, both...)
		dropKey(kplanev1.TaintNodeNotReady, both...)
	case kplanev1.ConditionFalse:
		wantKey(kplanev1.TaintNodeNotReady, both...)
		dropKey(kplanev1.TaintNodeUnreachable, both...)
	case kplanev1.ConditionTrue:
		dropKey(kplanev1.TaintNodeUnreachable, both...)
		dropKey(kplanev1.TaintNodeNotReady, both...)
	}
	for _, p := range pressureTaints {
		switch apiutil.FindCondition(conds, p.cond).GetStatus() {
		case kplanev1.ConditionTrue:
			wantKey(p.key, kplanev1.TaintEffectNoSchedule)
		case kplanev1.ConditionFalse:
			dropKey(p.key, kplanev1.TaintEffectNoSchedule)
		}
	}
	var ch taintChange
	var out []*kplanev1.Taint
	have := map[string]bool{}
	for _, t := range node.GetSpec().GetTaints() {
		if drop[taintID(t)] {
			ch.removed = append(ch.removed, taintID(t))
			continue
		}
		if t.GetEffect() == kplanev1.TaintEffectNoExecute && t.GetTimeAdded() == nil {
			t = proto.Clone(t).(*kplanev1.Taint)
			t.TimeAdded = timestamppb.New(now)
			ch.stamped = true
		}
		have[taintID(t)] = true
		out = append(out, t)
	}
	for _, t := range want {
		if !have[taintID(t)] {
			out = append(out, t)
			ch.added = append(ch.added, taintID(t))
		}
	}
	return out, ch
}

// readinessTaints keeps the not-ready and unreachable taints of ids
// ("key:effect").
func readinessTaints(ids []string) []string {
	var out []string
	for _, id := range ids {
		if strings.HasPrefix(id, kplanev1.TaintNodeNotReady+":") || strings.HasPrefix(id, kplanev1.TaintNodeUnreachable+":") {
			out = append(out, id)
		}
	}
	return out
}

// evictionDeadline returns when pod must leave a node with taints: for
// each NoExecute taint, timeAdded plus the pod's toleration seconds when
// it tolerates the taint for a bounded time (the smallest, as Kubernetes
// does), plus timeout when it does not tolerate it at all; a taint it
// tolerates without seconds never evicts it. The earliest deadline wins.
// ok is false when no taint evicts the pod. Taints without timeAdded are
// skipped: desiredTaints stamps them first.
func evictionDeadline(taints []*kplanev1.Taint, pod *kplanev1.Pod, timeout time.Duration) (deadline time.Time, ok bool) {
	for _, t := range taints {
		if t.GetEffect() != kplanev1.TaintEffectNoExecute || t.GetTimeAdded() == nil {
			continue
		}
		wait := timeout
		tolerated, forever := false, false
		var minSeconds int64
		for _, tol := range pod.GetSpec().GetTolerations() {
			if !apiutil.Tolerates(tol, t) {
				continue
			}
			if tol.TolerationSeconds == nil {
				if !tolerated {
					forever = true
				}
				tolerated = true
				continue
			}
			s := max(*tol.TolerationSeconds, 0)
			if !tolerated || forever || s < minSeconds {
				minSeconds = s
			}
			tolerated, forever = true, false
		}
		if forever {
			continue
		}
		if tolerated {
			wait = time.Duration(minSeconds) * time.Second
		}
		d := t.GetTimeAdded().AsTime().Add(wait)
		if !ok || d.Before(deadline) {
			deadline, ok = d, true
		}
	}
	return deadline, ok
}

// podNotReady returns pod's status with its Ready condition set to False
// because its node is not ready, or nil when there is nothing to change
// (no Ready condition, already False, or the pod finished). A pod without
// a Ready condition never ran, so nothing routes to it yet.
func podNotReady(pod *kplanev1.Pod, node string, now time.Time) *kplanev1.PodStatus {
	ready := apiutil.FindCondition(pod.GetStatus().GetConditions(), kplanev1.NodeReady)
	if apiutil.IsPodTerminal(pod) || ready == nil || ready.GetStatus() == kplanev1.ConditionFalse {
		return nil
	}
	st := proto.Clone(pod.GetStatus()).(*kplanev1.PodStatus)
	st.Conditions = apiutil.SetCondition(st.Conditions, &kplanev1.Condition{
		Type:               kplanev1.NodeReady,
		Status:             kplanev1.ConditionFalse,
		Reason:             reasonPodNodeLost,
		Message:            fmt.Sprintf("Node %s is not ready.", node),
		LastTransitionTime: timestamppb.New(now),
		LastProbeTime:      ready.GetLastProbeTime(),
	})
	return st
}

// disrupted reports whether more than threshold of the nodes are unready
// at once; evictions stop then, since the fault is more likely between the
// control plane and the nodes than in the nodes.
func disrupted(unready, total int, threshold float64) bool {
	return total > 0 && float64(unready)/float64(total) > threshold
}
