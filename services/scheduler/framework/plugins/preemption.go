package plugins

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/disruption"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// DefaultPreemptionName is the default PostFilter plugin.
const DefaultPreemptionName = "DefaultPreemption"

// Preemption's reasons, as Kubernetes words them.
const (
	ReasonNoVictims          = "No preemption victims found for incoming pod"
	ReasonPreemptionNotHelps = "Preemption is not helpful for scheduling"
)

// DefaultPreemption is Kubernetes' DefaultPreemption PostFilter plugin:
// when a pod fits no node, it looks for the node where evicting pods of
// lower priority makes it fit, evicting as few and as unimportant ones as
// possible: on each node that failed for a reason eviction can fix, every
// lower-priority pod is removed in simulation and the filters run again;
// then the victims are given back one by one, most important first, as
// long as the pod still fits. Among the nodes, the one whose most
// important victim is least important wins, then the smallest sum of
// victim priorities, then the fewest victims. The pod gets
// status.nominatedNodeName; each victim gets the DisruptionTarget
// condition and an Event and is deleted gracefully; the pod is scheduled
// once they are gone (their deletion is a cluster event that retries
// it). Pods of equal or higher priority are never victims, and a pod
// with preemptionPolicy Never preempts nothing.
//
// PodDisruptionBudgets are honoured as in Kubernetes: on a node, the
// victims whose deletion would violate a budget are given back first, and
// among the nodes the one with the fewest such violations wins before
// any priority is compared. A violation is allowed when nothing else
// makes the pod fit (preemption is not an eviction).
type DefaultPreemption struct {
	h framework.Handle
	// pdbs is the PodDisruptionBudget informer; nil without a handle.
	pdbs *informer.Informer
}

// NewDefaultPreemption returns the plugin; budgets come from h's
// PodDisruptionBudget informer.
func NewDefaultPreemption(h framework.Handle) *DefaultPreemption {
	p := &DefaultPreemption{h: h}
	if h != nil {
		p.pdbs = h.Informer("PodDisruptionBudget")
	}
	return p
}

// budgets lists the PodDisruptionBudgets known to the informer.
func (p *DefaultPreemption) budgets() []*kplanev1.PodDisruptionBudget {
	if p.pdbs == nil {
		return nil
	}
	var out []*kplanev1.PodDisruptionBudget
	for _, o := range p.pdbs.Store().List() {
		out = append(out, o.GetPodDisruptionBudget())
	}
	return out
}

// Name implements framework.Plugin.
func (*DefaultPreemption) Name() string { return DefaultPreemptionName }

// candidate is a node and the pods to evict there; violations of them
// would violate a PodDisruptionBudget.
type candidate struct {
	node       string
	victims    []*framework.PodInfo
	violations int
}

// PostFilter implements framework.PostFilterPlugin.
func (p *DefaultPreemption) PostFilter(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, nodes []*framework.NodeInfo, filtered framework.NodeToStatus) (*framework.PostFilterResult, *framework.Status) {
	spec := pod.Pod.GetSpec()
	if spec.GetPreemptionPolicy() == kplanev1.PreemptNever {
		return nil, framework.NewStatus(framework.Unschedulable, "not eligible due to preemptionPolicy=Never.")
	}
	prio := spec.GetPriority()
	// A pod whose earlier preemption is still under way waits for it.
	// The nomination is in the cache at once; the status may lag.
	nominated := pod.Pod.GetStatus().GetNominatedNodeName()
	for _, n := range nodes {
		n.NominatedPods(func(q *framework.PodInfo) {
			if q.UID == pod.UID {
				nominated = n.Name
			}
		})
	}
	if nominated != "" {
		for _, n := range nodes {
			if n.Name != nominated {
				continue
			}
			terminating := false
			n.Pods(func(e *framework.PodInfo) bool {
				if e.Pod.GetMetadata().GetDeletionTimestamp() != nil && e.Pod.GetSpec().GetPriority() < prio {
					terminating = true
				}
				return !terminating
			})
			if terminating {
				return nil, framework.NewStatus(framework.Unschedulable, "not eligible due to a terminating pod on the nominated node.")
			}
		}
	}
	// Whether fits must recount pods across nodes for each simulation
	// (the pod or a placed pod has pod affinity terms, or the pod spreads).
	aware := pod.HasPodAffinity() || len(pod.Pod.GetSpec().GetTopologySpreadConstraints()) > 0
	for _, n := range nodes {
		aware = aware || n.NumPodsWithAffinity() > 0
	}
	var best *candidate
	var bestKey [4]int64
	pdbs := p.budgets()
	noVictims, notHelpful := 0, 0
	for _, n := range nodes {
		st := filtered[n.Name]
		if st.Code() == framework.UnschedulableAndUnresolvable {
			notHelpful++
			continue
		}
		c := p.victimsOn(ctx, state, pod, n, nodes, aware, pdbs)
		if c == nil {
			noVictims++
			continue
		}
		key := rank(c)
		if best == nil || slices.Compare(key[:], bestKey[:]) < 0 {
			best, bestKey = c, key
		}
	}
	if best == nil {
		fit := &framework.FitError{NumNodes: len(nodes), Reasons: map[string]int{}}
		if noVictims > 0 {
			fit.Reasons[ReasonNoVictims] = noVictims
		}
		if notHelpful > 0 {
			fit.Reasons[ReasonPreemptionNotHelps] = notHelpful
		}
		return nil, framework.NewStatus(framework.Unschedulable, fit.Error())
	}
	if err := p.evict(ctx, pod, best); err != nil {
		return nil, framework.AsStatus(err)
	}
	return &framework.PostFilterResult{NominatedNodeName: best.node}, nil
}

// rank orders candidates: lower is better (the PodDisruptionBudget
// violations, the highest victim priority, the sum of victim priorities,
// the number of victims).
func rank(c *candidate) [4]int64 {
	var highest, sum int64
	for i, v := range c.victims {
		pr := int64(v.Pod.GetSpec().GetPriority())
		if i == 0 || pr > highest {
			highest = pr
		}
		sum += pr
	}
	return [4]int64{int64(c.violations), highest, sum, int64(len(c.victims))}
}

// victimsOn returns the fewest, least important pods of lower priority
// to evict from node for pod to fit, or nil when evicting cannot help.
// The pods whose deletion would violate one of pdbs are given back
// first, so they are victims only when the pod fits no other way.
func (p *DefaultPreemption) victimsOn(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo,
	nodes []*framework.NodeInfo, aware bool, pdbs []*kplanev1.PodDisruptionBudget) *candidate {
	prio := pod.Pod.GetSpec().GetPriority()
	sim := node.Clone()
	fits := func() bool { return state.RunFilterPlugins(ctx, pod, sim).IsSuccess() }
	if aware {
		// Count across the cluster as simulated: node replaced by sim.
		view := make([]*framework.NodeInfo, len(nodes))
		for i, n := range nodes {
			view[i] = n
			if n.Name == node.Name {
				view[i] = sim
			}
		}
		fits = func() bool {
			fork := state.Fork()
			fork.SetNodes(view)
			return fork.RunFilterPlugins(ctx, pod, sim).IsSuccess()
		}
	}
	var lower []*framework.PodInfo
	node.Pods(func(e *framework.PodInfo) bool {
		if e.Pod.GetSpec().GetPriority() < prio && e.Pod.GetMetadata().GetDeletionTimestamp() == nil {
			lower = append(lower, e)
		}
		return true
	})
	if len(lower) == 0 {
		return nil
	}
	for _, v := range lower {
		sim.RemovePod(v.UID)
	}
	if !fits() {
		return nil
	}
	// Give back the most important first; keep each that still lets the
	// pod fit (ties: the newest is given back first, so the oldest go).
	slices.SortFunc(lower, func(a, b *framework.PodInfo) int {
		if d := int(b.Pod.GetSpec().GetPriority()) - int(a.Pod.GetSpec().GetPriority()); d != 0 {
			return d
		}
		return b.Pod.GetMetadata().GetCreationTimestamp().AsTime().Compare(a.Pod.GetMetadata().GetCreationTimestamp().AsTime())
	})
	violating, nonViolating := splitByBudget(lower, pdbs)
	c := &candidate{node: node.Name}
	reprieve := func(v *framework.PodInfo) bool {
		sim.AddPod(v)
		if fits() {
			return true
		}
		sim.RemovePod(v.UID)
		c.victims = append(c.victims, v)
		return false
	}
	for _, v := range violating {
		if !reprieve(v) {
			c.violations++
		}
	}
	for _, v := range nonViolating {
		reprieve(v)
	}
	if len(c.victims) == 0 {
		return nil
	}
	return c
}

// splitByBudget divides pods (in order, most important first) into those
// whose deletion would violate a PodDisruptionBudget and the others,
// keeping the order within each (disruption.SplitViolating).
func splitByBudget(pods []*framework.PodInfo, pdbs []*kplanev1.PodDisruptionBudget) (violating, nonViolating []*framework.PodInfo) {
	if len(pdbs) == 0 {
		return nil, pods
	}
	raw := make([]*kplanev1.Pod, len(pods))
	byPod := make(map[*kplanev1.Pod]*framework.PodInfo, len(pods))
	for i, v := range pods {
		raw[i] = v.Pod
		byPod[v.Pod] = v
	}
	vs, ns := disruption.SplitViolating(raw, pdbs)
	for _, x := range vs {
		violating = append(violating, byPod[x])
	}
	for _, x := range ns {
		nonViolating = append(nonViolating, byPod[x])
	}
	return violating, nonViolating
}

// evict marks each victim with the DisruptionTarget condition, deletes it
// gracefully and records a Preempted Event; a victim already gone is
// skipped.
func (p *DefaultPreemption) evict(ctx context.Context, preemptor *framework.PodInfo, c *candidate) error {
	api := p.h.Client()
	sched := preemptor.Pod.GetSpec().GetSchedulerName()
	if sched == "" {
		sched = kplanev1.DefaultSchedulerName
	}
	for _, v := range c.victims {
		victim := proto.Clone(v.Pod).(*kplanev1.Pod) // v.Pod is shared with the informer cache
		_, _, err := controller.UpdateStatus(ctx, api, victim, func(cur *kplanev1.Pod) *kplanev1.Pod {
			if cur.GetMetadata().GetUid() != v.UID || cur.GetMetadata().GetDeletionTimestamp() != nil {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.Pod)
			if next.Status == nil {
				next.Status = &kplanev1.PodStatus{}
			}
			next.Status.Conditions = apiutil.SetStatusCondition(next.Status.Conditions, &kplanev1.Condition{
				Type: kplanev1.DisruptionTarget, Status: kplanev1.ConditionTrue, Reason: kplanev1.ReasonPreemptionByScheduler,
				Message:            sched + ": preempting to accommodate a higher priority pod",
				LastTransitionTime: timestamppb.New(time.Now()),
			})
			return next
		})
		if err != nil && !client.IsNotFound(err) {
			return fmt.Errorf("preempt %s: mark DisruptionTarget: %w", v.Key, err)
		}
		_, err = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: v.Namespace, Name: v.Pod.GetMetadata().GetName(),
			Preconditions: &kplanev1.Preconditions{Uid: v.UID}})
		if err != nil && !client.IsNotFound(err) && !client.IsConflict(err) {
			return fmt.Errorf("preempt %s: delete: %w", v.Key, err)
		}
		p.h.Event(kplanev1.MustWrap(victim), record.Normal, "Preempted",
			fmt.Sprintf("Preempted by pod %s on node %s", preemptor.UID, c.node))
		p.h.Logger().Info("preempted", "victim", v.Key, "preemptor", preemptor.Key, "node", c.node)
	}
	return nil
}
