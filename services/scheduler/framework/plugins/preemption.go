package plugins

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
// possible: on each node that failed for a reason eviction can fix (not
// UnschedulableAndUnresolvable), every lower-priority pod is removed in
// simulation and the filters run again; then the victims are given back
// one by one, most important first, as long as the pod still fits. Among
// the nodes, the one whose most important victim is least important
// wins, then the smallest sum of victim priorities, then the fewest
// victims. The pod is nominated to the node at once (the scheduler sets
// status.nominatedNodeName); the victims are handled off the scheduling
// cycle, as Kubernetes' asynchronous preemption does: each gets the
// DisruptionTarget condition, is deleted gracefully and gets a Preempted
// Event. The pod is scheduled once they are gone (their deletion is a
// cluster event that retries it). Pods of equal or higher priority are
// never victims, and a pod with preemptionPolicy Never preempts nothing.
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

	mu sync.Mutex
	// running are the preemptors whose victims are being evicted, by
	// uid: until that is done they do not preempt again (the victims'
	// deletion timestamps are not in the cache yet, so a new attempt
	// would pick more victims).
	running map[string]bool
}

// NewDefaultPreemption returns the plugin using h's client, logger,
// Events, goroutines and PodDisruptionBudget informer.
func NewDefaultPreemption(h framework.Handle) *DefaultPreemption {
	p := &DefaultPreemption{h: h, running: map[string]bool{}}
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

// PostFilter implements framework.PostFilterPlugin. When no node can be
// helped it returns an empty PostFilterResult with the Unschedulable
// status: the pod's earlier nomination, if any, no longer holds and the
// scheduler clears it. When the pod is not eligible (preemptionPolicy
// Never, or its earlier preemption is still under way) the result is nil
// and a nomination stays.
func (p *DefaultPreemption) PostFilter(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, nodes []*framework.NodeInfo, filtered framework.NodeToStatus) (*framework.PostFilterResult, *framework.Status) {
	if msg := p.notEligible(pod, nodes, filtered); msg != "" {
		return nil, framework.NewStatus(framework.Unschedulable, msg)
	}
	best, fit := p.selectCandidate(ctx, state, pod, nodes, filtered)
	if best == nil {
		return &framework.PostFilterResult{}, framework.NewStatus(framework.Unschedulable, fit.Error())
	}
	p.evictAsync(pod, best)
	return &framework.PostFilterResult{NominatedNodeName: best.node}, nil
}

// selectCandidate returns the node and victims preemption settles on, or
// nil and why no node can be helped.
func (p *DefaultPreemption) selectCandidate(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, nodes []*framework.NodeInfo,
	filtered framework.NodeToStatus) (*candidate, *framework.FitError) {
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
		return nil, fit
	}
	return best, nil
}

// notEligible says why pod may not preempt now ("" when it may), as
// Kubernetes' PodEligibleToPreemptOthers: preemptionPolicy Never; its
// victims are still being evicted; or it is nominated to a node that
// still fits it in principle and where lower-priority pods are
// terminating (it waits for them rather than evicting more).
func (p *DefaultPreemption) notEligible(pod *framework.PodInfo, nodes []*framework.NodeInfo, filtered framework.NodeToStatus) string {
	spec := pod.Pod.GetSpec()
	if spec.GetPreemptionPolicy() == kplanev1.PreemptNever {
		return "not eligible due to preemptionPolicy=Never."
	}
	p.mu.Lock()
	running := p.running[pod.UID]
	p.mu.Unlock()
	if running {
		return "not eligible: evicting the victims of its earlier preemption."
	}
	prio := spec.GetPriority()
	// The nomination is in the cache at once; the status may lag.
	nominated := pod.Pod.GetStatus().GetNominatedNodeName()
	for _, n := range nodes {
		n.NominatedPods(func(q *framework.PodInfo) {
			if q.UID == pod.UID {
				nominated = n.Name
			}
		})
	}
	if nominated == "" || filtered[nominated].Code() == framework.UnschedulableAndUnresolvable {
		// A nominated node that can no longer take the pod whatever is
		// evicted is given up: preempt elsewhere.
		return ""
	}
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
			return "not eligible due to a terminating pod on the nominated node."
		}
	}
	return ""
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

// evictAsync evicts c's victims in a goroutine of the scheduler's term
// (Handle.Go): the scheduling cycle goes on with the next pod meanwhile.
// Until it is done the preemptor is not eligible to preempt again.
func (p *DefaultPreemption) evictAsync(preemptor *framework.PodInfo, c *candidate) {
	p.mu.Lock()
	if p.running == nil {
		p.running = map[string]bool{}
	}
	p.running[preemptor.UID] = true
	p.mu.Unlock()
	p.h.Go(func(ctx context.Context) {
		defer func() {
			p.mu.Lock()
			delete(p.running, preemptor.UID)
			p.mu.Unlock()
		}()
		if err := p.evict(ctx, preemptor, c); err != nil {
			// The preemptor is retried when the cluster changes or after
			// its back-off; it may preempt again then.
			p.h.Logger().Warn("preemption: evicting victims failed", "preemptor", preemptor.Key, "node", c.node, "error", err)
		}
	})
}

// evict marks each victim with the DisruptionTarget condition (written
// on a fresh read of the victim, never on the cache's trimmed copy),
// deletes it gracefully and records a Preempted Event; a victim already
// gone is skipped.
func (p *DefaultPreemption) evict(ctx context.Context, preemptor *framework.PodInfo, c *candidate) error {
	api := p.h.Client()
	sched := preemptor.Pod.GetSpec().GetSchedulerName()
	if sched == "" {
		sched = kplanev1.DefaultSchedulerName
	}
	for _, v := range c.victims {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("preempt %s: %w", v.Key, err)
		}
		// The status write starts from the victim as the apiserver has
		// it, not from v.Pod: the cache holds assigned pods trimmed to
		// what scheduling reads, and writing that copy back while its
		// resourceVersion is current would drop the rest of the status
		// (the node agent's conditions, container statuses, IPs).
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: v.Namespace, Name: v.Pod.GetMetadata().GetName()})
		if client.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("preempt %s: read: %w", v.Key, err)
		}
		victim := resp.GetObject().GetPod()
		_, _, err = controller.UpdateStatus(ctx, api, victim, func(cur *kplanev1.Pod) *kplanev1.Pod {
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
