package statefulset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/pkg/record"
	"github.com/kplane/kplane/pkg/rollout"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// setController reconciles StatefulSets. Its keys are the sets' "ns/name".
type setController struct {
	api      *client.Client
	log      hclog.Logger
	recorder *record.Recorder
	ctx      *app.Context
	sets     *informer.Informer
	pods     *informer.Informer
	claims   *informer.Informer
	history  *controller.Revisions
	exp      *controller.Expectations
	control  *controller.ObjectControl
	// written holds the sets and revisions this controller wrote until
	// the caches show them, so a reconcile woken early sees its own
	// status (currentRevision, collisionCount) and revision numbers.
	written *controller.MutationCache
	now     func() time.Time
}

// NewService returns statefulsetctl: the binary's main runs it with app.Main.
func NewService() app.Service { return newController().service() }

func newController() *setController {
	return &setController{exp: controller.NewExpectations(0), written: controller.NewMutationCache(), now: time.Now}
}

func (r *setController) service() app.Service {
	return app.Service{
		Name:          "statefulsetctl",
		HealthAddr:    ":10265",
		LeaderElected: true,
		Workers:       5,
		Watches: []app.Watch{
			{Kind: kindStatefulSet},
			{Kind: kindControllerRevision, MapToKey: controller.OwnerKeys(kindStatefulSet)},
			{Kind: kindPVC, MapToKey: r.claimKeys},
		},
		Setup: r.setup,
	}
}

func (r *setController) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	r.recorder = record.New(c.Client, "statefulset-controller", c.Identity, c.Logger)
	r.sets = c.Informers.ForKind(kindStatefulSet)
	r.pods = c.Informers.ForKind("Pod")
	r.claims = c.Informers.ForKind(kindPVC)
	r.history = &controller.Revisions{API: c.Client, Informer: c.Informers.ForKind(kindControllerRevision), OwnerKind: kindStatefulSet, Written: r.written}
	r.control = &controller.ObjectControl{API: c.Client, Expectations: r.exp, OwnerKey: func(o *kplanev1.Object) (string, bool) {
		return controller.OwnerKey(o, kindStatefulSet)
	}}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_statefulsetctl_pod_create_calls_total", Help: "Pod create calls made, successful or not.", Value: &r.control.Counts.Creates},
		app.Counter{Name: "kplane_statefulsetctl_pod_delete_calls_total", Help: "Pod delete calls made, successful or not.", Value: &r.control.Counts.Deletes},
	); err != nil {
		return nil, err
	}
	// Pod events count against the expectations before the set is
	// queued, so the reconcile they wake sees its own creations.
	r.pods.AddEventHandler(r.control.Handler(r.podKeys, r.ctx.Enqueue, nil))
	r.sets.AddEventHandler(informer.Handler{OnDelete: func(obj any) {
		if o, ok := informer.ObjectOf(obj); ok {
			r.exp.Delete(o.Key())
			r.written.Forget(o.Key())
		}
	}})
	return r, nil
}

// podKeys maps a pod to its StatefulSet, or (an orphan) to the sets in
// its namespace that select it and whose ordinal names it has, which may
// adopt it.
func (r *setController) podKeys(pod *kplanev1.Object) []string {
	if k, ok := controller.OwnerKey(pod, kindStatefulSet); ok {
		return []string{k}
	}
	if controller.ControllerRef(pod.Meta()) != nil || r.sets == nil {
		return nil
	}
	var keys []string
	objs, _ := r.sets.Store().ByIndex(informer.NamespaceIndex, pod.Meta().GetNamespace())
	for _, o := range objs {
		if r.selects(o.GetStatefulSet(), pod) {
			keys = append(keys, o.Key())
		}
	}
	return keys
}

// claimKeys maps a claim to the sets whose claim template and ordinal
// names it has: a pod waits for its claims, and a scale-down with
// whenScaled Delete for the claims of condemned ordinals.
func (r *setController) claimKeys(c *kplanev1.Object) []string {
	if r.sets == nil {
		return nil
	}
	var keys []string
	objs, _ := r.sets.Store().ByIndex(informer.NamespaceIndex, c.Meta().GetNamespace())
	for _, o := range objs {
		if _, ok := ClaimOrdinal(o.GetStatefulSet(), c.Meta().GetName()); ok {
			keys = append(keys, o.Key())
		}
	}
	return keys
}

// selects reports whether pod is one of ss's identities: selected by it
// and named <set>-<ordinal>.
func (r *setController) selects(ss *kplanev1.StatefulSet, pod *kplanev1.Object) bool {
	sel, err := labels.FromLabelSelector(ss.GetSpec().GetSelector())
	if err != nil || sel.Empty() || !sel.Matches(pod.Meta().GetLabels()) {
		return false
	}
	_, ok := Ordinal(ss.GetMetadata().GetName(), pod.Meta().GetName())
	return ok
}

// Reconcile implements app.Reconciler.
func (r *setController) Reconcile(ctx context.Context, key string) error {
	cached, ok := r.sets.Store().Get(key)
	if !ok {
		r.exp.Delete(key)
		r.written.Forget(key)
		return nil
	}
	obj := r.written.Newest(cached)
	ss := obj.GetStatefulSet()
	if ss.GetMetadata().GetDeletionTimestamp() != nil {
		return nil // the garbage collector removes its pods and revisions
	}
	b, err := BoundsOf(ss)
	if err != nil {
		r.recorder.Eventf(ctx, obj, record.Warning, "InvalidStrategy", "%v", err)
		return nil
	}
	if sel, err := labels.FromLabelSelector(ss.GetSpec().GetSelector()); err != nil || sel.Empty() {
		r.recorder.Eventf(ctx, obj, record.Warning, "SelectingAll", "This statefulset's selector is invalid or selects all pods: %v", err)
		return nil
	}
	// Sample the cache revision before reading pods: a creation observed
	// in between then shows in the pods read, never the other way round.
	manage, err := r.control.SatisfiedAt(ctx, key, r.pods)
	if err != nil {
		return err
	}

	current, update, collision, err := r.revisionsFor(ctx, obj)
	if err != nil || update == nil {
		return err
	}
	pods, err := r.claimPods(ctx, obj)
	if err != nil {
		return err
	}

	if err := r.repairIdentities(ctx, ss, pods); err != nil {
		return err
	}
	var plan Plan
	if manage {
		plan = Decide(b, pods, update.GetMetadata().GetName(), r.now())
		if err := r.execute(ctx, obj, plan, current, update); err != nil {
			return err
		}
		if err := r.retainClaims(ctx, ss, pods); err != nil {
			return err
		}
	}
	st := Status(ss, b, pods, current.GetMetadata().GetName(), update.GetMetadata().GetName(), collision, r.now())
	if err := r.updateStatus(ctx, obj, st); err != nil {
		return err
	}
	if err := r.pruneHistory(ctx, obj, pods, st); err != nil {
		return err
	}
	if plan.Recheck > 0 {
		return app.RequeueAfter(plan.Recheck)
	}
	return nil
}

// claimPods settles the set's pods (adopting orphans named for its
// ordinals, releasing pods it no longer selects) and returns them by
// ordinal.
func (r *setController) claimPods(ctx context.Context, obj *kplanev1.Object) (map[int32]*kplanev1.Pod, error) {
	ss := obj.GetStatefulSet()
	m := ss.GetMetadata()
	sel, _ := labels.FromLabelSelector(ss.GetSpec().GetSelector())
	candidates := r.pods.Store().ClaimCandidates(m.GetNamespace(), m.GetUid(), sel)
	informer.SortByKey(candidates)
	ref := &kplanev1.OwnerReference{ApiVersion: kplanev1.APIVersion(kindStatefulSet), Kind: kindStatefulSet,
		Name: m.GetName(), Uid: m.GetUid(), Controller: true, BlockOwnerDeletion: true}
	mine, err := controller.Claim(ctx, r.api, obj, ref, candidates, func(o *kplanev1.Object) bool { return r.selects(ss, o) })
	if err != nil {
		return nil, err
	}
	pods := map[int32]*kplanev1.Pod{}
	for _, o := range mine {
		if i, ok := Ordinal(m.GetName(), o.Meta().GetName()); ok {
			pods[i] = o.GetPod()
		}
	}
	return pods, nil
}

// repairIdentities gives a pod that lacks its identity labels (an adopted
// orphan) its pod-name and pod-index, as Kubernetes does, so a Service
// selecting one identity finds it. Hostname and subdomain are fixed once
// a pod exists; a pod created with other ones keeps them until replaced.
func (r *setController) repairIdentities(ctx context.Context, ss *kplanev1.StatefulSet, pods map[int32]*kplanev1.Pod) error {
	var errs []error
	for i, p := range pods {
		if terminating(p) || !IdentityLabelsMissing(p, i) {
			continue
		}
		got, _, err := controller.Update(ctx, r.api, p, func(cur *kplanev1.Pod) *kplanev1.Pod {
			if !IdentityLabelsMissing(cur, i) {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.Pod)
			SetIdentityLabels(next, i)
			return next
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("label pod %s with its identity: %w", p.GetMetadata().GetName(), err))
			continue
		}
		if got != nil {
			pods[i] = got
			r.log.Info("labelled pod with its identity", "statefulset", ss.GetMetadata().GetNamespace()+"/"+ss.GetMetadata().GetName(), "pod", got.GetMetadata().GetName())
		}
	}
	return errors.Join(errs...)
}

// execute carries out the plan: claims and pods for the ordinals to
// create, then the deletions.
func (r *setController) execute(ctx context.Context, obj *kplanev1.Object, plan Plan, current, update *kplanev1.ControllerRevision) error {
	ss := obj.GetStatefulSet()
	key := obj.Key()
	if plan.Waiting != "" {
		r.log.Debug("statefulset waits", "statefulset", key, "why", plan.Waiting)
	}
	var create []*kplanev1.Pod
	for _, i := range plan.Create {
		ready, err := r.ensureClaims(ctx, ss, i)
		if err != nil {
			r.recorder.Eventf(ctx, obj, record.Warning, "FailedCreate", "create Claim for Pod %s in StatefulSet %s failed: %v", PodName(ss.GetMetadata().GetName(), i), ss.GetMetadata().GetName(), err)
			return err
		}
		if !ready {
			continue // a claim of this ordinal is still being deleted
		}
		rev := update
		if FromCurrent(ss, i) {
			rev = current
		}
		t, err := rollout.DecodeTemplate(rev)
		if err != nil {
			return err
		}
		create = append(create, NewPod(ss, t, rev.GetMetadata().GetName(), i))
	}
	if len(create) > 0 {
		var mu sync.Mutex
		next := 0
		n, err := r.control.Create(ctx, key, len(create), func() (*kplanev1.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			p := create[next]
			next++
			return kplanev1.Wrap(p)
		})
		if n > 0 {
			r.log.Info("created pods", "statefulset", key, "count", n)
		}
		for _, p := range create[:min(n, len(create))] {
			r.recorder.Eventf(ctx, obj, record.Normal, "SuccessfulCreate", "create Pod %s in StatefulSet %s successful", p.GetMetadata().GetName(), ss.GetMetadata().GetName())
		}
		if err != nil {
			r.recorder.Eventf(ctx, obj, record.Warning, "FailedCreate", "create Pod in StatefulSet %s failed: %v", ss.GetMetadata().GetName(), err)
			return fmt.Errorf("create pods of %s: %w", key, err)
		}
	}
	if len(plan.Delete) > 0 {
		victims := make([]*kplanev1.Object, len(plan.Delete))
		for i, p := range plan.Delete {
			victims[i] = kplanev1.MustWrap(p)
		}
		n, err := r.control.Delete(ctx, key, victims, client.DeleteOptions{})
		for _, p := range plan.Delete[:min(n, len(plan.Delete))] {
			r.recorder.Eventf(ctx, obj, record.Normal, "SuccessfulDelete", "delete Pod %s in StatefulSet %s successful", p.GetMetadata().GetName(), ss.GetMetadata().GetName())
		}
		if n > 0 {
			r.log.Info("deleted pods", "statefulset", key, "count", n)
		}
		if err != nil {
			r.recorder.Eventf(ctx, obj, record.Warning, "FailedDelete", "delete Pod in StatefulSet %s failed: %v", ss.GetMetadata().GetName(), err)
			return fmt.Errorf("delete pods of %s: %w", key, err)
		}
	}
	return nil
}

// ensureClaims creates the claims of ordinal i that are missing (they
// must exist before the pod, so the data follows the identity). It
// reports false when a claim is being deleted: the pod waits for it to
// go and for its successor.
func (r *setController) ensureClaims(ctx context.Context, ss *kplanev1.StatefulSet, i int32) (bool, error) {
	ns := ss.GetMetadata().GetNamespace()
	ready := true
	for _, ct := range ss.GetSpec().GetVolumeClaimTemplates() {
		name := ClaimName(ct.GetMetadata().GetName(), ss.GetMetadata().GetName(), i)
		if o, ok := r.claims.Store().GetByName(ns, name); ok {
			if o.Meta().GetDeletionTimestamp() != nil {
				ready = false
			}
			continue
		}
		_, err := r.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(NewClaim(ss, ct, i))})
		switch {
		case err == nil:
			r.log.Info("created claim", "statefulset", ns+"/"+ss.GetMetadata().GetName(), "claim", name)
		case client.IsAlreadyExists(err):
			// Created before this cache saw it (or by the user): it is the claim.
		default:
			return false, fmt.Errorf("create claim %s/%s: %w", ns, name, err)
		}
	}
	return ready, nil
}

// retainClaims applies persistentVolumeClaimRetentionPolicy: the claims
// of every ordinal carry an owner reference to the set exactly when
// whenDeleted is Delete (the garbage collector then removes them with
// the set), and with whenScaled Delete the claims of an ordinal at or
// above replicas are deleted once its pod is gone.
func (r *setController) retainClaims(ctx context.Context, ss *kplanev1.StatefulSet, pods map[int32]*kplanev1.Pod) error {
	if len(ss.GetSpec().GetVolumeClaimTemplates()) == 0 {
		return nil
	}
	m := ss.GetMetadata()
	objs, _ := r.claims.Store().ByIndex(informer.NamespaceIndex, m.GetNamespace())
	want := ClaimOwnedBySet(ss)
	scaledDelete := ss.GetSpec().GetPersistentVolumeClaimRetentionPolicy().GetWhenScaled() == kplanev1.RetentionPolicyDelete
	var errs []error
	for _, o := range objs {
		i, ok := ClaimOrdinal(ss, o.Meta().GetName())
		if !ok || o.Meta().GetDeletionTimestamp() != nil {
			continue
		}
		if scaledDelete && i >= ss.GetSpec().GetReplicas() && pods[i] == nil {
			if _, deleted, err := controller.DeleteIfSameUID(ctx, r.api, o, client.DeleteOptions{}); err != nil {
				errs = append(errs, err)
			} else if deleted {
				r.log.Info("deleted claim of a removed ordinal", "statefulset", m.GetNamespace()+"/"+m.GetName(), "claim", o.Meta().GetName())
			}
			continue
		}
		has := slices.ContainsFunc(o.Meta().GetOwnerReferences(), func(ref *kplanev1.OwnerReference) bool { return ref.GetUid() == m.GetUid() })
		if has == want {
			continue
		}
		_, _, err := controller.Update(ctx, r.api, o, func(cur *kplanev1.Object) *kplanev1.Object {
			refs := cur.Meta().GetOwnerReferences()
			h := slices.ContainsFunc(refs, func(ref *kplanev1.OwnerReference) bool { return ref.GetUid() == m.GetUid() })
			if h == want {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.Object)
			if want {
				next.Meta().OwnerReferences = append(next.Meta().OwnerReferences, SetRef(ss))
			} else {
				next.Meta().OwnerReferences = slices.DeleteFunc(next.Meta().OwnerReferences, func(ref *kplanev1.OwnerReference) bool { return ref.GetUid() == m.GetUid() })
			}
			return next
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// revisionsFor syncs the update revision (the snapshot of spec.template)
// and finds the current one (status.currentRevision while it exists). A
// hash collision raises collisionCount; the next reconcile tries the next
// name.
func (r *setController) revisionsFor(ctx context.Context, obj *kplanev1.Object) (current, update *kplanev1.ControllerRevision, collision *int32, err error) {
	ss := obj.GetStatefulSet()
	if st := ss.GetStatus(); st != nil {
		collision = st.CollisionCount
	}
	update, err = r.history.Sync(ctx, obj, ss.GetSpec().GetTemplate(), collision)
	if errors.Is(err, controller.ErrRevisionCollision) {
		c := ss.GetStatus().GetCollisionCount() + 1
		next := &kplanev1.StatefulSetStatus{}
		if ss.GetStatus() != nil {
			next = proto.Clone(ss.GetStatus()).(*kplanev1.StatefulSetStatus)
		}
		next.CollisionCount = &c
		if uerr := r.updateStatus(ctx, obj, next); uerr != nil {
			return nil, nil, collision, uerr
		}
		return nil, nil, &c, fmt.Errorf("statefulset %s: %w; collisionCount is now %d", obj.Key(), err, c)
	}
	if err != nil {
		return nil, nil, collision, err
	}
	current = update
	if name := ss.GetStatus().GetCurrentRevision(); name != "" {
		for _, cr := range r.history.Owned(obj) {
			if cr.GetMetadata().GetName() == name {
				current = cr
			}
		}
	}
	return current, update, collision, nil
}

// pruneHistory deletes the revisions beyond revisionHistoryLimit that no
// pod runs and that are neither current nor update revision.
func (r *setController) pruneHistory(ctx context.Context, obj *kplanev1.Object, pods map[int32]*kplanev1.Pod, st *kplanev1.StatefulSetStatus) error {
	live := map[string]bool{st.GetCurrentRevision(): true, st.GetUpdateRevision(): true}
	for _, p := range pods {
		live[Revision(p)] = true
	}
	return r.history.Prune(ctx, obj, live, obj.GetStatefulSet().GetSpec().GetRevisionHistoryLimit())
}

// updateStatus writes st when it differs from the stored status.
func (r *setController) updateStatus(ctx context.Context, obj *kplanev1.Object, st *kplanev1.StatefulSetStatus) error {
	if proto.Equal(obj.GetStatefulSet().GetStatus(), st) {
		return nil
	}
	got, _, err := controller.UpdateStatus(ctx, r.api, obj, func(cur *kplanev1.Object) *kplanev1.Object {
		if proto.Equal(cur.GetStatefulSet().GetStatus(), st) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Object)
		s := proto.Clone(st).(*kplanev1.StatefulSetStatus)
		if cur.Meta().GetGeneration() != obj.Meta().GetGeneration() {
			// Decided on an older spec: do not claim the newer one observed.
			s.ObservedGeneration = cur.GetStatefulSet().GetStatus().GetObservedGeneration()
		}
		next.GetStatefulSet().Status = s
		return next
	})
	if err != nil {
		return fmt.Errorf("update status of statefulset %s: %w", obj.Key(), err)
	}
	if got != nil {
		r.written.Wrote(got)
	}
	return nil
}
