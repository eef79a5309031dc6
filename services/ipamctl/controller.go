package main

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	// rangeIndex indexes Nodes by the numbers of the node ranges their
	// spec.podCIDR overlaps, so "is range i free" is one lookup.
	rangeIndex = "podCIDRRange"

	// conditionNetworkUnavailable is Kubernetes' node condition for a node
	// whose network is not set up; ipamctl owns it for "no pod CIDR".
	conditionNetworkUnavailable = "NetworkUnavailable"
	reasonCIDRNotAvailable      = "CIDRNotAvailable"
	reasonCIDRAssigned          = "CIDRAssigned"

	// catchUpLimit bounds how long a new leader waits for its cache to show
	// what the apiserver held when it took over.
	catchUpLimit = 10 * time.Second
	// staleRetry is how soon a reconcile that arrived before the cache
	// caught up runs again.
	staleRetry = 50 * time.Millisecond
)

// controller assigns pod CIDRs. Its work queue keys are node names.
//
// Which ranges are taken is read from the Nodes in the cache (an index by
// range), plus the ranges this leader has written but its cache has not
// shown yet (pending). Nothing else is remembered, so a Node's deletion
// frees its range and a restart rebuilds everything from the Nodes.
type controller struct {
	cfg   config
	set   *cidrSet
	api   *client.Client
	log   hclog.Logger
	rec   *record.Recorder
	actx  *app.Context
	nodes *informer.Informer

	// fresh is true while this leadership term's cache has caught up with
	// the apiserver; before that a free-looking range may be one the
	// previous leader just gave away.
	fresh atomic.Bool

	mu      sync.Mutex
	next    int                 // range to try first (next-fit: a freed range is reused late)
	pending map[int]pendingInfo // range → this leader's write, until the cache shows it
}

// pendingInfo is a range this leader reserved: rv is 0 while the write is
// in flight, then the resourceVersion it produced.
type pendingInfo struct {
	node string
	rv   int64
}

func newController() *controller {
	return &controller{pending: map[int]pendingInfo{}}
}

// service describes the binary; tests run it with app.Run.
func (c *controller) service() app.Service {
	return app.Service{
		Name:          "ipamctl",
		HealthAddr:    ":10254",
		LeaderElected: true,
		Workers:       4,
		AddFlags:      c.cfg.addFlags,
		Watches:       []app.Watch{{Kind: "Node"}},
		Setup:         c.setup,
		Run:           c.run,
	}
}

func (c *controller) setup(ac *app.Context) (app.Reconciler, error) {
	set, err := newCIDRSet(c.cfg.clusterCIDR, c.cfg.nodeMaskSize)
	if err != nil {
		return nil, err
	}
	c.set, c.actx, c.api, c.log = set, ac, ac.Client, ac.Logger
	c.rec = record.New(ac.Client, "ipamctl", ac.Identity, ac.Logger)
	c.nodes = ac.Informers.ForKind("Node")
	err = c.nodes.AddIndexers(informer.Indexers{rangeIndex: func(o *kplanev1.Object) []string {
		idx := c.set.indexes(o.GetNode().GetSpec().GetPodCidr())
		out := make([]string, len(idx))
		for i, n := range idx {
			out[i] = strconv.Itoa(n)
		}
		return out
	}})
	if err != nil {
		return nil, fmt.Errorf("node range index: %w", err)
	}
	// A deleted node frees its range: nodes still waiting for one retry.
	c.nodes.AddEventHandler(informer.Handler{OnDelete: func(any) { c.enqueueWaiting() }})
	if err := c.registerMetrics(ac.Registry); err != nil {
		return nil, err
	}
	c.log.Info("pod CIDR settings", "cluster_cidr", set.cluster, "node_cidr_mask_size", set.mask, "node_ranges", set.count)
	return c, nil
}

func (c *controller) registerMetrics(reg *prometheus.Registry) error {
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kplane_ipamctl_node_ranges", Help: "Node ranges the cluster CIDR holds."},
			func() float64 { return float64(c.set.count) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kplane_ipamctl_node_ranges_used", Help: "Node ranges held by Nodes (as cached)."},
			func() float64 { return float64(c.used()) }),
	} {
		if err := reg.Register(g); err != nil {
			return fmt.Errorf("register ipamctl metrics: %w", err)
		}
	}
	return nil
}

// used counts the ranges held by cached Nodes.
func (c *controller) used() int {
	n := 0
	for i := 0; i < c.set.count; i++ {
		if keys, _ := c.nodes.Store().IndexKeys(rangeIndex, strconv.Itoa(i)); len(keys) > 0 {
			n++
		}
	}
	return n
}

func (c *controller) enqueueWaiting() {
	for _, o := range c.nodes.Store().List() {
		if o.GetNode().GetSpec().GetPodCidr() == "" {
			c.actx.Enqueue(o.Key())
		}
	}
}

// run holds this leadership term's allocations until the cache has caught
// up: a standby's cache may lag the last writes of the leader it replaces,
// and a range those writes took would look free. So a term lists the Nodes
// (a quorum read), waits until the informer has applied that list's newest
// write, forgets the previous term's pending ranges, and only then allows
// allocation.
func (c *controller) run(ctx context.Context, _ *app.Context) error {
	defer c.fresh.Store(false)
	start := time.Now()
	catchCtx, cancel := context.WithTimeout(ctx, catchUpLimit)
	err := informer.CatchUp(catchCtx, c.api, c.nodes)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		c.log.Warn("cache did not catch up with the apiserver in time; allocating anyway", "error", err)
	}
	c.mu.Lock()
	c.pending = map[int]pendingInfo{}
	c.mu.Unlock()
	c.fresh.Store(true)
	c.log.Info("leading: cache caught up", "wait", time.Since(start), "nodes", c.nodes.Store().Len(), "ranges_used", c.used())
	c.enqueueWaiting()
	<-ctx.Done()
	return nil
}

func (c *controller) cacheRevision() int64 {
	rv, _ := strconv.ParseInt(c.nodes.LastSyncResourceVersion(), 10, 64)
	return rv
}

func resourceVersion(m *kplanev1.ObjectMeta) int64 {
	rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return rv
}

// Reconcile gives the node a pod CIDR when it has none: it reserves a free
// range, writes it with a compare-and-swap update (spec.podCIDR can be set
// once), and on a full cluster CIDR reports that on the node instead.
func (c *controller) Reconcile(ctx context.Context, name string) error {
	if !c.fresh.Load() {
		return app.RequeueAfter(staleRetry)
	}
	obj, ok := c.nodes.Store().Get(name)
	if !ok {
		return nil // deleted: its range is free once the cache dropped it
	}
	node := obj.GetNode()
	if node.GetSpec().GetPodCidr() != "" || node.GetMetadata().GetDeletionTimestamp() != nil {
		return nil
	}
	i, ok := c.reserve(name)
	if !ok {
		return c.exhausted(ctx, obj)
	}
	cidr := c.set.prefix(i)
	rv, err := c.assign(ctx, node, cidr)
	c.settle(i, rv)
	if err != nil {
		return err
	}
	if rv == 0 {
		return nil
	}
	c.log.Info("assigned pod CIDR", "node", name, "pod_cidr", cidr)
	if condition(node, conditionNetworkUnavailable) == nil {
		return nil
	}
	return c.setNetworkCondition(ctx, name, "False", reasonCIDRAssigned, "pod CIDR "+cidr.String()+" assigned")
}

// reserve picks a free range for node, next-fit, and marks it pending.
func (c *controller) reserve(node string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.cacheRevision()
	for i, p := range c.pending {
		if p.rv != 0 && p.rv <= seen {
			delete(c.pending, i) // the cache shows the write now
		}
	}
	for k := 0; k < c.set.count; k++ {
		i := (c.next + k) % c.set.count
		if _, taken := c.pending[i]; taken {
			continue
		}
		if keys, _ := c.nodes.Store().IndexKeys(rangeIndex, strconv.Itoa(i)); len(keys) > 0 {
			continue
		}
		c.pending[i] = pendingInfo{node: node}
		c.next = (i + 1) % c.set.count
		return i, true
	}
	return 0, false
}

// settle records the outcome of a reservation: the revision of the write
// that took it, or (rv 0) nothing written, which frees it.
func (c *controller) settle(i int, rv int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv == 0 {
		delete(c.pending, i)
		return
	}
	c.pending[i] = pendingInfo{node: c.pending[i].node, rv: rv}
}

// assign writes cidr into the node's spec, rereading on conflicts (the
// agent's status writes move the resourceVersion). It returns the written
// resourceVersion, or 0 when nothing was written: the node is gone,
// replaced, or got a range meanwhile.
func (c *controller) assign(ctx context.Context, cached *kplanev1.Node, cidr netip.Prefix) (int64, error) {
	nodes := client.Nodes(c.api)
	name, uid := cached.GetMetadata().GetName(), cached.GetMetadata().GetUid()
	var rv int64
	err := client.RetryOnConflict(ctx, client.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, "", name)
		switch {
		case client.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case cur.GetMetadata().GetUid() != uid || cur.GetSpec().GetPodCidr() != "" || cur.GetMetadata().GetDeletionTimestamp() != nil:
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Node)
		if next.Spec == nil {
			next.Spec = &kplanev1.NodeSpec{}
		}
		next.Spec.PodCidr, next.Spec.PodCidrs = cidr.String(), []string{cidr.String()}
		out, err := nodes.Update(ctx, next)
		if err != nil {
			return err
		}
		rv = resourceVersion(out.GetMetadata())
		return nil
	})
	if client.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("set pod CIDR %s on node %s: %w", cidr, name, err)
	}
	return rv, nil
}

// exhausted reports a node left without a range: a Warning Event and the
// NetworkUnavailable condition. The node is reconciled again when another
// node is deleted (or on resync).
func (c *controller) exhausted(ctx context.Context, obj *kplanev1.Object) error {
	msg := fmt.Sprintf("no pod CIDR left: every /%d range of cluster CIDR %s is in use", c.set.mask, c.set.cluster)
	name := obj.Meta().GetName()
	if cond := condition(obj.GetNode(), conditionNetworkUnavailable); cond.GetStatus() == "True" && cond.GetReason() == reasonCIDRNotAvailable {
		return nil // already reported
	}
	c.log.Warn("node left without a pod CIDR", "node", name, "cluster_cidr", c.set.cluster)
	c.rec.Eventf(ctx, obj, record.Warning, reasonCIDRNotAvailable, "Node %s status is now: %s (%s)", name, reasonCIDRNotAvailable, msg)
	return c.setNetworkCondition(ctx, name, "True", reasonCIDRNotAvailable, msg)
}

// setNetworkCondition writes the node's NetworkUnavailable condition with a
// compare-and-swap status update. Going to False is only written over an
// existing condition: a node that never lacked a range needs none.
func (c *controller) setNetworkCondition(ctx context.Context, name, status, reason, msg string) error {
	nodes := client.Nodes(c.api)
	err := client.RetryOnConflict(ctx, client.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, "", name)
		if err != nil {
			return err
		}
		old := condition(cur, conditionNetworkUnavailable)
		if (old == nil && status == "False") || (old.GetStatus() == status && old.GetReason() == reason) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Node)
		if next.Status == nil {
			next.Status = &kplanev1.NodeStatus{}
		}
		now := timestamppb.Now()
		cond := &kplanev1.Condition{Type: conditionNetworkUnavailable, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
		if old.GetStatus() == status {
			cond.LastTransitionTime = old.GetLastTransitionTime()
		}
		conds := []*kplanev1.Condition{cond}
		for _, c := range next.Status.Conditions {
			if c.GetType() != conditionNetworkUnavailable {
				conds = append(conds, c)
			}
		}
		next.Status.Conditions = conds
		_, err = nodes.UpdateStatus(ctx, next)
		return err
	})
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set condition %s=%s on node %s: %w", conditionNetworkUnavailable, status, name, err)
	}
	return nil
}

func condition(n *kplanev1.Node, typ string) *kplanev1.Condition {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}
