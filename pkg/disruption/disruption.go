// Package disruption holds the rules of PodDisruptionBudgets that more
// than one process applies: which budgets select a pod, whether evicting
// a pod is allowed and what it takes from its budget (the apiserver's
// eviction subresource), whether deleting a set of pods would violate a
// budget (the scheduler's preemption), and the DisruptionAllowed
// condition (the disruption controller). Everything here is pure: no I/O,
// and the clock is passed in.
package disruption

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/labels"
)

// MaxDisruptedPods bounds status.disruptedPods, as Kubernetes does: more
// evictions not yet confirmed by the controller than this are refused.
const MaxDisruptedPods = 2000

// DisruptedPodTimeout is how long an evicted pod stays in
// status.disruptedPods when the controller does not see it go: after
// that it counts as healthy again if it still is (Kubernetes: 2 minutes).
const DisruptedPodTimeout = 2 * time.Minute

// Selects reports whether pdb selects pod: the same namespace and a
// selector matching the pod's labels. A nil selector selects nothing and
// an empty one every pod of the namespace (policy/v1); a selector the
// validation would refuse selects nothing.
func Selects(pdb *kplanev1.PodDisruptionBudget, pod *kplanev1.Pod) bool {
	if pdb.GetMetadata().GetNamespace() != pod.GetMetadata().GetNamespace() {
		return false
	}
	sel, err := labels.FromLabelSelector(pdb.GetSpec().GetSelector())
	if err != nil {
		return false
	}
	return sel.Matches(pod.GetMetadata().GetLabels())
}

// Matching returns the budgets of pdbs that select pod.
func Matching(pdbs []*kplanev1.PodDisruptionBudget, pod *kplanev1.Pod) []*kplanev1.PodDisruptionBudget {
	var out []*kplanev1.PodDisruptionBudget
	for _, b := range pdbs {
		if Selects(b, pod) {
			out = append(out, b)
		}
	}
	return out
}

// CanIgnore reports whether evicting pod needs no budget at all: a pod
// that is Pending, has finished, or is already being deleted is not one
// of the healthy pods any budget counts (Kubernetes' canIgnorePDB).
func CanIgnore(pod *kplanev1.Pod) bool {
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		return true
	}
	switch pod.GetStatus().GetPhase() {
	case kplanev1.PodSucceeded, kplanev1.PodFailed, kplanev1.PodPending, "":
		return true
	}
	return false
}

// Refusal is an eviction refused because it would violate a budget (an
// HTTP 429 with a DisruptionBudget cause). Error is Kubernetes' message;
// Cause says which budget and why.
type Refusal struct {
	Budget string
	Cause  string
}

func (r *Refusal) Error() string { return kplanev1.EvictionRefusedMessage }

// ErrTooManyDisrupted is returned when a budget already holds
// MaxDisruptedPods evictions its controller has not confirmed.
var ErrTooManyDisrupted = errors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller")

// CheckEviction decides an eviction of pod (running, see CanIgnore)
// against the one budget selecting it, as Kubernetes' eviction REST does.
// take is true when the eviction must take a disruption from the budget
// (see Take); false with a nil error when the pod may go without (it is
// not ready and so not counted healthy, and the policy or the budget
// allows that). A *Refusal means the eviction would violate the budget.
func CheckEviction(pdb *kplanev1.PodDisruptionBudget, pod *kplanev1.Pod) (take bool, err error) {
	st := pdb.GetStatus()
	if !apiutil.IsPodReady(pod) {
		if pdb.GetSpec().GetUnhealthyPodEvictionPolicy() == kplanev1.UnhealthyPodEvictionAlwaysAllow {
			return false, nil
		}
		if st.GetCurrentHealthy() >= st.GetDesiredHealthy() && st.GetDesiredHealthy() > 0 {
			return false, nil
		}
	}
	name := pdb.GetMetadata().GetName()
	if st.GetObservedGeneration() < pdb.GetMetadata().GetGeneration() {
		return false, &Refusal{Budget: name, Cause: fmt.Sprintf("The disruption budget %s is still being processed by the server.", name)}
	}
	if len(st.GetDisruptedPods()) > MaxDisruptedPods {
		return false, ErrTooManyDisrupted
	}
	if st.GetDisruptionsAllowed() <= 0 {
		return false, &Refusal{Budget: name, Cause: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", name, st.GetDesiredHealthy(), st.GetCurrentHealthy())}
	}
	return true, nil
}

// Take records in pdb's status (modified in place) the eviction of the
// pod named podName at now: one disruption fewer allowed, the pod in
// disruptedPods until the controller sees it go, and the
// DisruptionAllowed condition once none is left.
func Take(pdb *kplanev1.PodDisruptionBudget, podName string, now time.Time) {
	if pdb.Status == nil {
		pdb.Status = &kplanev1.PodDisruptionBudgetStatus{}
	}
	st := pdb.Status
	st.DisruptionsAllowed--
	if st.DisruptedPods == nil {
		st.DisruptedPods = map[string]*timestamppb.Timestamp{}
	}
	st.DisruptedPods[podName] = timestamppb.New(now)
	if st.DisruptionsAllowed == 0 {
		st.Conditions = apiutil.SetStatusCondition(st.Conditions, AllowedCondition(st.DisruptionsAllowed, now))
	}
}

// AllowedCondition is the DisruptionAllowed condition for allowed
// disruptions: True (SufficientPods) when above zero, else False
// (InsufficientPods).
func AllowedCondition(allowed int32, now time.Time) *kplanev1.Condition {
	c := &kplanev1.Condition{Type: kplanev1.DisruptionAllowedCondition, Status: kplanev1.ConditionTrue,
		Reason: kplanev1.ReasonSufficientPods, LastTransitionTime: timestamppb.New(now)}
	if allowed <= 0 {
		c.Status, c.Reason = kplanev1.ConditionFalse, kplanev1.ReasonInsufficientPods
	}
	return c
}

// SplitViolating divides pods (candidate victims, in the order given)
// into those whose deletion would violate a budget of pdbs and those whose
// would not, as Kubernetes' preemption does: the pods are taken one by
// one from each selecting budget's allowed disruptions, so the first pods
// of a budget fit and the ones past its allowance violate it. A pod the
// budget already counts as disrupted takes nothing.
func SplitViolating(pods []*kplanev1.Pod, pdbs []*kplanev1.PodDisruptionBudget) (violating, nonViolating []*kplanev1.Pod) {
	allowed := make([]int32, len(pdbs))
	for i, b := range pdbs {
		allowed[i] = b.GetStatus().GetDisruptionsAllowed()
	}
	for _, p := range pods {
		violates := false
		for i, b := range pdbs {
			if !Selects(b, p) {
				continue
			}
			if _, gone := b.GetStatus().GetDisruptedPods()[p.GetMetadata().GetName()]; gone {
				continue
			}
			allowed[i]--
			if allowed[i] < 0 {
				violates = true
			}
		}
		if violates {
			violating = append(violating, p)
		} else {
			nonViolating = append(nonViolating, p)
		}
	}
	return violating, nonViolating
}

// Violations is how many of pods could not be deleted without violating
// a budget of pdbs (len of SplitViolating's first result).
func Violations(pods []*kplanev1.Pod, pdbs []*kplanev1.PodDisruptionBudget) int {
	v, _ := SplitViolating(pods, pdbs)
	return len(v)
}
