// Package disruption is the PodDisruptionBudget controller, as
// Kubernetes' disruption controller: for each budget it counts the pods
// its selector picks, the pods expected (the budget's own count for a
// number minAvailable; the sum of the owners' spec.replicas for
// maxUnavailable and percents: ReplicaSet, ReplicationController,
// Deployment, StatefulSet), the healthy ones (Ready, not being deleted,
// not just evicted) and the healthy ones needed, and writes
// status.disruptionsAllowed and the DisruptionAllowed condition with
// observedGeneration. Evicted pods stay in status.disruptedPods until
// they are gone or being deleted, or for at most
// disruption.DisruptedPodTimeout; while one is there, it does not count
// as healthy. A budget whose expected pods cannot be computed (a pod
// with no controller, an owner not found) allows no disruption
// (SyncFailed), as in Kubernetes.
package disruption

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	pdbrules "github.com/kplane/kplane/pkg/disruption"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/rollout"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	kindPDB = "PodDisruptionBudget"
	kindPod = "Pod"
)

// ownerKinds are the controllers whose spec.replicas give the expected
// pods of a budget with maxUnavailable or a percent.
var ownerKinds = []string{"ReplicaSet", "ReplicationController", "Deployment", "StatefulSet"}

type ctrl struct {
	api    *client.Client
	log    hclog.Logger
	pdbs   *informer.Informer
	pods   *informer.Informer
	owners map[string]*informer.Informer
	// now is the clock; tests leave it to time.Now.
	now func() time.Time

	statusWrites atomic.Int64
}

// NewService returns disruptionctl: the binary's main runs it with app.Main.
func NewService() app.Service { return (&ctrl{now: time.Now}).service() }

func (r *ctrl) service() app.Service {
	watches := []app.Watch{
		{Kind: kindPDB, MapToKey: func(o *kplanev1.Object) []string { return []string{o.Key()} }},
		{Kind: kindPod, MapToKey: r.podKeys},
	}
	for _, k := range ownerKinds {
		// A changed scale changes the expected pods of the budgets of
		// its namespace; which ones is not worth an index.
		watches = append(watches, app.Watch{Kind: k, MapToKey: r.namespaceKeys})
	}
	return app.Service{
		Name:          "disruptionctl",
		HealthAddr:    ":10267",
		LeaderElected: true,
		Workers:       2,
		Watches:       watches,
		Setup:         r.setup,
	}
}

func (r *ctrl) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log = c.Client, c.Logger
	r.pdbs = c.Informers.ForKind(kindPDB)
	r.pods = c.Informers.ForKind(kindPod)
	r.owners = map[string]*informer.Informer{}
	for _, k := range ownerKinds {
		r.owners[k] = c.Informers.ForKind(k)
	}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_disruptionctl_status_writes_total", Help: "PodDisruptionBudget status updates written.", Value: &r.statusWrites},
	); err != nil {
		return nil, err
	}
	return r, nil
}

// podKeys wakes the budgets selecting the pod.
func (r *ctrl) podKeys(o *kplanev1.Object) []string {
	if r.pdbs == nil {
		return nil
	}
	var keys []string
	for _, b := range r.budgetsIn(o.Meta().GetNamespace()) {
		if pdbrules.Selects(b, o.GetPod()) {
			keys = append(keys, kplanev1.MetaKey(b.GetMetadata().GetNamespace(), b.GetMetadata().GetName()))
		}
	}
	return keys
}

func (r *ctrl) namespaceKeys(o *kplanev1.Object) []string {
	if r.pdbs == nil {
		return nil
	}
	var keys []string
	for _, b := range r.budgetsIn(o.Meta().GetNamespace()) {
		keys = append(keys, kplanev1.MetaKey(b.GetMetadata().GetNamespace(), b.GetMetadata().GetName()))
	}
	return keys
}

func (r *ctrl) budgetsIn(ns string) []*kplanev1.PodDisruptionBudget {
	var out []*kplanev1.PodDisruptionBudget
	for _, o := range r.pdbs.Store().ListBySelector(ns, nil) {
		out = append(out, o.GetPodDisruptionBudget())
	}
	return out
}

// Reconcile implements app.Reconciler for the budget "namespace/name".
func (r *ctrl) Reconcile(ctx context.Context, key string) error {
	o, ok := r.pdbs.Store().Get(key)
	if !ok || o.Meta().GetDeletionTimestamp() != nil {
		return nil
	}
	pdb := o.GetPodDisruptionBudget()
	var pods []*kplanev1.Pod
	for _, p := range r.pods.Store().ListBySelector(pdb.GetMetadata().GetNamespace(), nil) {
		if pdbrules.Selects(pdb, p.GetPod()) {
			pods = append(pods, p.GetPod())
		}
	}
	now := r.now()
	st, recheck := r.compute(pdb, pods, now)
	if err := r.writeStatus(ctx, o, st); err != nil {
		return err
	}
	if recheck > 0 {
		// An evicted pod that is still there stops counting as disrupted
		// at its deadline: look again then.
		return app.RequeueAfter(recheck)
	}
	return nil
}

// compute is the budget's status for pods (those its selector picks) at
// now, and how long until an entry of disruptedPods expires (0: none).
func (r *ctrl) compute(pdb *kplanev1.PodDisruptionBudget, pods []*kplanev1.Pod, now time.Time) (*kplanev1.PodDisruptionBudgetStatus, time.Duration) {
	old := pdb.GetStatus()
	disrupted, recheck := disruptedPods(old.GetDisruptedPods(), pods, now)
	st := &kplanev1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.GetMetadata().GetGeneration(),
		DisruptedPods:      disrupted,
	}
	expected, desired, err := r.expectedPods(pdb, pods)
	if err != nil {
		// Kubernetes' failSafe: keep the counts, allow nothing.
		r.log.Warn("cannot compute the expected pods of a budget", "budget", pdb.GetMetadata().GetNamespace()+"/"+pdb.GetMetadata().GetName(), "error", err)
		st.ExpectedPods, st.CurrentHealthy, st.DesiredHealthy = old.GetExpectedPods(), old.GetCurrentHealthy(), old.GetDesiredHealthy()
		c := pdbrules.AllowedCondition(0, now)
		c.Reason, c.Message = kplanev1.ReasonSyncFailed, err.Error()
		st.Conditions = apiutil.SetStatusCondition(old.GetConditions(), c)
		return st, recheck
	}
	healthy := int32(0)
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if _, ok := disrupted[p.GetMetadata().GetName()]; ok {
			continue
		}
		if apiutil.IsPodReady(p) {
			healthy++
		}
	}
	st.ExpectedPods, st.CurrentHealthy, st.DesiredHealthy = expected, healthy, desired
	allowed := healthy - desired
	if expected <= 0 || allowed < 0 {
		allowed = 0
	}
	st.DisruptionsAllowed = allowed
	st.Conditions = apiutil.SetStatusCondition(old.GetConditions(), pdbrules.AllowedCondition(allowed, now))
	return st, recheck
}

// disruptedPods keeps the entries of pods still there, not being
// deleted, and evicted less than DisruptedPodTimeout ago, and says when
// the first kept one expires.
func disruptedPods(in map[string]*timestamppb.Timestamp, pods []*kplanev1.Pod, now time.Time) (map[string]*timestamppb.Timestamp, time.Duration) {
	if len(in) == 0 {
		return nil, 0
	}
	byName := map[string]*kplanev1.Pod{}
	for _, p := range pods {
		byName[p.GetMetadata().GetName()] = p
	}
	out := map[string]*timestamppb.Timestamp{}
	var recheck time.Duration
	for name, at := range in {
		p, ok := byName[name]
		if !ok || p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		left := at.AsTime().Add(pdbrules.DisruptedPodTimeout).Sub(now)
		if left <= 0 {
			continue
		}
		out[name] = at
		if recheck == 0 || left < recheck {
			recheck = left
		}
	}
	if len(out) == 0 {
		return nil, recheck
	}
	return out, recheck
}

// expectedPods is how many pods the budget counts on and how many of
// them must stay healthy, as Kubernetes' getExpectedPodCount: a number
// minAvailable counts the pods selected; maxUnavailable and a percent
// minAvailable count the owners' scale.
func (r *ctrl) expectedPods(pdb *kplanev1.PodDisruptionBudget, pods []*kplanev1.Pod) (expected, desired int32, err error) {
	s := pdb.GetSpec()
	switch {
	case s.GetMaxUnavailable() != nil:
		if expected, err = r.expectedScale(pods); err != nil {
			return 0, 0, err
		}
		maxUnavailable, err := rollout.Scaled(s.GetMaxUnavailable(), expected, true)
		if err != nil {
			return 0, 0, fmt.Errorf("spec.maxUnavailable: %w", err)
		}
		return expected, max(expected-maxUnavailable, 0), nil
	case s.GetMinAvailable() != nil && !s.GetMinAvailable().IsString():
		return int32(len(pods)), s.GetMinAvailable().GetIntVal(), nil
	case s.GetMinAvailable() != nil:
		if expected, err = r.expectedScale(pods); err != nil {
			return 0, 0, err
		}
		minAvailable, err := rollout.Scaled(s.GetMinAvailable(), expected, true)
		if err != nil {
			return 0, 0, fmt.Errorf("spec.minAvailable: %w", err)
		}
		return expected, minAvailable, nil
	}
	return int32(len(pods)), 0, nil
}

// expectedScale sums spec.replicas over the distinct controllers of
// pods; a ReplicaSet a Deployment controls counts as its Deployment.
func (r *ctrl) expectedScale(pods []*kplanev1.Pod) (int32, error) {
	seen := map[string]bool{}
	var total int32
	for _, p := range pods {
		ref := controller.ControllerRef(p.GetMetadata())
		if ref == nil {
			return 0, fmt.Errorf("found no controller ref for pod %q", p.GetMetadata().GetName())
		}
		owner, err := r.scaleOwner(p.GetMetadata().GetNamespace(), ref)
		if err != nil {
			return 0, fmt.Errorf("pod %q: %w", p.GetMetadata().GetName(), err)
		}
		if seen[owner.Meta().GetUid()] {
			continue
		}
		seen[owner.Meta().GetUid()] = true
		total += replicasOf(owner)
	}
	return total, nil
}

// scaleOwner finds the object whose scale governs a pod controlled by
// ref: the controller itself, or the Deployment above its ReplicaSet.
func (r *ctrl) scaleOwner(ns string, ref *kplanev1.OwnerReference) (*kplanev1.Object, error) {
	inf, ok := r.owners[ref.GetKind()]
	if !ok {
		return nil, fmt.Errorf("controller %s %q has no scale kplane knows", ref.GetKind(), ref.GetName())
	}
	o, ok := inf.Store().GetByName(ns, ref.GetName())
	if !ok || o.Meta().GetUid() != ref.GetUid() {
		return nil, fmt.Errorf("controller %s %q not found", ref.GetKind(), ref.GetName())
	}
	if ref.GetKind() == "ReplicaSet" {
		if up := controller.ControllerRef(o.Meta()); up != nil && up.GetKind() == "Deployment" {
			return r.scaleOwner(ns, up)
		}
	}
	return o, nil
}

func replicasOf(o *kplanev1.Object) int32 {
	switch {
	case o.GetReplicaSet() != nil:
		return o.GetReplicaSet().GetSpec().GetReplicas()
	case o.GetReplicationController() != nil:
		return o.GetReplicationController().GetSpec().GetReplicas()
	case o.GetDeployment() != nil:
		return o.GetDeployment().GetSpec().GetReplicas()
	case o.GetStatefulSet() != nil:
		return o.GetStatefulSet().GetSpec().GetReplicas()
	}
	return 0
}

// writeStatus writes st unless the budget already has it, as a CAS that
// recomputes nothing: a conflicting write (an eviction taking a
// disruption) requeues through its own watch event.
func (r *ctrl) writeStatus(ctx context.Context, o *kplanev1.Object, st *kplanev1.PodDisruptionBudgetStatus) error {
	if proto.Equal(o.GetPodDisruptionBudget().GetStatus(), st) {
		return nil
	}
	_, wrote, err := controller.UpdateStatus(ctx, r.api, o, func(cur *kplanev1.Object) *kplanev1.Object {
		if cur.Meta().GetResourceVersion() != o.Meta().GetResourceVersion() {
			// Changed since the cache read (an eviction took a
			// disruption): decide again on the fresh budget.
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Object)
		next.GetPodDisruptionBudget().Status = st
		return next
	})
	if err != nil {
		return fmt.Errorf("update status of budget %s: %w", o.Key(), err)
	}
	if wrote {
		r.statusWrites.Add(1)
	}
	return nil
}
