package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// recheckSlack is added to computed deadlines when requeueing, so that the
// check runs just after the deadline rather than a hair before it.
const recheckSlack = 50 * time.Millisecond

// nodeController is the node controller. Its work queue keys are node names.
//
// Every timing decision derives from objects, so that a restart or a
// failover neither forgets nor hurries anything: the eviction window of a
// pod starts at its node's NoExecute taint's timeAdded, and "renewed since
// marked Unknown" compares the lease's renewTime with the Ready
// condition's lastHeartbeatTime. The only timing kept in memory is when
// this process last saw each lease change (judged by its own clock, so
// clock skew between hosts does not matter); a fresh process therefore
// gives every node a full grace period.
type nodeController struct {
	cfg   config
	now   func() time.Time
	api   *client.Client
	log   hclog.Logger
	rec   *record.Recorder
	m     *metrics
	actx  *app.Context
	nodes *informer.Informer
	lease *informer.Informer
	pods  *informer.Informer

	limiter *rate.Limiter

	mu         sync.Mutex
	heartbeats map[string]heartbeat // node name → its lease as last seen
	granted    map[string]string    // node name → eviction episode the rate limiter let through
	gone       map[string]time.Time // node name → when first found missing while pods still name it
	deleted    map[string]bool      // node names whose deletion this process watched
	halted     bool                 // evictions stopped: too many nodes unready
}

// NewService returns nodectl: the binary's main runs it with app.Main.
func NewService() app.Service { return newController().service() }

func newController() *nodeController {
	return &nodeController{
		now:        time.Now,
		heartbeats: map[string]heartbeat{},
		granted:    map[string]string{},
		gone:       map[string]time.Time{},
		deleted:    map[string]bool{},
	}
}

// service describes the binary; tests run it with app.Run.
func (c *nodeController) service() app.Service {
	return app.Service{
		Name:          "nodectl",
		HealthAddr:    ":10253",
		LeaderElected: true,
		Workers:       4,
		AddFlags:      c.cfg.addFlags,
		Watches: []app.Watch{
			{Kind: "Node"},
			{Kind: "Lease", Namespace: kplanev1.NamespaceNodeLease},
			{Kind: "Pod", MapToKey: func(o *kplanev1.Object) []string {
				if n := o.GetPod().GetSpec().GetNodeName(); n != "" {
					return []string{n}
				}
				return nil
			}},
		},
		Setup: c.setup,
		Run:   c.run,
	}
}

func (c *nodeController) setup(ac *app.Context) (app.Reconciler, error) {
	if err := c.cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(ac.Registry)
	if err != nil {
		return nil, err
	}
	host := ac.Identity
	if host == "" {
		host, _ = os.Hostname()
	}
	c.actx, c.api, c.log, c.m = ac, ac.Client, ac.Logger, m
	c.rec = record.New(ac.Client, "nodectl", host, ac.Logger)
	c.limiter = rate.NewLimiter(rate.Limit(c.cfg.evictionRate), 1)
	c.nodes = ac.Informers.ForKind("Node")
	if c.lease, err = ac.Informers.For(informer.Selection{Kind: "Lease", Namespace: kplanev1.NamespaceNodeLease}); err != nil {
		return nil, fmt.Errorf("lease informer: %w", err)
	}
	c.pods = ac.Informers.ForKind("Pod")

	// Heartbeats are observed in every replica, leading or not, so that a
	// standby that takes over judges leases by what it has seen rather
	// than granting every node a fresh grace period.
	onLease := func(o *kplanev1.Object) {
		c.observe(o.Meta().GetName(), o.GetLease().GetSpec(), c.now())
	}
	c.lease.AddEventHandler(informer.Handler{
		OnAdd:    onLease,
		OnUpdate: func(_, o *kplanev1.Object) { onLease(o) },
	})
	c.nodes.AddEventHandler(informer.Handler{
		OnAdd: func(o *kplanev1.Object) {
			name := o.Meta().GetName()
			c.mu.Lock()
			delete(c.deleted, name)
			delete(c.gone, name)
			c.mu.Unlock()
			c.heartbeat(name, c.now())
		},
		OnDelete: func(obj any) {
			if o, ok := informer.ObjectOf(obj); ok {
				c.mu.Lock()
				c.deleted[o.Meta().GetName()] = true
				c.mu.Unlock()
			}
		},
	})
	c.log.Info("node lifecycle settings", "monitor_period", c.cfg.monitorPeriod, "grace_period", c.cfg.gracePeriod,
		"pod_eviction_timeout", c.cfg.evictionTimeout, "eviction_rate", c.cfg.evictionRate, "unhealthy_threshold", c.cfg.unhealthyThreshold)
	return c, nil
}

// observe records a lease's renewTime as seen at now.
func (c *nodeController) observe(node string, spec *kplanev1.LeaseSpec, now time.Time) heartbeat {
	c.mu.Lock()
	defer c.mu.Unlock()
	hb := c.heartbeats[node].observe(spec.GetRenewTime(), now)
	c.heartbeats[node] = hb
	return hb
}

// heartbeat returns what was seen of node's lease; a node never seen
// before (no lease yet, or a fresh process) starts its grace period now.
func (c *nodeController) heartbeat(node string, now time.Time) heartbeat {
	c.mu.Lock()
	defer c.mu.Unlock()
	hb, ok := c.heartbeats[node]
	if !ok {
		hb = heartbeat{seenAt: now}
		c.heartbeats[node] = hb
	}
	return hb
}

// leaseOf returns the cached lease spec of node (nil without a lease).
func (c *nodeController) leaseOf(node string) *kplanev1.LeaseSpec {
	o, ok := c.lease.Store().GetByName(kplanev1.NamespaceNodeLease, node)
	if !ok {
		return nil
	}
	return o.GetLease().GetSpec()
}

func (c *nodeController) podsOn(node string) []*kplanev1.Pod {
	objs, err := c.pods.Store().ByIndex(informer.PodNodeNameIndex, node)
	if err != nil {
		// Cannot happen: the factory gives every pod informer this index.
		// Say so loudly, but keep the process (and every other node) going.
		c.log.Error("pods by node index missing; treating the node as having no pods", "node", node, "error", err)
		return nil
	}
	out := make([]*kplanev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetPod())
	}
	return out
}

// run is the monitor loop: every --node-monitor-period it queues every
// node (and every vanished node that pods still name), refreshes the
// metrics and re-judges whether evictions must stop. Reconciles also
// requeue themselves for their own deadlines; this is the safety net.
func (c *nodeController) run(ctx context.Context, _ *app.Context) error {
	t := time.NewTicker(c.cfg.monitorPeriod)
	defer t.Stop()
	c.monitor()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.monitor()
		}
	}
}

func (c *nodeController) monitor() {
	counts := map[string]int{kplanev1.ConditionTrue: 0, kplanev1.ConditionFalse: 0, kplanev1.ConditionUnknown: 0, "None": 0}
	for _, o := range c.nodes.Store().List() {
		s := apiutil.FindCondition(o.GetNode().GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus()
		if s == "" {
			s = "None"
		}
		counts[s]++
		c.actx.Enqueue(o.Meta().GetName())
	}
	for s, n := range counts {
		c.m.nodes.WithLabelValues(s).Set(float64(n))
	}
	queued := map[string]bool{}
	for _, o := range c.pods.Store().List() {
		n := o.GetPod().GetSpec().GetNodeName()
		if n == "" || queued[n] {
			continue
		}
		queued[n] = true
		if _, ok := c.nodes.Store().GetByName("", n); !ok {
			c.actx.Enqueue(n)
		}
	}
	c.evictionsHalted(c.now())
}

// unready counts the nodes whose Ready condition is not True or whose
// lease this controller already judges stale (before the write lands).
func (c *nodeController) unready(now time.Time) (unready, total int) {
	for _, o := range c.nodes.Store().List() {
		name := o.Meta().GetName()
		total++
		hb := c.heartbeat(name, now)
		if now.Sub(hb.seenAt) > c.cfg.gracePeriod ||
			apiutil.FindCondition(o.GetNode().GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus() != kplanev1.ConditionTrue {
			unready++
		}
	}
	return unready, total
}

// evictionsHalted reports whether too many nodes are unready to evict,
// logging only when that changes, not on every check.
func (c *nodeController) evictionsHalted(now time.Time) bool {
	unready, total := c.unready(now)
	h := disrupted(unready, total, c.cfg.unhealthyThreshold)
	c.mu.Lock()
	prev := c.halted
	c.halted = h
	c.mu.Unlock()
	switch {
	case h && !prev:
		c.log.Warn("evictions stopped: too many nodes are unready at once, so the fault is more likely between the control plane and the nodes than in the nodes",
			"unready", unready, "nodes", total, "threshold", c.cfg.unhealthyThreshold)
		c.m.halted.Set(1)
	case !h && prev:
		c.log.Info("evictions resumed: the share of unready nodes is below the threshold again",
			"unready", unready, "nodes", total, "threshold", c.cfg.unhealthyThreshold)
		c.m.halted.Set(0)
	}
	return h
}

// Reconcile brings one node in line with its heartbeat: Ready condition,
// taints, its pods' readiness, and evictions that are due.
func (c *nodeController) Reconcile(ctx context.Context, name string) error {
	obj, ok := c.nodes.Store().GetByName("", name)
	if !ok {
		return c.reconcileGone(ctx, name)
	}
	now := c.now()
	spec := c.leaseOf(name)
	hb := c.heartbeat(name, now)
	if spec != nil {
		hb = c.observe(name, spec, now)
	}
	node, staleIn, err := c.syncReady(ctx, obj.GetNode(), spec, hb, now)
	if err != nil || node == nil {
		return err // nil node: deleted or replaced meanwhile; its events follow
	}
	if node, err = c.syncTaints(ctx, node, now); err != nil || node == nil {
		return err
	}
	if err := c.markPodsNotReady(ctx, node, now); err != nil {
		return err
	}
	next, err := c.evict(ctx, node, now)
	if err != nil {
		return err
	}
	var wait time.Duration
	for _, d := range []time.Duration{staleIn, next} {
		if d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	if wait > 0 {
		return app.RequeueAfter(wait + recheckSlack)
	}
	return nil
}

func (c *nodeController) syncReady(ctx context.Context, node *kplanev1.Node, spec *kplanev1.LeaseSpec, hb heartbeat, now time.Time) (*kplanev1.Node, time.Duration, error) {
	d := decideReady(node, spec.GetRenewTime(), hb, now, c.cfg.gracePeriod)
	if d.cond == nil {
		return node, d.staleIn, nil
	}
	var cond *kplanev1.Condition
	cur, wrote, err := controller.UpdateStatus(ctx, c.api, node, func(cur *kplanev1.Node) *kplanev1.Node {
		dd := decideReady(cur, spec.GetRenewTime(), hb, now, c.cfg.gracePeriod)
		if dd.cond == nil {
			return nil
		}
		cond = dd.cond
		upd := proto.Clone(cur).(*kplanev1.Node)
		if upd.Status == nil {
			upd.Status = &kplanev1.NodeStatus{}
		}
		upd.Status.Conditions = apiutil.SetCondition(upd.Status.Conditions, dd.cond)
		return upd
	})
	if err != nil {
		return nil, 0, fmt.Errorf("set Ready condition of node %s: %w", node.GetMetadata().GetName(), err)
	}
	if cur == nil {
		return nil, 0, nil // deleted or replaced meanwhile: its own events follow
	}
	if wrote {
		c.log.Info("node Ready condition changed", "node", node.GetMetadata().GetName(), "status", cond.GetStatus(), "reason", cond.GetReason())
	}
	return cur, d.staleIn, nil
}

func (c *nodeController) syncTaints(ctx context.Context, node *kplanev1.Node, now time.Time) (*kplanev1.Node, error) {
	if _, ch := desiredTaints(node, now); !ch.changed() {
		c.forgetGrantIfClean(node)
		return node, nil
	}
	var change taintChange
	cur, wrote, err := controller.Update(ctx, c.api, node, func(cur *kplanev1.Node) *kplanev1.Node {
		taints, ch := desiredTaints(cur, now)
		if !ch.changed() {
			return nil
		}
		change = ch
		upd := proto.Clone(cur).(*kplanev1.Node)
		if upd.Spec == nil {
			upd.Spec = &kplanev1.NodeSpec{}
		}
		upd.Spec.Taints = taints
		return upd
	})
	name := node.GetMetadata().GetName()
	if err != nil {
		return nil, fmt.Errorf("update taints of node %s: %w", name, err)
	}
	if cur == nil {
		return nil, nil // deleted or replaced meanwhile: its own events follow
	}
	c.forgetGrantIfClean(cur)
	if !wrote {
		return cur, nil
	}
	c.log.Info("node taints changed", "node", name, "added", change.added, "removed", change.removed)
	obj := kplanev1.MustWrap(cur)
	ready := apiutil.FindCondition(cur.GetStatus().GetConditions(), kplanev1.NodeReady)
	// Events tell of readiness; pressure taints follow conditions the node
	// agent already announced.
	added, removed := readinessTaints(change.added), readinessTaints(change.removed)
	switch {
	case len(added) > 0:
		c.rec.Eventf(ctx, obj, record.Normal, "NodeNotReady", "Node %s status is now %s (%s); tainted %s",
			name, ready.GetStatus(), ready.GetReason(), strings.Join(added, ", "))
	case len(removed) > 0 && ready.GetStatus() == kplanev1.ConditionTrue:
		c.rec.Eventf(ctx, obj, record.Normal, "NodeReady", "Node %s is ready again; removed taints %s",
			name, strings.Join(removed, ", "))
	}
	return cur, nil
}

// markPodsNotReady sets Ready=False on every pod of a node that is not
// ready, at once, so that endpoints stop routing to them long before they
// are evicted.
func (c *nodeController) markPodsNotReady(ctx context.Context, node *kplanev1.Node, now time.Time) error {
	if s := apiutil.FindCondition(node.GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus(); s == kplanev1.ConditionTrue || s == "" {
		return nil
	}
	name := node.GetMetadata().GetName()
	var errs []error
	for _, pod := range c.podsOn(name) {
		if podNotReady(pod, name, now) == nil {
			continue
		}
		_, _, err := controller.UpdateStatus(ctx, c.api, pod, func(cur *kplanev1.Pod) *kplanev1.Pod {
			st := podNotReady(cur, name, now)
			if st == nil {
				return nil
			}
			upd := proto.Clone(cur).(*kplanev1.Pod)
			upd.Status = st
			return upd
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("mark pod %s/%s not ready: %w", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// episode names one eviction window of a node for the rate limiter: the
// node's uid and the earliest timeAdded of its NoExecute taints.
func episode(node *kplanev1.Node) string {
	var first *kplanev1.Taint
	for _, t := range node.GetSpec().GetTaints() {
		if t.GetEffect() == kplanev1.TaintEffectNoExecute && t.GetTimeAdded() != nil &&
			(first == nil || t.GetTimeAdded().AsTime().Before(first.GetTimeAdded().AsTime())) {
			first = t
		}
	}
	if first == nil {
		return ""
	}
	return node.GetMetadata().GetUid() + "@" + first.GetTimeAdded().AsTime().Format(time.RFC3339Nano)
}

func (c *nodeController) forgetGrantIfClean(node *kplanev1.Node) {
	if episode(node) == "" {
		c.mu.Lock()
		delete(c.granted, node.GetMetadata().GetName())
		c.mu.Unlock()
	}
}

// grant asks the eviction rate limiter for a node's eviction episode; a
// node let through evicts every pod that falls due in that episode. It
// returns how long to wait when the limiter says not yet.
func (c *nodeController) grant(node, ep string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.granted[node] == ep {
		return 0
	}
	r := c.limiter.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	c.granted[node] = ep
	return 0
}

// evict force-deletes the pods of a NoExecute-tainted node whose eviction
// deadline has passed, and returns how long until the next one falls due.
func (c *nodeController) evict(ctx context.Context, node *kplanev1.Node, now time.Time) (time.Duration, error) {
	name := node.GetMetadata().GetName()
	taints := node.GetSpec().GetTaints()
	var due []*kplanev1.Pod
	var next time.Time
	for _, pod := range c.podsOn(name) {
		if apiutil.IsPodTerminal(pod) {
			continue
		}
		dl, ok := evictionDeadline(taints, pod, c.cfg.evictionTimeout)
		switch {
		case !ok:
		case !dl.After(now):
			due = append(due, pod)
		case next.IsZero() || dl.Before(next):
			next = dl
		}
	}
	var wait time.Duration
	if !next.IsZero() {
		wait = next.Sub(now)
	}
	if len(due) == 0 {
		return wait, nil
	}
	if c.evictionsHalted(now) {
		// Logged by evictionsHalted when it started; check again later.
		return c.cfg.monitorPeriod, nil
	}
	if d := c.grant(name, episode(node), now); d > 0 {
		c.log.Debug("eviction rate limited", "node", name, "pods_due", len(due), "wait", d)
		return d, nil
	}
	var errs []error
	for _, pod := range due {
		deleted, err := c.evictPod(ctx, pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("evict pod %s/%s: %w", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), err))
			continue
		}
		if deleted {
			c.m.evictions.Inc()
			c.log.Info("evicted pod from NoExecute-tainted node", "node", name, "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName())
			c.rec.Eventf(ctx, kplanev1.MustWrap(pod), record.Normal, "TaintManagerEviction",
				"Deleted pod %s/%s: node %s is tainted NoExecute past the pod's eviction timeout", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), name)
		}
	}
	return wait, errors.Join(errs...)
}

// evictPod deletes a pod that is due for eviction from a NoExecute-tainted
// node. A StatefulSet's pod is deleted gracefully, as Kubernetes' taint
// manager deletes every pod: it stays (Terminating) until its node agent
// confirms the containers stopped or the node object is deleted. Its
// StatefulSet creates the replacement of an identity only once the old pod
// object is gone, so a force delete here would let a partitioned node keep
// running the old pod while the new one starts elsewhere: two pods with one
// identity. Other pods are force-deleted, kplane's choice for pods whose
// controllers replace them under new names anyway (docs/architecture.md).
func (c *nodeController) evictPod(ctx context.Context, pod *kplanev1.Pod) (bool, error) {
	if owner := controller.ControllerRef(pod.GetMetadata()); owner != nil && owner.GetKind() == "StatefulSet" {
		if pod.GetMetadata().GetDeletionTimestamp() != nil {
			return false, nil // already terminating: its agent or the node's deletion finishes it
		}
		_, deleted, err := controller.DeleteIfSameUID(ctx, c.api, kplanev1.MustWrap(pod), client.DeleteOptions{})
		return deleted, err
	}
	return c.forceDelete(ctx, pod)
}

// forceDelete deletes a pod at once (its agent is gone, so nobody would
// finish a graceful deletion), only if it is still the pod that was judged
// (uid precondition). It reports whether this call deleted it.
func (c *nodeController) forceDelete(ctx context.Context, pod *kplanev1.Pod) (bool, error) {
	zero := int64(0)
	_, deleted, err := controller.DeleteIfSameUID(ctx, c.api, kplanev1.MustWrap(pod), client.DeleteOptions{GracePeriodSeconds: &zero})
	return deleted, err
}

// reconcileGone deletes the pods of a node that no longer exists. A node
// whose deletion this process watched is handled at once; one merely found
// missing (e.g. deleted while nodectl was down, or a pod naming a node not
// created yet) gets a grace period first, confirmed against the apiserver.
func (c *nodeController) reconcileGone(ctx context.Context, name string) error {
	pods := c.podsOn(name)
	if len(pods) == 0 {
		c.mu.Lock()
		delete(c.heartbeats, name)
		delete(c.granted, name)
		delete(c.gone, name)
		delete(c.deleted, name)
		c.mu.Unlock()
		return nil
	}
	if _, err := client.Nodes(c.api).Get(ctx, "", name); err == nil {
		return app.RequeueAfter(c.cfg.monitorPeriod) // the cache lags behind a create
	} else if !client.IsNotFound(err) {
		return fmt.Errorf("confirm node %s is gone: %w", name, err)
	}
	now := c.now()
	c.mu.Lock()
	deleted := c.deleted[name]
	since, ok := c.gone[name]
	if !ok {
		since = now
		c.gone[name] = now
	}
	c.mu.Unlock()
	if wait := c.cfg.gracePeriod - now.Sub(since); !deleted && wait > 0 {
		return app.RequeueAfter(wait + recheckSlack)
	}
	var errs []error
	for _, pod := range pods {
		ok, err := c.forceDelete(ctx, pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete pod %s/%s of deleted node %s: %w", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), name, err))
			continue
		}
		if ok {
			c.m.deletedNodePods.Inc()
			c.log.Info("deleted pod of deleted node", "node", name, "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName())
			c.rec.Eventf(ctx, kplanev1.MustWrap(pod), record.Normal, "NodeDeleted", "Deleted pod %s/%s: its node %s was deleted",
				pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), name)
		}
	}
	return errors.Join(errs...)
}
