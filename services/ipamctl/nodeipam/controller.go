// Package nodeipam is ipamctl's control loop: it watches Nodes and gives
// every Node without one a pod CIDR, a range of --node-cidr-mask-size cut
// from --cluster-cidr, written once as spec.podCIDR. The Nodes are the
// only record of what is taken, so a deleted Node's range is free again
// and a restarted ipamctl knows everything from its cache.
package nodeipam

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	// rangeIndex indexes Nodes by the numbers of the node ranges their
	// spec.podCIDR overlaps, so "is range i free" is one lookup.
	rangeIndex = "podCIDRRange"

	// Reasons of the NetworkUnavailable condition and of the Event, as
	// Kubernetes' node IPAM controller spells them.
	reasonCIDRNotAvailable = "CIDRNotAvailable"
	reasonCIDRAssigned     = "CIDRAssigned"
	// reasonNoRouteCreated is the route controller's (cloudctl's), set
	// by a node agent with --cloud-provider=external.
	reasonNoRouteCreated = "NoRouteCreated"
)

// ipamController assigns pod CIDRs. Its work queue keys are node names.
//
// Which ranges are taken is read from the Nodes in the cache (an index by
// range), plus the ranges this process has written but its cache has not
// shown yet (pending). Nothing else is remembered, so a Node's deletion
// frees its range and a restart rebuilds everything from the Nodes. A new
// leader must not trust a cache that lags its predecessor's last writes (a
// range they took would look free, and spec.podCIDR cannot be changed
// afterwards), so the Service sets RequireCatchUp: pkg/app starts no
// reconcile of a term before the cache shows what the apiserver holds.
type ipamController struct {
	cfg   config
	set   *cidrSet
	api   *client.Client
	log   hclog.Logger
	rec   *record.Recorder
	nodes *informer.Informer
	// enqueue queues a node for reconcile (the app.Context's queue).
	enqueue func(name string)

	mu      sync.Mutex
	next    int                 // range to try first (next-fit: a freed range is reused late)
	pending map[int]pendingInfo // range → this process's write, until the cache shows it
}

// pendingInfo is a range this process reserved: rv is 0 while the write
// is in flight, then the resourceVersion it produced, or outcomeUnknown
// when the write failed in a way that may still have applied it.
type pendingInfo struct {
	node string
	rv   int64
	// uncertain is set once a write of this reservation had an unknown
	// outcome: a later "nothing written" may mean that earlier write
	// landed, so only the cache may free the range then.
	uncertain bool
}

// outcomeUnknown marks a reservation whose write may or may not have
// landed (a timeout, a dropped connection): it is kept until the cache
// shows the node with a pod CIDR, or without the node, since a range
// freed too early could be given to a second node.
const outcomeUnknown = -1

// NewService returns ipamctl: the binary's main runs it with app.Main.
func NewService() app.Service {
	c := &ipamController{pending: map[int]pendingInfo{}}
	return app.Service{
		Name:           "ipamctl",
		HealthAddr:     ":10254",
		LeaderElected:  true,
		RequireCatchUp: true,
		Workers:        4,
		AddFlags:       c.cfg.addFlags,
		Watches:        []app.Watch{{Kind: "Node"}},
		Setup:          c.setup,
	}
}

func (c *ipamController) setup(ac *app.Context) (app.Reconciler, error) {
	set, err := newCIDRSet(c.cfg.clusterCIDR, c.cfg.nodeMaskSize)
	if err != nil {
		return nil, err
	}
	c.set, c.enqueue, c.api, c.log = set, ac.Enqueue, ac.Client, ac.Logger
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

func (c *ipamController) registerMetrics(reg *prometheus.Registry) error {
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
func (c *ipamController) used() int {
	n := 0
	for i := 0; i < c.set.count; i++ {
		if c.heldByNode(i) {
			n++
		}
	}
	return n
}

func (c *ipamController) heldByNode(i int) bool {
	keys, _ := c.nodes.Store().IndexKeys(rangeIndex, strconv.Itoa(i))
	return len(keys) > 0
}

func (c *ipamController) enqueueWaiting() {
	for _, o := range c.nodes.Store().List() {
		if o.GetNode().GetSpec().GetPodCidr() == "" {
			c.enqueue(o.Key())
		}
	}
}

// Reconcile gives the node a pod CIDR when it has none: it reserves a free
// range, writes it with a compare-and-swap update (spec.podCIDR can be set
// once), and on a full cluster CIDR reports that on the node instead.
func (c *ipamController) Reconcile(ctx context.Context, name string) error {
	obj, ok := c.nodes.Store().Get(name)
	if !ok {
		return nil // deleted: its range is free once the cache dropped it
	}
	node := obj.GetNode()
	if node.GetSpec().GetPodCidr() != "" || node.GetMetadata().GetDeletionTimestamp() != nil {
		return nil
	}
	i, ok, err := c.reserve(name)
	if err != nil {
		return err
	}
	if !ok {
		return c.exhausted(ctx, obj)
	}
	cidr := c.set.prefix(i)
	written, err := c.assign(ctx, node, cidr)
	c.settle(i, written, err)
	if err != nil || written == nil {
		return err
	}
	c.log.Info("assigned pod CIDR", "node", name, "pod_cidr", cidr)
	return c.setNetworkCondition(ctx, written, kplanev1.ConditionFalse, reasonCIDRAssigned, "pod CIDR "+cidr.String()+" assigned")
}

// reserve picks a free range for node, next-fit, and marks it pending.
func (c *ipamController) reserve(node string) (int, bool, error) {
	seen, err := controller.CacheRevision(c.nodes)
	if err != nil {
		return 0, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.pending {
		switch {
		case p.rv > 0 && p.rv <= seen:
			delete(c.pending, i) // the cache shows the write now
		case p.rv == outcomeUnknown && c.nodeSettled(p.node):
			delete(c.pending, i) // the node's range, ours or not, is in the index now
		}
	}
	// A node whose last write had an unknown outcome tries the same range
	// again: that range is its own either way, and taking a second one
	// would leave the first blocked by the node itself (on a full cluster
	// CIDR, for good).
	for i, p := range c.pending {
		if p.node == node && p.rv == outcomeUnknown {
			c.pending[i] = pendingInfo{node: node, uncertain: true}
			return i, true, nil
		}
	}
	for k := 0; k < c.set.count; k++ {
		i := (c.next + k) % c.set.count
		if _, taken := c.pending[i]; taken || c.heldByNode(i) {
			continue
		}
		c.pending[i] = pendingInfo{node: node}
		c.next = (i + 1) % c.set.count
		return i, true, nil
	}
	return 0, false, nil
}

// settle records the outcome of a reservation: the written node, whose
// resourceVersion the cache must reach before the index alone keeps the
// range taken; nil with an error that may hide a write, which keeps it
// until the cache tells (outcomeUnknown), as does any outcome of a retry
// of such a write; or nil otherwise (nothing written), which frees it.
func (c *ipamController) settle(i int, written *kplanev1.Node, writeErr error) {
	if c.record(i, written, writeErr) {
		// A node that found every range taken while this one was in
		// flight was told the cluster CIDR is full: it may have it now.
		c.enqueueWaiting()
	}
}

// record is settle's bookkeeping, under the lock; it reports whether the
// range was freed.
func (c *ipamController) record(i int, written *kplanev1.Node, writeErr error) (freed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if written == nil {
		p := c.pending[i]
		if p.uncertain || (writeErr != nil && client.MayHaveWritten(writeErr)) {
			c.pending[i] = pendingInfo{node: p.node, rv: outcomeUnknown, uncertain: true}
			return false
		}
		delete(c.pending, i)
		return true
	}
	rv, err := apiutil.ParseResourceVersion(written.GetMetadata().GetResourceVersion())
	if err != nil {
		// Never compared with the cache, so never freed by it: a range
		// lost until restart is better than one given twice.
		c.log.Error("written node has a bad resourceVersion; its range stays reserved", "node", written.GetMetadata().GetName(), "error", err)
		rv = math.MaxInt64
	}
	c.pending[i] = pendingInfo{node: c.pending[i].node, rv: rv}
	return false
}

// nodeSettled reports whether the cache shows node with a pod CIDR, or no
// longer shows it: either way a write of ours can no longer land unseen
// (spec.podCIDR is set once, and a deleted node takes no writes).
func (c *ipamController) nodeSettled(node string) bool {
	obj, ok := c.nodes.Store().Get(node)
	return !ok || obj.GetNode().GetSpec().GetPodCidr() != ""
}

// assign writes cidr into the node's spec (a CAS update that rereads on
// conflicts: the agent's status writes move the resourceVersion). It
// returns the written node, or nil when nothing was written: the node is
// gone, replaced, being deleted, or got a range meanwhile.
func (c *ipamController) assign(ctx context.Context, cached *kplanev1.Node, cidr netip.Prefix) (*kplanev1.Node, error) {
	out, wrote, err := controller.Update(ctx, c.api, cached, func(cur *kplanev1.Node) *kplanev1.Node {
		if cur.GetSpec().GetPodCidr() != "" || cur.GetMetadata().GetDeletionTimestamp() != nil {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Node)
		if next.Spec == nil {
			next.Spec = &kplanev1.NodeSpec{}
		}
		next.Spec.PodCidr, next.Spec.PodCidrs = cidr.String(), []string{cidr.String()}
		return next
	})
	if err != nil {
		return nil, fmt.Errorf("set pod CIDR %s on node %s: %w", cidr, cached.GetMetadata().GetName(), err)
	}
	if !wrote {
		return nil, nil
	}
	return out, nil
}

// exhausted reports a node left without a range: a Warning Event and the
// NetworkUnavailable condition. The node is reconciled again when another
// node is deleted (or on resync).
func (c *ipamController) exhausted(ctx context.Context, obj *kplanev1.Object) error {
	msg := fmt.Sprintf("no pod CIDR left: every /%d range of cluster CIDR %s is in use", c.set.mask, c.set.cluster)
	node := obj.GetNode()
	if cond := networkCondition(node); cond.GetStatus() == kplanev1.ConditionTrue && cond.GetReason() == reasonCIDRNotAvailable {
		return nil // already reported
	}
	name := node.GetMetadata().GetName()
	c.log.Warn("node left without a pod CIDR", "node", name, "cluster_cidr", c.set.cluster)
	c.rec.Eventf(ctx, obj, record.Warning, reasonCIDRNotAvailable, "Node %s status is now: %s (%s)", name, reasonCIDRNotAvailable, msg)
	return c.setNetworkCondition(ctx, node, kplanev1.ConditionTrue, reasonCIDRNotAvailable, msg)
}

// setNetworkCondition writes the node's NetworkUnavailable condition with a
// compare-and-swap status update. Going to False is only written over an
// existing condition: a node that never lacked a range needs none.
func (c *ipamController) setNetworkCondition(ctx context.Context, node *kplanev1.Node, status, reason, msg string) error {
	_, _, err := controller.UpdateStatus(ctx, c.api, node, func(cur *kplanev1.Node) *kplanev1.Node {
		old := networkCondition(cur)
		if (old == nil && status == kplanev1.ConditionFalse) || (old.GetStatus() == status && old.GetReason() == reason) {
			return nil
		}
		if status == kplanev1.ConditionFalse && old.GetReason() == reasonNoRouteCreated {
			// The cloud's route controller (cloudctl) owns the condition
			// of this node: the network is there once the route is.
			return nil
		}
		now := timestamppb.Now()
		next := proto.Clone(cur).(*kplanev1.Node)
		if next.Status == nil {
			next.Status = &kplanev1.NodeStatus{}
		}
		next.Status.Conditions = apiutil.SetStatusCondition(next.Status.Conditions, &kplanev1.Condition{
			Type: kplanev1.NodeNetworkUnavailable, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now})
		return next
	})
	if err != nil {
		return fmt.Errorf("set condition %s=%s on node %s: %w", kplanev1.NodeNetworkUnavailable, status, node.GetMetadata().GetName(), err)
	}
	return nil
}

// networkCondition returns the node's NetworkUnavailable condition, or nil.
func networkCondition(n *kplanev1.Node) *kplanev1.Condition {
	return apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeNetworkUnavailable)
}
