// Package deployment is deploymentctl's control loop: it runs each
// Deployment through ReplicaSets named <deployment>-<pod-template-hash>,
// one per template, and moves pods from the old sets to the new one
// within maxSurge and maxUnavailable (or all at once for Recreate). The
// ReplicaSets' pods are replicactl's business; this controller only sets
// the ReplicaSets' sizes.
package deployment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// deploymentController reconciles Deployments.
type deploymentController struct {
	api         *client.Client
	log         hclog.Logger
	recorder    *record.Recorder
	deployments *informer.Informer
	sets        *informer.Informer
	pods        *informer.Informer
	// written holds the Deployments and ReplicaSets this controller wrote
	// until the caches show them: a reconcile woken before the watch
	// event must size the sets from its own last write, not the one
	// before (it would scale twice), and must see its own status.
	written *controller.MutationCache
	now     func() time.Time
}

// NewService returns deploymentctl: the binary's main runs it with app.Main.
func NewService() app.Service { return newController().service() }

func newController() *deploymentController {
	return &deploymentController{written: controller.NewMutationCache(), now: time.Now}
}

func (r *deploymentController) service() app.Service {
	return app.Service{
		Name:          "deploymentctl",
		HealthAddr:    ":10264",
		LeaderElected: true,
		Workers:       5,
		Watches: []app.Watch{
			{Kind: kindDeployment},
			{Kind: kindReplicaSet, MapToKey: r.setKeys},
			{Kind: "Pod", MapToKey: r.podKeys},
		},
		Setup: r.setup,
	}
}

func (r *deploymentController) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log = c.Client, c.Logger
	r.recorder = record.New(c.Client, "deployment-controller", c.Identity, c.Logger)
	r.deployments = c.Informers.ForKind(kindDeployment)
	r.sets = c.Informers.ForKind(kindReplicaSet)
	r.pods = c.Informers.ForKind("Pod")
	return r, nil
}

// setKeys maps a ReplicaSet to its Deployment, or (an orphan) to every
// Deployment in its namespace whose selector matches it, which may adopt it.
func (r *deploymentController) setKeys(rs *kplanev1.Object) []string {
	meta := rs.Meta()
	if ref := controller.ControllerRef(meta); ref != nil {
		if ref.GetKind() == kindDeployment {
			return []string{kplanev1.MetaKey(meta.GetNamespace(), ref.GetName())}
		}
		return nil
	}
	if r.deployments == nil {
		return nil
	}
	var keys []string
	objs, _ := r.deployments.Store().ByIndex(informer.NamespaceIndex, meta.GetNamespace())
	for _, o := range objs {
		sel, err := labels.FromLabelSelector(o.GetDeployment().GetSpec().GetSelector())
		if err == nil && !sel.Empty() && sel.Matches(meta.GetLabels()) {
			keys = append(keys, o.Key())
		}
	}
	return keys
}

// podKeys maps a pod to the Deployment of its ReplicaSet: the rollout
// waits on pods (availability, Recreate's old pods gone).
func (r *deploymentController) podKeys(pod *kplanev1.Object) []string {
	ref := controller.ControllerRef(pod.Meta())
	if ref == nil || ref.GetKind() != kindReplicaSet || r.sets == nil {
		return nil
	}
	rs, ok := r.sets.Store().GetByName(pod.Meta().GetNamespace(), ref.GetName())
	if !ok {
		return nil
	}
	return r.setKeys(rs)
}

// Reconcile implements app.Reconciler.
func (r *deploymentController) Reconcile(ctx context.Context, key string) error {
	cached, ok := r.deployments.Store().Get(key)
	if !ok {
		r.written.Forget(key)
		return nil
	}
	obj := r.written.Newest(cached)
	d := obj.GetDeployment()
	if d.GetMetadata().GetDeletionTimestamp() != nil {
		return nil // the garbage collector removes its ReplicaSets
	}
	b, err := BoundsOf(d)
	if err != nil {
		r.recorder.Eventf(ctx, obj, record.Warning, "InvalidStrategy", "%v", err)
		return nil
	}
	sel, err := labels.FromLabelSelector(d.GetSpec().GetSelector())
	if err != nil || sel.Empty() {
		r.recorder.Eventf(ctx, obj, record.Warning, "SelectingAll", "This deployment's selector is invalid or selects all pods: %v", err)
		return nil
	}
	sets, err := r.claim(ctx, d, sel)
	if err != nil {
		return err
	}
	now := r.now()
	s, recheck := r.count(d, sets, now)
	newSet, olds := FindNew(d, s)
	var progress Progress
	paused := d.GetSpec().GetPaused()

	// The new set: created, or its revision brought up to date.
	maxOld := int64(0)
	for _, o := range olds {
		maxOld = max(maxOld, o.Revision())
	}
	switch {
	case newSet == nil && !paused:
		created, err := r.createSet(ctx, d, b, sel, olds, maxOld+1)
		if err != nil {
			return err
		}
		newSet, progress.Reason = &Set{RS: created}, kplanev1.ReasonNewReplicaSetCreated
		s = append(olds, *newSet)
	case newSet != nil:
		if newSet.Revision() <= maxOld || newSet.RS.GetSpec().GetMinReadySeconds() != d.GetSpec().GetMinReadySeconds() {
			rs, err := r.syncNewSet(ctx, d, newSet.RS, max(newSet.Revision(), maxOld+1))
			if err != nil {
				return err
			}
			if rs != nil {
				newSet.RS = rs
				progress.Reason = kplanev1.ReasonFoundNewReplicaSet
			}
		}
	}
	if newSet != nil {
		progress.NewName = newSet.RS.GetMetadata().GetName()
		if obj, err = r.syncRevision(ctx, obj, newSet.Revision()); err != nil || obj == nil {
			return err
		}
		d = obj.GetDeployment()
	}

	moved := false
	switch {
	case IsScalingEvent(d, s):
		newIdx := -1
		for i := range s {
			if newSet != nil && s[i].RS.GetMetadata().GetUid() == newSet.RS.GetMetadata().GetUid() {
				newIdx = i
			}
		}
		replan := func(sets []Set) []int32 { return ScaleTargets(b, sets, newIdx) }
		var targets []int32
		if targets, err = GuardScaleUps(s, replan(s), r.recount(ctx, d, sel, s), replan); err != nil {
			return err
		}
		moved, err = r.scaleAll(ctx, d, b, s, targets)
	case paused || newSet == nil:
	default:
		// Re-split: s may have gained the created set.
		ns, os := FindNew(d, s)
		step := stepOf(d)
		replan := func(sets []Set) []int32 {
			newTarget, oldTargets := step(b, sets[0], sets[1:])
			return append([]int32{newTarget}, oldTargets...)
		}
		sets := append([]Set{*ns}, os...)
		var targets []int32
		if targets, err = GuardScaleUps(sets, replan(sets), r.recount(ctx, d, sel, sets), replan); err != nil {
			return err
		}
		moved, err = r.scaleAll(ctx, d, b, sets, targets)
		newSet = ns
		if err == nil && !moved && targets[0] == b.Replicas && allZero(targets[1:]) {
			err = r.cleanupHistory(ctx, d, os)
		}
	}
	if err != nil {
		return err
	}
	if moved && progress.Reason == "" {
		progress.Reason = kplanev1.ReasonReplicaSetUpdated
	}
	st, deadline := ComputeStatus(d, b, newSet, s, progress, now)
	if err := r.updateStatus(ctx, obj, st); err != nil {
		return err
	}
	if deadline > 0 && (recheck == 0 || deadline < recheck) {
		recheck = deadline
	}
	if recheck > 0 {
		return app.RequeueAfter(recheck)
	}
	return nil
}

func allZero(v []int32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// claim returns the ReplicaSets d controls, adopting orphans its selector
// matches and releasing controlled sets it no longer matches, with CAS
// updates. Before adopting, d is reread: a cached Deployment may be
// deleted already, and adopting for it would hand the set to the
// garbage collector.
func (r *deploymentController) claim(ctx context.Context, d *kplanev1.Deployment, sel labels.Selector) ([]*kplanev1.ReplicaSet, error) {
	uid := d.GetMetadata().GetUid()
	ns := d.GetMetadata().GetNamespace()
	seen := map[string]bool{}
	var out []*kplanev1.ReplicaSet
	var orphans, release []*kplanev1.ReplicaSet
	owned, _ := r.sets.Store().ByIndex(informer.OwnerUIDIndex, uid)
	for _, o := range owned {
		o = r.written.Newest(o)
		seen[o.Key()] = true
		if !controller.IsControlledBy(o, uid) {
			continue
		}
		if sel.Matches(o.Meta().GetLabels()) || o.Meta().GetDeletionTimestamp() != nil {
			out = append(out, o.GetReplicaSet())
		} else {
			release = append(release, o.GetReplicaSet())
		}
	}
	for _, o := range r.sets.Store().ListBySelector(ns, sel) {
		if seen[o.Key()] || controller.ControllerRef(o.Meta()) != nil || o.Meta().GetDeletionTimestamp() != nil {
			continue
		}
		orphans = append(orphans, o.GetReplicaSet())
	}
	var errs []error
	if len(orphans) > 0 {
		resp, err := r.api.Get(ctx, &kplanev1.GetRequest{Kind: kindDeployment, Namespace: ns, Name: d.GetMetadata().GetName()})
		if err != nil {
			return nil, fmt.Errorf("recheck deployment %s/%s before adopting: %w", ns, d.GetMetadata().GetName(), err)
		}
		if fresh := resp.GetObject().Meta(); fresh.GetUid() != uid || fresh.GetDeletionTimestamp() != nil {
			return nil, fmt.Errorf("deployment %s/%s changed before adopting; will look again", ns, d.GetMetadata().GetName())
		}
	}
	for _, rs := range orphans {
		got, _, err := controller.Update(ctx, r.api, rs, func(cur *kplanev1.ReplicaSet) *kplanev1.ReplicaSet {
			if controller.ControllerRef(cur.GetMetadata()) != nil || !sel.Matches(cur.GetMetadata().GetLabels()) {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.ReplicaSet)
			next.Metadata.OwnerReferences = append(next.Metadata.OwnerReferences, OwnerRef(d))
			return next
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("adopt replica set %s: %w", rs.GetMetadata().GetName(), err))
			continue
		}
		if got != nil && controller.IsControlledBy(kplanev1.MustWrap(got), uid) {
			r.written.Wrote(kplanev1.MustWrap(got))
			out = append(out, got)
		}
	}
	for _, rs := range release {
		got, _, err := controller.Update(ctx, r.api, rs, func(cur *kplanev1.ReplicaSet) *kplanev1.ReplicaSet {
			if sel.Matches(cur.GetMetadata().GetLabels()) {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.ReplicaSet)
			next.Metadata.OwnerReferences = slices.DeleteFunc(next.Metadata.OwnerReferences, func(ref *kplanev1.OwnerReference) bool {
				return ref.GetUid() == uid
			})
			return next
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("release replica set %s: %w", rs.GetMetadata().GetName(), err))
		} else if got != nil {
			r.written.Wrote(kplanev1.MustWrap(got))
		}
	}
	// An unsettled claim leaves the set of ReplicaSets unknown: retry on a
	// fresher cache rather than size sets on a guess.
	return out, errors.Join(errs...)
}

// count pairs each set with what the pod cache shows of its pods, and
// says when the first ready-but-not-yet-available pod becomes available.
func (r *deploymentController) count(d *kplanev1.Deployment, sets []*kplanev1.ReplicaSet, now time.Time) ([]Set, time.Duration) {
	minReady := time.Duration(d.GetSpec().GetMinReadySeconds()) * time.Second
	var recheck time.Duration
	out := make([]Set, 0, len(sets))
	for _, rs := range sets {
		s := Set{RS: rs}
		pods, _ := r.pods.Store().ByIndex(informer.OwnerUIDIndex, rs.GetMetadata().GetUid())
		for _, o := range pods {
			if !controller.IsControlledBy(o, rs.GetMetadata().GetUid()) {
				continue
			}
			p := o.GetPod()
			if !s.add(p) {
				continue
			}
			ok, left := rollout.PodAvailable(p, minReady, now)
			if ok {
				s.Available++
			} else if left > 0 && (recheck == 0 || left < recheck) {
				recheck = left
			}
		}
		out = append(out, s)
	}
	SortByRevision(out)
	return out, recheck
}

// recount returns a function that counts the pods of sets afresh: a List
// of d's pods from the apiserver, not the cache (GuardScaleUps). The sets
// keep their RS and available pods; a set without a uid (one not yet
// created) counts none.
func (r *deploymentController) recount(ctx context.Context, d *kplanev1.Deployment, sel labels.Selector, sets []Set) func() ([]Set, error) {
	return func() ([]Set, error) {
		out := slices.Clone(sets)
		byUID := make(map[string]int, len(out))
		for i := range out {
			out[i].Pods, out[i].AllPods = 0, 0
			if uid := out[i].RS.GetMetadata().GetUid(); uid != "" {
				byUID[uid] = i
			}
		}
		ns := d.GetMetadata().GetNamespace()
		_, err := client.ListPages(ctx, r.api, &kplanev1.ListRequest{Kind: "Pod", Namespace: ns, LabelSelector: sel.String(), Limit: 500},
			func(items []*kplanev1.Object) error {
				for _, o := range items {
					if i, ok := byUID[controller.ControllerRef(o.Meta()).GetUid()]; ok {
						out[i].add(o.GetPod())
					}
				}
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("count the pods of deployment %s/%s: %w", ns, d.GetMetadata().GetName(), err)
		}
		return out, nil
	}
}

// createSet creates the ReplicaSet for d's template with the size the
// strategy allows right now. Its name is deterministic, so a second
// create (a stale cache, a restarted process) finds the first: when that
// set is d's and runs d's template it is used; when it is another's, the
// hash collided, collisionCount goes up and the next reconcile tries the
// next name.
func (r *deploymentController) createSet(ctx context.Context, d *kplanev1.Deployment, b Bounds, sel labels.Selector, olds []Set, revision int64) (*kplanev1.ReplicaSet, error) {
	var collisions *int32
	if d.GetStatus() != nil {
		collisions = d.GetStatus().CollisionCount
	}
	hash := rollout.TemplateHash(d.GetSpec().GetTemplate(), collisions)
	// The initial size is a scale-up from 0 of a set not yet written.
	probe := Set{RS: &kplanev1.ReplicaSet{Metadata: &kplanev1.ObjectMeta{}, Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(0)}}}
	step := stepOf(d)
	replan := func(sets []Set) []int32 {
		initial, _ := step(b, sets[0], sets[1:])
		targets := []int32{initial}
		for _, s := range sets[1:] {
			targets = append(targets, s.Replicas())
		}
		return targets
	}
	sets := append([]Set{probe}, olds...)
	targets, err := GuardScaleUps(sets, replan(sets), r.recount(ctx, d, sel, sets), replan)
	if err != nil {
		return nil, err
	}
	initial := targets[0]
	rs := NewReplicaSet(d, hash, revision, initial, b)
	resp, err := r.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(rs)})
	if err == nil {
		out := resp.GetObject()
		r.written.Wrote(out)
		r.log.Info("created replica set", "deployment", kplanev1.MetaKey(d.GetMetadata().GetNamespace(), d.GetMetadata().GetName()),
			"replicaset", rs.GetMetadata().GetName(), "replicas", initial, "revision", revision)
		r.recorder.Eventf(ctx, kplanev1.MustWrap(d), record.Normal, "ScalingReplicaSet", "Scaled up replica set %s from 0 to %d", rs.GetMetadata().GetName(), initial)
		return out.GetReplicaSet(), nil
	}
	if !client.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create replica set %s: %w", rs.GetMetadata().GetName(), err)
	}
	got, gerr := client.ReplicaSets(r.api).Get(ctx, rs.GetMetadata().GetNamespace(), rs.GetMetadata().GetName())
	if gerr != nil {
		return nil, fmt.Errorf("read existing replica set %s: %w", rs.GetMetadata().GetName(), gerr)
	}
	if controller.IsControlledBy(kplanev1.MustWrap(got), d.GetMetadata().GetUid()) &&
		rollout.TemplatesEqual(got.GetSpec().GetTemplate(), d.GetSpec().GetTemplate()) {
		r.written.Wrote(kplanev1.MustWrap(got))
		return got, nil // ours, not yet in the cache
	}
	// A hash collision: count it, so the next reconcile hashes anew.
	_, _, uerr := controller.UpdateStatus(ctx, r.api, d, func(cur *kplanev1.Deployment) *kplanev1.Deployment {
		if cur.GetStatus().GetCollisionCount() != d.GetStatus().GetCollisionCount() {
			return nil // counted already
		}
		next := proto.Clone(cur).(*kplanev1.Deployment)
		if next.Status == nil {
			next.Status = &kplanev1.DeploymentStatus{}
		}
		next.Status.CollisionCount = proto.Int32(cur.GetStatus().GetCollisionCount() + 1)
		return next
	})
	if uerr != nil {
		return nil, fmt.Errorf("count hash collision: %w", uerr)
	}
	return nil, fmt.Errorf("replica set %s exists and is not this deployment's: hash collision, counted", rs.GetMetadata().GetName())
}

// syncNewSet brings the new set's revision and minReadySeconds up to
// date (a rollback makes an old set new again with a new revision).
func (r *deploymentController) syncNewSet(ctx context.Context, d *kplanev1.Deployment, rs *kplanev1.ReplicaSet, revision int64) (*kplanev1.ReplicaSet, error) {
	got, wrote, err := controller.Update(ctx, r.api, rs, func(cur *kplanev1.ReplicaSet) *kplanev1.ReplicaSet {
		next := proto.Clone(cur).(*kplanev1.ReplicaSet)
		changed := rollout.SetRevision(next.Metadata, max(rollout.Revision(cur.GetMetadata()), revision))
		if next.Spec.GetMinReadySeconds() != d.GetSpec().GetMinReadySeconds() {
			next.Spec.MinReadySeconds = d.GetSpec().GetMinReadySeconds()
			changed = true
		}
		if !changed {
			return nil
		}
		return next
	})
	if err != nil {
		return nil, fmt.Errorf("update new replica set %s: %w", rs.GetMetadata().GetName(), err)
	}
	if got == nil || !wrote {
		return got, nil
	}
	r.written.Wrote(kplanev1.MustWrap(got))
	return got, nil
}

// syncRevision sets the Deployment's revision annotation to its new set's.
// It returns the newest Deployment (nil when it is gone).
func (r *deploymentController) syncRevision(ctx context.Context, obj *kplanev1.Object, revision int64) (*kplanev1.Object, error) {
	if rollout.Revision(obj.Meta()) == revision {
		return obj, nil
	}
	got, wrote, err := controller.Update(ctx, r.api, obj.GetDeployment(), func(cur *kplanev1.Deployment) *kplanev1.Deployment {
		if rollout.Revision(cur.GetMetadata()) == revision {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Deployment)
		if next.Metadata.Annotations == nil {
			next.Metadata.Annotations = map[string]string{}
		}
		next.Metadata.Annotations[kplanev1.AnnotationDeploymentRevision] = strconv.FormatInt(revision, 10)
		return next
	})
	if err != nil {
		return nil, fmt.Errorf("update revision of deployment %s: %w", obj.Key(), err)
	}
	if got == nil {
		return nil, nil
	}
	out := kplanev1.MustWrap(got)
	if wrote {
		r.written.Wrote(out)
	}
	return out, nil
}

// scaleAll sets each set's replicas to its target (and records the
// Deployment's size on the sets it touches). It reports whether it wrote.
func (r *deploymentController) scaleAll(ctx context.Context, d *kplanev1.Deployment, b Bounds, sets []Set, targets []int32) (bool, error) {
	moved := false
	var errs []error
	// Scale downs first: they never break a bound, and a failed scale-up
	// after them leaves the rollout merely slower.
	order := make([]int, len(sets))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, c int) int {
		da, dc := targets[a]-sets[a].Replicas(), targets[c]-sets[c].Replicas()
		return int(da) - int(dc)
	})
	for _, i := range order {
		wrote, err := r.scale(ctx, d, b, sets[i], targets[i])
		moved = moved || wrote
		if err != nil {
			errs = append(errs, err)
		}
	}
	return moved, errors.Join(errs...)
}

// scale writes one set's replicas with a CAS update. The target was
// decided from the set at the replicas it has in our view; if the stored
// set has other replicas, nothing is written and the reconcile runs again.
func (r *deploymentController) scale(ctx context.Context, d *kplanev1.Deployment, b Bounds, s Set, target int32) (bool, error) {
	from := s.Replicas()
	needSize := (target > 0 || from > 0) && sizeAnnotationsDiffer(s.RS.GetMetadata(), b)
	if target == from && !needSize {
		return false, nil
	}
	stale := false
	got, wrote, err := controller.Update(ctx, r.api, s.RS, func(cur *kplanev1.ReplicaSet) *kplanev1.ReplicaSet {
		if cur.GetSpec().GetReplicas() != from {
			stale = true
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.ReplicaSet)
		next.Spec.Replicas = proto.Int32(target)
		SetSizeAnnotations(next.Metadata, b)
		if proto.Equal(next, cur) {
			return nil
		}
		return next
	})
	name := s.RS.GetMetadata().GetName()
	if err != nil {
		return false, fmt.Errorf("scale replica set %s to %d: %w", name, target, err)
	}
	if stale {
		return false, fmt.Errorf("replica set %s changed size behind our back; will look again", name)
	}
	if !wrote || got == nil {
		return false, nil
	}
	r.written.Wrote(kplanev1.MustWrap(got))
	if target != from {
		verb := "up"
		if target < from {
			verb = "down"
		}
		r.log.Info("scaled replica set", "deployment", kplanev1.MetaKey(d.GetMetadata().GetNamespace(), d.GetMetadata().GetName()),
			"replicaset", name, "from", from, "to", target)
		r.recorder.Eventf(ctx, kplanev1.MustWrap(d), record.Normal, "ScalingReplicaSet", "Scaled %s replica set %s from %d to %d", verb, name, from, target)
	}
	return target != from, nil
}

func sizeAnnotationsDiffer(m *kplanev1.ObjectMeta, b Bounds) bool {
	c := proto.Clone(m).(*kplanev1.ObjectMeta)
	return SetSizeAnnotations(c, b)
}

// cleanupHistory deletes the old sets beyond revisionHistoryLimit.
func (r *deploymentController) cleanupHistory(ctx context.Context, d *kplanev1.Deployment, olds []Set) error {
	var errs []error
	for _, s := range HistoryToDelete(d, olds) {
		if _, _, err := controller.DeleteIfSameUID(ctx, r.api, kplanev1.MustWrap(s.RS), client.DeleteOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("delete old replica set %s: %w", s.RS.GetMetadata().GetName(), err))
			continue
		}
		r.log.Info("deleted old replica set", "replicaset", s.RS.GetMetadata().GetName(), "revision", s.Revision())
	}
	return errors.Join(errs...)
}

// updateStatus writes st when it differs from the stored status.
func (r *deploymentController) updateStatus(ctx context.Context, obj *kplanev1.Object, st *kplanev1.DeploymentStatus) error {
	d := obj.GetDeployment()
	if StatusEqual(d.GetStatus(), st) {
		return nil
	}
	got, wrote, err := controller.UpdateStatus(ctx, r.api, d, func(cur *kplanev1.Deployment) *kplanev1.Deployment {
		want := proto.Clone(st).(*kplanev1.DeploymentStatus)
		if cur.GetStatus().GetCollisionCount() > want.GetCollisionCount() {
			want.CollisionCount = cur.GetStatus().CollisionCount // counted meanwhile
		}
		if StatusEqual(cur.GetStatus(), want) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Deployment)
		next.Status = want
		return next
	})
	if err != nil {
		return fmt.Errorf("update status of deployment %s: %w", obj.Key(), err)
	}
	if wrote && got != nil {
		r.written.Wrote(kplanev1.MustWrap(got))
	}
	return nil
}
