// Package apiutil holds the predicates over API objects that more than one
// process needs: conditions, taints and tolerations, pod phases and
// readiness, and resourceVersion parsing. The names they test for live in
// proto/kplane/v1 (constants.go).
package apiutil

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// FindCondition returns the condition of type typ, or nil.
func FindCondition(conds []*kplanev1.Condition, typ string) *kplanev1.Condition {
	for _, c := range conds {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// SetCondition returns conds with c replacing the condition of its type,
// or appended when there is none. conds itself is not modified.
func SetCondition(conds []*kplanev1.Condition, c *kplanev1.Condition) []*kplanev1.Condition {
	out := make([]*kplanev1.Condition, 0, len(conds)+1)
	replaced := false
	for _, o := range conds {
		if o.GetType() == c.GetType() {
			out = append(out, c)
			replaced = true
			continue
		}
		out = append(out, o)
	}
	if !replaced {
		out = append(out, c)
	}
	return out
}

// SetStatusCondition is SetCondition for the writer of a status: when
// conds already holds a condition of c's type with c's status, the result
// keeps that condition's lastTransitionTime (it says when the status last
// changed), as Kubernetes' meta.SetStatusCondition does; otherwise c's own
// lastTransitionTime stands. Neither conds nor c is modified.
func SetStatusCondition(conds []*kplanev1.Condition, c *kplanev1.Condition) []*kplanev1.Condition {
	if old := FindCondition(conds, c.GetType()); old != nil && old.GetStatus() == c.GetStatus() && old.GetLastTransitionTime() != nil {
		c = proto.Clone(c).(*kplanev1.Condition)
		c.LastTransitionTime = old.GetLastTransitionTime()
	}
	return SetCondition(conds, c)
}

// IsConditionTrue reports whether conds has a condition of type typ with
// status True.
func IsConditionTrue(conds []*kplanev1.Condition, typ string) bool {
	return FindCondition(conds, typ).GetStatus() == kplanev1.ConditionTrue
}

// IsPodTerminal reports whether a pod has finished for good (Succeeded or
// Failed): it runs no containers and never will again.
func IsPodTerminal(pod *kplanev1.Pod) bool { return IsTerminalPhase(pod.GetStatus().GetPhase()) }

// IsPodActive reports whether a pod still counts for its controller:
// neither terminating (deletionTimestamp set) nor terminal.
func IsPodActive(pod *kplanev1.Pod) bool {
	return pod.GetMetadata().GetDeletionTimestamp() == nil && !IsPodTerminal(pod)
}

// IsTerminalPhase reports whether a pod phase is Succeeded or Failed.
func IsTerminalPhase(phase string) bool {
	return phase == kplanev1.PodSucceeded || phase == kplanev1.PodFailed
}

// IsPodReady reports whether a pod's Ready condition is True.
func IsPodReady(pod *kplanev1.Pod) bool {
	return IsConditionTrue(pod.GetStatus().GetConditions(), kplanev1.PodReady)
}

// IsNodeReady reports whether a node's Ready condition is True.
func IsNodeReady(node *kplanev1.Node) bool {
	return IsConditionTrue(node.GetStatus().GetConditions(), kplanev1.NodeReady)
}

// Toleration is what a toleration exposes; both the API message and the
// scheduler's pre-computed copies satisfy it.
type Toleration interface {
	GetKey() string
	GetOperator() string
	GetValue() string
	GetEffect() string
}

// ToleratesTaint applies Kubernetes' matching rules to one toleration and
// one taint (key, value, effect): an empty effect matches every effect; an
// empty key with operator Exists matches every key; Exists ignores the
// value; Equal (the default) compares it and needs a key.
func ToleratesTaint(tol Toleration, key, value, effect string) bool {
	if tol.GetEffect() != "" && tol.GetEffect() != effect {
		return false
	}
	if tol.GetKey() != "" && tol.GetKey() != key {
		return false
	}
	switch tol.GetOperator() {
	case kplanev1.TolerationOpExists:
		return true
	case "", kplanev1.TolerationOpEqual:
		return tol.GetKey() != "" && tol.GetValue() == value
	}
	return false
}

// Tolerates reports whether tol tolerates taint.
func Tolerates(tol Toleration, taint *kplanev1.Taint) bool {
	return ToleratesTaint(tol, taint.GetKey(), taint.GetValue(), taint.GetEffect())
}

// ParseResourceVersion parses a resourceVersion (an etcd revision). The
// empty string is revision 0 (nothing observed yet); anything else that is
// not a non-negative decimal integer is an error, never a silent 0.
func ParseResourceVersion(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("resourceVersion %q: must be a non-negative integer", rv)
	}
	return n, nil
}
