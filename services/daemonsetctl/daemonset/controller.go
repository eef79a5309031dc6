package daemonset

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// dsController reconciles DaemonSets. Its keys are the sets' "ns/name".
//
// Placement: as Kubernetes does since 1.12, each pod is created unbound
// with a required node affinity on metadata.name (NewPod) and the
// scheduler binds it, so resource fit and host ports are checked like
// for any pod; a pod that does not fit stays Pending with the
// scheduler's reason. Which nodes should run a daemon (Fits) is decided
// here: nodeSelector, required node affinity and taints against the
// tolerations.
type dsController struct {
	api      *client.Client
	log      hclog.Logger
	recorder *record.Recorder
	ctx      *app.Context
	sets     *informer.Informer
	nodes    *informer.Informer
	pods     *informer.Informer
	history  *controller.Revisions
	exp      *controller.Expectations
	control  *controller.ObjectControl
	written  *controller.MutationCache
	now      func() time.Time
}

// NewService returns daemonsetctl: the binary's main runs it with app.Main.
func NewService() app.Service { return newController().service() }

func newController() *dsController {
	return &dsController{exp: controller.NewExpectations(0), written: controller.NewMutationCache(), now: time.Now}
}

func (r *dsController) service() app.Service {
	return app.Service{
		Name:          "daemonsetctl",
		HealthAddr:    ":10266",
		LeaderElected: true,
		Workers:       5,
		Watches: []app.Watch{
			{Kind: kindDaemonSet},
			{Kind: kindControllerRevision, MapToKey: controller.OwnerKeys(kindDaemonSet)},
			{Kind: "Node", MapToKey: r.allSets},
		},
		Setup: r.setup,
	}
}

func (r *dsController) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	r.recorder = record.New(c.Client, "daemonset-controller", c.Identity, c.Logger)
	r.sets = c.Informers.ForKind(kindDaemonSet)
	r.nodes = c.Informers.ForKind("Node")
	r.pods = c.Informers.ForKind("Pod")
	r.history = &controller.Revisions{API: c.Client, Informer: c.Informers.ForKind(kindControllerRevision), OwnerKind: kindDaemonSet, Written: r.written}
	r.control = &controller.ObjectControl{API: c.Client, Expectations: r.exp, OwnerKey: func(o *kplanev1.Object) (string, bool) {
		return controller.OwnerKey(o, kindDaemonSet)
	}}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_daemonsetctl_pod_create_calls_total", Help: "Pod create calls made, successful or not.", Value: &r.control.Counts.Creates},
		app.Counter{Name: "kplane_daemonsetctl_pod_delete_calls_total", Help: "Pod delete calls made, successful or not.", Value: &r.control.Counts.Deletes},
	); err != nil {
		return nil, err
	}
	// Pod events count against the expectations before the set is queued.
	r.pods.AddEventHandler(r.control.Handler(r.podKeys, r.ctx.Enqueue, nil))
	r.sets.AddEventHandler(informer.Handler{OnDelete: func(obj any) {
		if o, ok := informer.ObjectOf(obj); ok {
			r.exp.Delete(o.Key())
			r.written.Forget(o.Key())
		}
	}})
	return r, nil
}

// allSets maps a node event to every DaemonSet: any of them may now fit
// the node or stop fitting it.
func (r *dsController) allSets(*kplanev1.Object) []string {
	if r.sets == nil {
		return nil
	}
	return r.sets.Store().ListKeys()
}

// podKeys maps a pod to its DaemonSet, or (an orphan) to the sets in its
// namespace that select it.
func (r *dsController) podKeys(pod *kplanev1.Object) []string {
	if k, ok := controller.OwnerKey(pod, kindDaemonSet); ok {
		return []string{k}
	}
	if controller.ControllerRef(pod.Meta()) != nil || r.sets == nil {
		return nil
	}
	var keys []string
	objs, _ := r.sets.Store().ByIndex(informer.NamespaceIndex, pod.Meta().GetNamespace())
	for _, o := range objs {
		if sel, err := labels.FromLabelSelector(o.GetDaemonSet().GetSpec().GetSelector()); err == nil && !sel.Empty() && sel.Matches(pod.Meta().GetLabels()) {
			keys = append(keys, o.Key())
		}
	}
	return keys
}

// Reconcile implements app.Reconciler.
func (r *dsController) Reconcile(ctx context.Context, key string) error {
	cached, ok := r.sets.Store().Get(key)
	if !ok {
		r.exp.Delete(key)
		r.written.Forget(key)
		return nil
	}
	obj := r.written.Newest(cached)
	ds := obj.GetDaemonSet()
	if ds.GetMetadata().GetDeletionTimestamp() != nil {
		return nil // the garbage collector removes its pods and revisions
	}
	sel, err := labels.FromLabelSelector(ds.GetSpec().GetSelector())
	if err != nil || sel.Empty() {
		r.recorder.Eventf(ctx, obj, record.Warning, "SelectingAll", "This daemon set's selector is invalid or selects all pods: %v", err)
		return nil
	}
	manage, err := r.control.SatisfiedAt(ctx, key, r.pods)
	if err != nil {
		return err
	}

	var collision *int32
	if st := ds.GetStatus(); st != nil {
		collision = st.CollisionCount
	}
	update, err := r.history.Sync(ctx, obj, ds.GetSpec().GetTemplate(), collision)
	if errors.Is(err, controller.ErrRevisionCollision) {
		c := ds.GetStatus().GetCollisionCount() + 1
		next := &kplanev1.DaemonSetStatus{}
		if ds.GetStatus() != nil {
			next = proto.Clone(ds.GetStatus()).(*kplanev1.DaemonSetStatus)
		}
		next.CollisionCount = &c
		if uerr := r.updateStatus(ctx, obj, next); uerr != nil {
			return uerr
		}
		return fmt.Errorf("daemonset %s: %w; collisionCount is now %d", key, err, c)
	}
	if err != nil {
		return err
	}
	hash := RevisionHash(ds.GetMetadata().GetName(), update)

	m := ds.GetMetadata()
	candidates := r.pods.Store().ClaimCandidates(m.GetNamespace(), m.GetUid(), sel)
	informer.SortByKey(candidates)
	ref := &kplanev1.OwnerReference{ApiVersion: kplanev1.APIVersion(kindDaemonSet), Kind: kindDaemonSet, Name: m.GetName(), Uid: m.GetUid(), Controller: true, BlockOwnerDeletion: true}
	owned, err := controller.Claim(ctx, r.api, obj, ref, candidates, func(o *kplanev1.Object) bool { return sel.Matches(o.Meta().GetLabels()) })
	if err != nil {
		return err
	}
	nodes := r.nodeStates(ds, owned)
	desired := int32(0)
	for _, n := range nodes {
		if n.ShouldRun {
			desired++
		}
	}
	b, err := BoundsOf(ds, desired)
	if err != nil {
		r.recorder.Eventf(ctx, obj, record.Warning, "InvalidStrategy", "%v", err)
		return nil
	}
	var plan Plan
	if manage {
		plan = Decide(b, nodes, hash, r.now())
		if err := r.execute(ctx, obj, plan, update, hash); err != nil {
			return err
		}
	}
	st := Status(ds, b, nodes, hash, collision, r.now())
	if err := r.updateStatus(ctx, obj, st); err != nil {
		return err
	}
	live := map[string]bool{update.GetMetadata().GetName(): true}
	for _, o := range owned {
		live[m.GetName()+"-"+Hash(o.GetPod())] = true
	}
	if err := r.history.Prune(ctx, obj, live, ds.GetSpec().GetRevisionHistoryLimit()); err != nil {
		return err
	}
	if plan.Recheck > 0 {
		return app.RequeueAfter(plan.Recheck)
	}
	return nil
}

// nodeStates pairs every node with the set's pods for it (bound there or
// waiting for the scheduler to bind them there: TargetNode); pods for a
// node that does not exist get a state of their own that may not run
// anything, so they are removed.
func (r *dsController) nodeStates(ds *kplanev1.DaemonSet, owned []*kplanev1.Object) []NodeState {
	byNode := map[string][]*kplanev1.Pod{}
	for _, o := range owned {
		p := o.GetPod()
		target := TargetNode(p)
		byNode[target] = append(byNode[target], p)
	}
	var out []NodeState
	for _, o := range r.nodes.Store().List() {
		n := o.GetNode()
		name := n.GetMetadata().GetName()
		run, cont := Fits(ds.GetSpec().GetTemplate().GetSpec(), n)
		out = append(out, NodeState{Name: name, ShouldRun: run, ShouldContinue: cont, Pods: byNode[name]})
		delete(byNode, name)
	}
	var gone []string
	for name := range byNode {
		gone = append(gone, name)
	}
	sort.Strings(gone)
	for _, name := range gone {
		out = append(out, NodeState{Name: name, Pods: byNode[name]})
	}
	return out
}

func (r *dsController) execute(ctx context.Context, obj *kplanev1.Object, plan Plan, update *kplanev1.ControllerRevision, hash string) error {
	ds := obj.GetDaemonSet()
	key := obj.Key()
	if len(plan.Create) > 0 {
		t, err := rollout.DecodeTemplate(update)
		if err != nil {
			return err
		}
		var mu sync.Mutex
		next := 0
		n, err := r.control.Create(ctx, key, len(plan.Create), func() (*kplanev1.Object, error) {
			mu.Lock()
			node := plan.Create[next]
			next++
			mu.Unlock()
			return kplanev1.Wrap(NewPod(ds, t, hash, node))
		})
		if n > 0 {
			r.log.Info("created pods", "daemonset", key, "count", n)
			r.recorder.Eventf(ctx, obj, record.Normal, "SuccessfulCreate", "Created %d pod(s)", n)
		}
		if err != nil {
			r.recorder.Eventf(ctx, obj, record.Warning, "FailedCreate", "Error creating: %v", err)
			return fmt.Errorf("create pods of %s: %w", key, err)
		}
	}
	if len(plan.Delete) > 0 {
		victims := make([]*kplanev1.Object, len(plan.Delete))
		for i, p := range plan.Delete {
			victims[i] = kplanev1.MustWrap(p)
		}
		n, err := r.control.Delete(ctx, key, victims, client.DeleteOptions{})
		if n > 0 {
			r.log.Info("deleted pods", "daemonset", key, "count", n)
			r.recorder.Eventf(ctx, obj, record.Normal, "SuccessfulDelete", "Deleted %d pod(s)", n)
		}
		if err != nil {
			r.recorder.Eventf(ctx, obj, record.Warning, "FailedDelete", "Error deleting: %v", err)
			return fmt.Errorf("delete pods of %s: %w", key, err)
		}
	}
	return nil
}

func (r *dsController) updateStatus(ctx context.Context, obj *kplanev1.Object, st *kplanev1.DaemonSetStatus) error {
	if proto.Equal(obj.GetDaemonSet().GetStatus(), st) {
		return nil
	}
	got, _, err := controller.UpdateStatus(ctx, r.api, obj, func(cur *kplanev1.Object) *kplanev1.Object {
		if proto.Equal(cur.GetDaemonSet().GetStatus(), st) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Object)
		s := proto.Clone(st).(*kplanev1.DaemonSetStatus)
		if cur.Meta().GetGeneration() != obj.Meta().GetGeneration() {
			s.ObservedGeneration = cur.GetDaemonSet().GetStatus().GetObservedGeneration()
		}
		next.GetDaemonSet().Status = s
		return next
	})
	if err != nil {
		return fmt.Errorf("update status of daemonset %s: %w", obj.Key(), err)
	}
	if got != nil {
		r.written.Wrote(got)
	}
	return nil
}
