package replicaset

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// defaultBurstReplicas caps the creates or deletes of one reconcile, as
// Kubernetes' --burst-replicas does; the rest follow once the cache shows
// these.
const defaultBurstReplicas = 500

// defaultUpdateBatch bounds the status churn of a large set: pod updates
// (pods going Ready) are gathered into one reconcile at most this often.
// Ready counts lag by at least this much.
const defaultUpdateBatch = 250 * time.Millisecond

// paceFactor: a set's gathered wakes wait at least this many times its
// last walk (controller.Pacer). Most reconciles count from the pod
// store's tally (DecideCounted) and take microseconds; a set that must
// walk its pods (to release, adopt or choose victims, or for
// minReadySeconds) walks 100,000 in 45-60 ms, so its status-only
// reconciles then take about a tenth of a worker and its ready counts lag
// by about 0.5 s.
const paceFactor = 10

// replicaController reconciles ReplicaSets and ReplicationControllers.
type replicaController struct {
	burst int
	// updateBatch delays the reconcile a pod update wakes, gathering
	// the updates of a large set (pods going Ready) into one reconcile;
	// pace makes a large set wait longer (see paceFactor).
	updateBatch time.Duration
	pace        *controller.Pacer

	api      *client.Client
	log      hclog.Logger
	recorder *record.Recorder
	ctx      *app.Context
	pods     *informer.Informer
	owners   map[string]*informer.Informer // by kind
	exp      *controller.Expectations
	control  *controller.ObjectControl // creates and deletes pods, minding exp
	now      func() time.Time

	// statusWrites: the owners' status writes of this controller, so that
	// they do not wake it and a stale cache does not skip one (updateStatus).
	statusWrites controller.StatusWrites

	// Counters behind the /metrics series registered in setup (and read
	// by tests).
	createRounds atomic.Int64
}

// NewService returns replicactl: the binary's main runs it with app.Main.
func NewService() app.Service { return newReplicaController().service() }

func newReplicaController() *replicaController {
	return &replicaController{burst: defaultBurstReplicas, exp: controller.NewExpectations(0), now: time.Now}
}

// service describes the binary; tests run it in-process with app.Run.
// Pods are not an app.Watch (see setup); a new leadership term queues
// every owner once its caches have caught up with the apiserver, which
// pkg/app does for every leader-elected service.
func (r *replicaController) service() app.Service {
	return app.Service{
		Name:          "replicactl",
		HealthAddr:    ":10252",
		LeaderElected: true,
		Workers:       5,
		// A set's own status writes do not wake it: pod events, spec
		// changes and anyone else's status writes do.
		Watches: []app.Watch{
			{Kind: kindReplicaSet, MapToKey: kindKey(kindReplicaSet), Changed: r.statusWrites.Changed},
			{Kind: kindReplicationController, MapToKey: kindKey(kindReplicationController), Changed: r.statusWrites.Changed},
		},
		AddFlags: func(fs *flag.FlagSet) {
			fs.IntVar(&r.burst, "burst-replicas", defaultBurstReplicas, "most pods one reconcile creates or deletes (created in slow-start batches 1, 2, 4, ...)")
			fs.DurationVar(&r.updateBatch, "pod-update-batch-period", defaultUpdateBatch,
				"how long a pod update waits before it wakes its owner, so that the updates of a large set (pods going Ready) are reconciled together; so do the creations and deletions of a burst the owner made, except the one that completes it, which wakes it at once, as do creations and deletions it did not make (0: no wait). A set whose reconcile walks longer waits ten times that walk instead")
		},
		Setup: r.setup,
	}
}

func kindKey(kind string) func(*kplanev1.Object) []string {
	return func(o *kplanev1.Object) []string {
		return []string{ownerKey(kind, o.Meta().GetNamespace(), o.Meta().GetName())}
	}
}

func (r *replicaController) setup(c *app.Context) (app.Reconciler, error) {
	if r.burst < 1 {
		return nil, fmt.Errorf("--burst-replicas must be at least 1, not %d", r.burst)
	}
	if r.updateBatch < 0 {
		return nil, fmt.Errorf("--pod-update-batch-period must not be negative, not %v", r.updateBatch)
	}
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	r.recorder = record.New(c.Client, "replicaset-controller", c.Identity, c.Logger)
	r.control = &controller.ObjectControl{API: c.Client, Expectations: r.exp, OwnerKey: controllerKey}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_replicactl_pod_create_calls_total", Help: "Pod create calls made, successful or not.", Value: &r.control.Counts.Creates},
		app.Counter{Name: "kplane_replicactl_pod_create_failures_total", Help: "Pod create calls that failed.", Value: &r.control.Counts.CreateFailures},
		app.Counter{Name: "kplane_replicactl_create_rounds_total", Help: "Reconciles that created pods (each in slow-start batches).", Value: &r.createRounds},
		app.Counter{Name: "kplane_replicactl_pod_delete_calls_total", Help: "Pod delete calls made, successful or not.", Value: &r.control.Counts.Deletes},
	); err != nil {
		return nil, err
	}
	pods, err := c.Informers.ForKindTrimmed("Pod", trimPod)
	if err != nil {
		return nil, err
	}
	if err := pods.Store().AddTally(tallyActivePods, tallyActive); err != nil {
		return nil, fmt.Errorf("pod tally: %w", err)
	}
	r.pods = pods
	r.owners = map[string]*informer.Informer{
		kindReplicaSet:            c.Informers.ForKind(kindReplicaSet),
		kindReplicationController: c.Informers.ForKind(kindReplicationController),
	}
	// Pod events are handled here rather than through app.Watch so that a
	// creation or deletion is counted against the expectations before the
	// owner is queued: the reconcile that the event triggers then sees the
	// expectation met.
	r.pace = &controller.Pacer{Min: r.updateBatch, Factor: paceFactor}
	r.pods.AddEventHandler(r.control.Handler(r.ownersOf, r.ctx.Enqueue, func(key string) { r.ctx.EnqueueAfter(key, r.pace.Delay(key)) }))
	for kind, inf := range r.owners {
		inf.AddEventHandler(informer.Handler{OnDelete: func(obj any) {
			if o, ok := informer.ObjectOf(obj); ok {
				key := ownerKey(kind, o.Meta().GetNamespace(), o.Meta().GetName())
				r.exp.Delete(key)
				r.pace.Forget(key)
				r.statusWrites.Forget(o.Meta().GetUid())
			}
		}})
	}
	return r, nil
}

// ownersOf returns the keys of the owners a pod event concerns: its
// controller when that is a ReplicaSet or ReplicationController, else (an
// orphan) every owner in its namespace whose selector matches, which may
// adopt it.
func (r *replicaController) ownersOf(pod *kplanev1.Object) []string {
	meta := pod.Meta()
	if ref := controller.ControllerRef(meta); ref != nil {
		if ref.GetKind() == kindReplicaSet || ref.GetKind() == kindReplicationController {
			return []string{ownerKey(ref.GetKind(), meta.GetNamespace(), ref.GetName())}
		}
		return nil
	}
	if meta.GetDeletionTimestamp() != nil {
		return nil
	}
	var keys []string
	for kind, inf := range r.owners {
		objs, err := inf.Store().ByIndex(informer.NamespaceIndex, meta.GetNamespace())
		if err != nil {
			continue // every store has the namespace index
		}
		for _, o := range objs {
			owner, err := OwnerOf(o)
			if err != nil || owner.Deleting() {
				continue
			}
			if owner.Selector.Matches(meta.GetLabels()) {
				keys = append(keys, ownerKey(kind, o.Meta().GetNamespace(), o.Meta().GetName()))
			}
		}
	}
	return keys
}

// controllerKey is the key of the pod's controlling owner, when it is one
// of ours.
func controllerKey(pod *kplanev1.Object) (string, bool) {
	ref := controller.ControllerRef(pod.Meta())
	if ref == nil || (ref.GetKind() != kindReplicaSet && ref.GetKind() != kindReplicationController) {
		return "", false
	}
	return ownerKey(ref.GetKind(), pod.Meta().GetNamespace(), ref.GetName()), true
}

func splitOwnerKey(key string) (kind, namespace, name string, err error) {
	kind, rest, ok := strings.Cut(key, "/")
	if !ok || (kind != kindReplicaSet && kind != kindReplicationController) {
		return "", "", "", fmt.Errorf("malformed key %q", key)
	}
	namespace, name = kplanev1.SplitKey(rest)
	if namespace == "" || name == "" {
		return "", "", "", fmt.Errorf("malformed key %q", key)
	}
	return kind, namespace, name, nil
}

// Reconcile implements app.Reconciler.
func (r *replicaController) Reconcile(ctx context.Context, key string) error {
	kind, namespace, name, err := splitOwnerKey(key)
	if err != nil {
		r.log.Error("dropping key", "key", key, "error", err)
		return nil
	}
	obj, ok := r.owners[kind].Store().GetByName(namespace, name)
	if !ok {
		r.exp.Delete(key)
		return nil
	}
	owner, err := OwnerOf(obj)
	if err != nil {
		// Retrying cannot fix the object; say so once and wait for a change.
		r.recorder.Eventf(ctx, obj, record.Warning, "InvalidSelector", "%v", err)
		return nil
	}
	// Sample expectations before reading pods: a creation observed in
	// between then shows in the pods we read, never the other way round.
	manage, err := r.control.SatisfiedAt(ctx, key, r.pods)
	if err != nil {
		return err
	}
	walk := time.Now()
	plan, counts, counted := DecideCounted(r.pods.Store(), owner, manage, r.burst)
	if !counted {
		plan = Decide(owner, r.candidates(owner), manage, r.burst)
	}
	walked := time.Since(walk)

	if err := r.claim(ctx, owner, plan); err != nil {
		return err
	}
	var manageErr error
	reason := ""
	switch {
	case plan.Create > 0:
		manageErr, reason = r.create(ctx, owner, plan.Create), reasonFailedCreate
	case len(plan.Delete) > 0:
		manageErr, reason = r.delete(ctx, owner, plan.Delete), reasonFailedDelete
	}
	if manageErr == nil && !manage {
		// Keep a recorded failure until a reconcile really manages again.
		if c := failureCondition(owner.Status); c != nil {
			manageErr, reason = errors.New(c.GetMessage()), c.GetReason()
		}
	}
	now := r.now()
	walk = time.Now()
	if !counted {
		counts = CountPods(owner, plan.Owned, now)
	}
	r.pace.Observe(key, walked+time.Since(walk))
	st := StatusFor(owner, counts, manageErr, reason, now)
	if err := r.updateStatus(ctx, owner, st); err != nil {
		return err
	}
	if manageErr != nil {
		return manageErr
	}
	if counts.Recheck > 0 {
		return app.RequeueAfter(counts.Recheck)
	}
	return nil
}

func failureCondition(st *kplanev1.ReplicaSetStatus) *kplanev1.Condition {
	if c := apiutil.FindCondition(st.GetConditions(), kplanev1.ReplicaSetReplicaFailure); c.GetStatus() == kplanev1.ConditionTrue {
		return c
	}
	return nil
}

// candidates are the pods that may concern owner: those naming it as
// owner (which may need releasing) and the orphans its selector matches.
// Read from the owner and orphan indexes, in no particular order (Decide
// orders what it deletes): a label match of every pod in the namespace,
// sorted, on every reconcile was most of replicactl's work at scale.
func (r *replicaController) candidates(owner *Owner) []*kplanev1.Pod {
	objs := r.pods.Store().ClaimCandidates(owner.Meta.GetNamespace(), owner.Meta.GetUid(), owner.Selector)
	out := make([]*kplanev1.Pod, len(objs))
	for i, o := range objs {
		out[i] = o.GetPod()
	}
	return out
}

// claim adopts and releases pods with compare-and-swap updates of fresh
// reads. Before the first adoption the owner is re-read from the
// apiserver, as Kubernetes does: a cached owner may already be deleted
// (or replaced by a namesake), and adopting for it would hand the pod to
// the garbage collector.
func (r *replicaController) claim(ctx context.Context, owner *Owner, plan Plan) error {
	if len(plan.Adopt) > 0 {
		resp, err := r.api.Get(ctx, &kplanev1.GetRequest{Kind: owner.Kind, Namespace: owner.Meta.GetNamespace(), Name: owner.Meta.GetName()})
		if err != nil {
			return fmt.Errorf("recheck %s before adopting: %w", owner.Key(), err)
		}
		fresh := resp.GetObject().Meta()
		if fresh.GetUid() != owner.Meta.GetUid() || fresh.GetDeletionTimestamp() != nil {
			return fmt.Errorf("%s changed (uid %s, deleting %v) before adopting; will look again", owner.Key(), fresh.GetUid(), fresh.GetDeletionTimestamp() != nil)
		}
	}
	var errs []error
	for _, pod := range plan.Adopt {
		if err := r.adopt(ctx, owner, pod); err != nil {
			errs = append(errs, fmt.Errorf("adopt pod %s: %w", pod.GetMetadata().GetName(), err))
		}
	}
	for _, pod := range plan.Release {
		if err := r.release(ctx, owner, pod); err != nil {
			errs = append(errs, fmt.Errorf("release pod %s: %w", pod.GetMetadata().GetName(), err))
		}
	}
	// A failed claim (most often a conflict with a newer pod version) means
	// the count of owned pods is unknown: retry on a fresher cache rather
	// than create or delete on a guess.
	return errors.Join(errs...)
}

// errChanged: a pod's fresh read no longer bears out what the cache
// showed; the reconcile retries on a fresher cache.
var errChanged = errors.New("it changed since the cache saw it; will look again")

// adopt makes owner the controller of an orphan. The cache may hold pods
// trimmed (trimPod), so it writes from a fresh read, and only while the
// pod is still an orphan the selector matches; the update is conditional
// on that read.
func (r *replicaController) adopt(ctx context.Context, owner *Owner, cached *kplanev1.Pod) error {
	p, err := r.freshPod(ctx, cached)
	if err != nil {
		return err
	}
	if p == nil || controller.ControllerRef(p.GetMetadata()) != nil || !owner.Selector.Matches(p.GetMetadata().GetLabels()) {
		return errChanged
	}
	p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, ownerRef(owner))
	return r.updatePod(ctx, p)
}

// release removes owner's reference from a pod it controls that no
// longer matches, from a fresh read as adopt does. A pod gone meanwhile
// needs nothing.
func (r *replicaController) release(ctx context.Context, owner *Owner, cached *kplanev1.Pod) error {
	p, err := r.freshPod(ctx, cached)
	if err != nil || p == nil {
		return err
	}
	if controller.ControllerRef(p.GetMetadata()).GetUid() != owner.Meta.GetUid() || owner.Selector.Matches(p.GetMetadata().GetLabels()) {
		return errChanged
	}
	p.Metadata.OwnerReferences = slices.DeleteFunc(p.Metadata.OwnerReferences, func(ref *kplanev1.OwnerReference) bool {
		return ref.GetUid() == owner.Meta.GetUid()
	})
	if err := r.updatePod(ctx, p); err != nil && !client.IsNotFound(err) {
		return err
	}
	return nil
}

// freshPod reads cached from the apiserver whole, as a private copy to
// write from; nil when it is gone (not found, or a namesake in its place).
func (r *replicaController) freshPod(ctx context.Context, cached *kplanev1.Pod) (*kplanev1.Pod, error) {
	md := cached.GetMetadata()
	p, err := client.Pods(r.api).Get(ctx, md.GetNamespace(), md.GetName())
	if client.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pod %s afresh: %w", md.GetName(), err)
	}
	if p.GetMetadata().GetUid() != md.GetUid() {
		return nil, nil
	}
	return p, nil
}

// updatePod writes pod's metadata, conditional on the resourceVersion we read.
func (r *replicaController) updatePod(ctx context.Context, p *kplanev1.Pod) error {
	_, err := r.api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(p)})
	return err
}

// create creates n pods in slow-start batches, with expectations raised
// first and lowered for every create that failed or was never attempted
// (controller.ObjectControl).
func (r *replicaController) create(ctx context.Context, owner *Owner, n int) error {
	key := owner.Key()
	r.createRounds.Add(1)
	ok, err := r.control.Create(ctx, key, n, func() (*kplanev1.Object, error) { return kplanev1.Wrap(NewPod(owner)) })
	if ok > 0 {
		r.recorder.Eventf(ctx, owner.Object, record.Normal, "SuccessfulCreate", "Created %d pod(s)", ok)
	}
	if err != nil {
		r.log.Warn("creating pods failed", "owner", key, "created", ok, "wanted", n, "error", err)
		r.recorder.Eventf(ctx, owner.Object, record.Warning, reasonFailedCreate, "Error creating: %v", err)
		return fmt.Errorf("create pods for %s: %w", key, err)
	}
	return nil
}

// delete deletes victims concurrently, each with a uid precondition so a
// namesake pod created meanwhile is never hit.
func (r *replicaController) delete(ctx context.Context, owner *Owner, victims []*kplanev1.Pod) error {
	key := owner.Key()
	objs := make([]*kplanev1.Object, len(victims))
	for i, p := range victims {
		objs[i] = kplanev1.MustWrap(p)
	}
	n, err := r.control.Delete(ctx, key, objs, client.DeleteOptions{})
	if n > 0 {
		r.recorder.Eventf(ctx, owner.Object, record.Normal, "SuccessfulDelete", "Deleted %d pod(s)", n)
	}
	if err != nil {
		r.recorder.Eventf(ctx, owner.Object, record.Warning, reasonFailedDelete, "Error deleting: %v", err)
		return fmt.Errorf("delete pods of %s: %w", key, err)
	}
	return nil
}

// updateStatus writes st when it differs from the owner's status, with
// resourceVersion CAS; on a conflict it rereads the owner and tries again.
// observedGeneration stays the generation this reconcile acted on. While
// the cached owner is older than our last status write of it, its status
// says nothing about whether st is written (controller.StatusWrites), so
// the comparison starts from a fresh read.
func (r *replicaController) updateStatus(ctx context.Context, owner *Owner, st *kplanev1.ReplicaSetStatus) error {
	cur := owner.Object
	if r.statusWrites.Behind(cur) {
		resp, err := r.api.Get(ctx, &kplanev1.GetRequest{Kind: owner.Kind, Namespace: owner.Meta.GetNamespace(), Name: owner.Meta.GetName()})
		if client.IsNotFound(err) || (err == nil && resp.GetObject().Meta().GetUid() != owner.Meta.GetUid()) {
			return nil // deleted, or a namesake: the informer brings the news
		}
		if err != nil {
			return fmt.Errorf("read %s for its status: %w", owner.Key(), err)
		}
		cur = resp.GetObject()
	}
	out, wrote, err := controller.UpdateStatus(ctx, r.api, cur, func(cur *kplanev1.Object) *kplanev1.Object {
		if fresh, err := OwnerOf(cur); err == nil && statusEqual(fresh.Status, st) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Object)
		setStatus(next, st)
		return next
	})
	if err != nil {
		return fmt.Errorf("update status of %s: %w", owner.Key(), err)
	}
	if wrote {
		r.statusWrites.Record(out)
	}
	return nil
}

func setStatus(obj *kplanev1.Object, st *kplanev1.ReplicaSetStatus) {
	switch {
	case obj.GetReplicaSet() != nil:
		obj.GetReplicaSet().Status = st
	case obj.GetReplicationController() != nil:
		obj.GetReplicationController().Status = st
	}
}
