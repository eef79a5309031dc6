package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

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

// catchUpLimit bounds how long a new leader waits for its cache to show
// what the apiserver held when it took over; past it, work starts anyway
// (expectations and the next resync still protect the outcome).
const catchUpLimit = 10 * time.Second

// replicaController reconciles ReplicaSets and ReplicationControllers.
type replicaController struct {
	burst int

	api      *client.Client
	log      hclog.Logger
	recorder *record.Recorder
	ctx      *app.Context
	pods     *informer.Informer
	owners   map[string]*informer.Informer // by kind
	exp      *controller.Expectations
	now      func() time.Time

	// Counters behind the /metrics series registered in setup (and read
	// by tests).
	createCalls, createFailures, createRounds, deleteCalls atomic.Int64

	// fresh is true while this term's cache has caught up with the
	// apiserver (see run); reconciles do nothing until then.
	fresh atomic.Bool
}

func newReplicaController() *replicaController {
	return &replicaController{burst: defaultBurstReplicas, exp: controller.NewExpectations(0), now: time.Now}
}

// service describes the binary; tests run it in-process with app.Run.
func (r *replicaController) service() app.Service {
	return app.Service{
		Name:          "replicactl",
		HealthAddr:    ":10252",
		LeaderElected: true,
		Workers:       5,
		Watches: []app.Watch{
			{Kind: kindReplicaSet, MapToKey: kindKey(kindReplicaSet)},
			{Kind: kindReplicationController, MapToKey: kindKey(kindReplicationController)},
		},
		AddFlags: func(fs *flag.FlagSet) {
			fs.IntVar(&r.burst, "burst-replicas", defaultBurstReplicas, "most pods one reconcile creates or deletes (created in slow-start batches 1, 2, 4, ...)")
		},
		Setup: r.setup,
		Run:   r.run,
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
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	for _, m := range []struct {
		name, help string
		v          *atomic.Int64
	}{
		{"kplane_replicactl_pod_create_calls_total", "Pod create calls made, successful or not.", &r.createCalls},
		{"kplane_replicactl_pod_create_failures_total", "Pod create calls that failed.", &r.createFailures},
		{"kplane_replicactl_create_rounds_total", "Reconciles that created pods (each in slow-start batches).", &r.createRounds},
		{"kplane_replicactl_pod_delete_calls_total", "Pod delete calls made, successful or not.", &r.deleteCalls},
	} {
		v := m.v
		if err := c.Registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help},
			func() float64 { return float64(v.Load()) })); err != nil {
			return nil, fmt.Errorf("register metric %s: %w", m.name, err)
		}
	}
	r.recorder = record.New(c.Client, "replicaset-controller", c.Identity, c.Logger)
	r.pods = c.Informers.ForKind("Pod")
	r.owners = map[string]*informer.Informer{
		kindReplicaSet:            c.Informers.ForKind(kindReplicaSet),
		kindReplicationController: c.Informers.ForKind(kindReplicationController),
	}
	// Pod events are handled here rather than through app.Watch so that a
	// creation or deletion is counted against the expectations before the
	// owner is queued: the reconcile that the event triggers then sees the
	// expectation met.
	r.pods.AddEventHandler(informer.Handler{
		OnAdd:    r.podAdded,
		OnUpdate: r.podUpdated,
		OnDelete: r.podDeleted,
	})
	for kind, inf := range r.owners {
		inf.AddEventHandler(informer.Handler{OnDelete: func(obj any) {
			if o, ok := informer.ObjectOf(obj); ok {
				r.exp.Delete(ownerKey(kind, o.Meta().GetNamespace(), o.Meta().GetName()))
			}
		}})
	}
	return r, nil
}

// run holds the work of each leadership term until the cache has caught
// up with the apiserver. A standby's informers run all along, but may lag
// behind the writes of the leader it replaces (whose in-flight creates can
// land just before it let go); acting on such a cache would create pods
// twice. So a new term lists what exists now (a quorum read) and waits
// until its informers have applied at least that, then queues everything.
func (r *replicaController) run(ctx context.Context, c *app.Context) error {
	defer r.fresh.Store(false)
	start := time.Now()
	catchCtx, cancel := context.WithTimeout(ctx, catchUpLimit)
	err := r.catchUp(catchCtx)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		r.log.Warn("cache did not catch up with the apiserver in time; starting anyway", "error", err)
	}
	r.fresh.Store(true)
	r.log.Info("leading: cache caught up", "wait", time.Since(start))
	for kind, inf := range r.owners {
		for _, o := range inf.Store().List() {
			c.Enqueue(ownerKey(kind, o.Meta().GetNamespace(), o.Meta().GetName()))
		}
	}
	<-ctx.Done()
	return nil
}

// catchUp waits until each informer has applied the newest write among
// the objects a fresh list returns.
func (r *replicaController) catchUp(ctx context.Context) error {
	infs := []*informer.Informer{r.pods, r.owners[kindReplicaSet], r.owners[kindReplicationController]}
	for _, inf := range infs {
		var newest int64
		_, err := client.ListPages(ctx, r.api, &kplanev1.ListRequest{Kind: inf.Kind(), Limit: 5000}, func(items []*kplanev1.Object) error {
			for _, o := range items {
				if rv, err := strconv.ParseInt(o.Meta().GetResourceVersion(), 10, 64); err == nil {
					newest = max(newest, rv)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("catch up: %w", err)
		}
		for {
			seen, _ := strconv.ParseInt(inf.LastSyncResourceVersion(), 10, 64)
			if seen >= newest {
				break
			}
			if err := client.Sleep(ctx, 5*time.Millisecond); err != nil {
				return fmt.Errorf("catch up: %s informer at revision %d, apiserver at %d: %w", inf.Kind(), seen, newest, err)
			}
		}
	}
	return nil
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

func (r *replicaController) podAdded(pod *kplanev1.Object) {
	if key, ok := controllerKey(pod); ok {
		if pod.Meta().GetDeletionTimestamp() != nil {
			// Seen for the first time already being deleted (e.g. after a
			// relist): that is the deletion we may be waiting for.
			r.exp.DeletionObserved(key, pod.Key())
		} else {
			r.exp.CreationObserved(key)
		}
	}
	r.enqueue(r.ownersOf(pod))
}

func (r *replicaController) podUpdated(oldPod, newPod *kplanev1.Object) {
	if key, ok := controllerKey(newPod); ok && newPod.Meta().GetDeletionTimestamp() != nil && oldPod.Meta().GetDeletionTimestamp() == nil {
		// A graceful deletion: the pod stays until its node agent is done,
		// but for us it is gone now.
		r.exp.DeletionObserved(key, newPod.Key())
	}
	keys := r.ownersOf(newPod)
	if oldPod != newPod {
		keys = append(keys, r.ownersOf(oldPod)...)
	}
	r.enqueue(keys)
}

func (r *replicaController) podDeleted(obj any) {
	pod, ok := informer.ObjectOf(obj)
	if !ok {
		return
	}
	if key, ok := controllerKey(pod); ok {
		r.exp.DeletionObserved(key, pod.Key())
	}
	r.enqueue(r.ownersOf(pod))
}

func (r *replicaController) enqueue(keys []string) {
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		r.ctx.Enqueue(k)
	}
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
	if !r.fresh.Load() {
		return nil // run queues every owner once the cache has caught up
	}
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
	manage := r.exp.SatisfiedAt(key, cacheRevision(r.pods))
	plan := Decide(owner, r.candidates(owner), manage, r.burst)

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
	st, recheck := ComputeStatus(owner, plan.Owned, manageErr, reason, r.now())
	if err := r.updateStatus(ctx, owner, st); err != nil {
		return err
	}
	if manageErr != nil {
		return manageErr
	}
	if recheck > 0 {
		return app.RequeueAfter(recheck)
	}
	return nil
}

func failureCondition(st *kplanev1.ReplicaSetStatus) *kplanev1.Condition {
	for _, c := range st.GetConditions() {
		if c.GetType() == conditionReplicaFailure && c.GetStatus() == "True" {
			return c
		}
	}
	return nil
}

// candidates are the pods that may concern owner: those its selector
// matches and those that name it as owner (which may need releasing).
func (r *replicaController) candidates(owner *Owner) []*kplanev1.Pod {
	store := r.pods.Store()
	seen := map[string]bool{}
	var out []*kplanev1.Pod
	add := func(objs []*kplanev1.Object) {
		for _, o := range objs {
			if k := o.Key(); !seen[k] {
				seen[k] = true
				out = append(out, o.GetPod())
			}
		}
	}
	add(store.ListBySelector(owner.Meta.GetNamespace(), owner.Selector))
	if owned, err := store.ByIndex(informer.OwnerUIDIndex, owner.Meta.GetUid()); err == nil {
		add(owned)
	}
	return out
}

// claim adopts and releases pods with compare-and-swap updates. Before the
// first adoption the owner is re-read from the apiserver, as Kubernetes
// does: a cached owner may already be deleted (or replaced by a namesake),
// and adopting for it would hand the pod to the garbage collector.
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
		p := proto.Clone(pod).(*kplanev1.Pod)
		p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, ownerRef(owner))
		if err := r.updatePod(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("adopt pod %s: %w", pod.GetMetadata().GetName(), err))
		}
	}
	for _, pod := range plan.Release {
		p := proto.Clone(pod).(*kplanev1.Pod)
		p.Metadata.OwnerReferences = slices.DeleteFunc(p.Metadata.OwnerReferences, func(ref *kplanev1.OwnerReference) bool {
			return ref.GetUid() == owner.Meta.GetUid()
		})
		err := r.updatePod(ctx, p)
		if err != nil && !client.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("release pod %s: %w", pod.GetMetadata().GetName(), err))
		}
	}
	// A failed claim (most often a conflict with a newer pod version) means
	// the count of owned pods is unknown: retry on a fresher cache rather
	// than create or delete on a guess.
	return errors.Join(errs...)
}

// updatePod writes pod's metadata, conditional on the resourceVersion we read.
func (r *replicaController) updatePod(ctx context.Context, p *kplanev1.Pod) error {
	_, err := r.api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(p)})
	return err
}

// revisionOf is the revision a successful write returned, 0 otherwise.
func revisionOf(obj *kplanev1.Object, err error) int64 {
	if err != nil || obj == nil {
		return 0
	}
	rv, _ := strconv.ParseInt(obj.Meta().GetResourceVersion(), 10, 64)
	return rv
}

// cacheRevision is the revision the informer's cache has caught up to.
func cacheRevision(inf *informer.Informer) int64 {
	rv, _ := strconv.ParseInt(inf.LastSyncResourceVersion(), 10, 64)
	return rv
}

// create creates n pods in slow-start batches. Expectations are raised
// first, since watch events may arrive before the calls return, and
// lowered for every create that failed or was never attempted.
func (r *replicaController) create(ctx context.Context, owner *Owner, n int) error {
	key := owner.Key()
	r.exp.ExpectCreations(key, n)
	r.createRounds.Add(1)
	var failed atomic.Int32
	ok, err := controller.SlowStartBatch(n, 1, func() error {
		r.createCalls.Add(1)
		pod, werr := kplanev1.Wrap(NewPod(owner))
		r.exp.WriteIssued(key)
		var resp *kplanev1.CreateResponse
		if werr == nil {
			resp, werr = r.api.Create(ctx, &kplanev1.CreateRequest{Object: pod})
		}
		r.exp.WriteAcknowledged(key, revisionOf(resp.GetObject(), werr))
		if werr != nil {
			failed.Add(1)
			r.createFailures.Add(1)
			r.exp.CreationFailed(key)
			return werr
		}
		return nil
	})
	for range n - ok - int(failed.Load()) {
		r.exp.CreationObserved(key) // never attempted: no event will come
	}
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
	keys := make([]string, len(victims))
	for i, p := range victims {
		keys[i] = kplanev1.MetaKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
	}
	r.exp.ExpectDeletions(key, keys)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		done atomic.Int32
	)
	for range victims {
		r.exp.WriteIssued(key)
	}
	for i, p := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := p.GetMetadata()
			r.deleteCalls.Add(1)
			resp, err := r.api.Delete(ctx, &kplanev1.DeleteRequest{
				Kind: "Pod", Namespace: m.GetNamespace(), Name: m.GetName(),
				Preconditions: &kplanev1.Preconditions{Uid: m.GetUid()},
			})
			r.exp.WriteAcknowledged(key, revisionOf(resp.GetObject(), err))
			switch {
			case err == nil:
				done.Add(1)
			case client.IsNotFound(err):
				// Already gone; its deletion event may never reach us as ours.
				r.exp.DeletionObserved(key, keys[i])
			default:
				r.exp.DeletionFailed(key, keys[i])
				mu.Lock()
				errs = append(errs, fmt.Errorf("delete pod %s: %w", m.GetName(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := done.Load(); n > 0 {
		r.recorder.Eventf(ctx, owner.Object, record.Normal, "SuccessfulDelete", "Deleted %d pod(s)", n)
	}
	if err := errors.Join(errs...); err != nil {
		r.recorder.Eventf(ctx, owner.Object, record.Warning, reasonFailedDelete, "Error deleting: %v", err)
		return fmt.Errorf("delete pods of %s: %w", key, err)
	}
	return nil
}

// updateStatus writes st when it differs from the cached status, with
// resourceVersion CAS; on a conflict it rereads the owner and tries again.
// observedGeneration stays the generation this reconcile acted on.
func (r *replicaController) updateStatus(ctx context.Context, owner *Owner, st *kplanev1.ReplicaSetStatus) error {
	if statusEqual(owner.Status, st) {
		return nil
	}
	cur := owner.Object
	err := client.RetryOnConflict(ctx, client.DefaultRetry, func() error {
		next := proto.Clone(cur).(*kplanev1.Object)
		setStatus(next, st)
		_, err := r.api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: next})
		if client.IsConflict(err) {
			resp, gerr := r.api.Get(ctx, &kplanev1.GetRequest{Kind: owner.Kind, Namespace: owner.Meta.GetNamespace(), Name: owner.Meta.GetName()})
			if gerr != nil {
				return gerr
			}
			if resp.GetObject().Meta().GetUid() != owner.Meta.GetUid() {
				return nil // replaced by a namesake: its own reconcile will follow
			}
			cur = resp.GetObject()
			if fresh, ferr := OwnerOf(cur); ferr == nil && statusEqual(fresh.Status, st) {
				return nil
			}
		}
		return err
	})
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of %s: %w", owner.Key(), err)
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
