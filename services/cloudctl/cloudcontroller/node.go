package cloudcontroller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// nodeLoop initialises Nodes from their instances, keeps the shutdown
// taint in step with the instance's state, and deletes a Node whose
// instance is terminated or gone. Keys are node names. The cloud has no
// watch, so every Node is looked at again every period.
type nodeLoop struct {
	api    *client.Client
	cloud  cloudsimv1.CloudClient
	nodes  *informer.Informer
	rec    *record.Recorder
	log    hclog.Logger
	period time.Duration
	// missing holds the nodes reported as without an instance.
	missing sync.Map
}

func newNodeLoop(ac *app.Context, cloud cloudsimv1.CloudClient, rec *record.Recorder, period time.Duration) app.Loop {
	l := &nodeLoop{api: ac.Client, cloud: cloud, nodes: ac.Informers.ForKind("Node"), rec: rec, log: ac.Logger.Named("node"), period: period}
	return app.Loop{Name: LeaseName(LoopNode), Workers: 4, Reconciler: l, Watches: []app.Watch{{Kind: "Node"}}}
}

// instanceOf finds the Node's instance: by providerID once it has one,
// else by the Node's name. found is false when the cloud has none.
func instanceOf(ctx context.Context, cloud cloudsimv1.CloudClient, node *kplanev1.Node) (in *cloudsimv1.Instance, found bool, err error) {
	req := &cloudsimv1.GetInstanceRequest{ProviderId: node.GetSpec().GetProviderId()}
	if req.ProviderId == "" {
		req.Name = node.GetMetadata().GetName()
	}
	resp, err := cloud.GetInstance(ctx, req)
	switch {
	case status.Code(err) == codes.NotFound:
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("cloud: get instance of node %s: %w", node.GetMetadata().GetName(), err)
	}
	return resp.Instance, true, nil
}

// Reconcile makes one Node agree with its instance.
func (l *nodeLoop) Reconcile(ctx context.Context, name string) error {
	obj, ok := l.nodes.Store().Get(name)
	if !ok {
		l.missing.Delete(name)
		return nil
	}
	node := obj.GetNode()
	if node.GetMetadata().GetDeletionTimestamp() != nil {
		return nil
	}
	in, found, err := instanceOf(ctx, l.cloud, node)
	if err != nil {
		return err
	}
	gone := found && in.State == cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED
	if !found && node.GetSpec().GetProviderId() != "" {
		gone = true // it had an instance, and the cloud no longer knows it
	}
	if gone {
		l.log.Info("deleting node: its instance is gone", "node", name, "provider_id", node.GetSpec().GetProviderId())
		l.rec.Eventf(ctx, obj, record.Normal, "DeletingNode", "Deleting node %s because it does not exist in the cloud provider", name)
		if _, _, err := controller.DeleteIfSameUID(ctx, l.api, obj, client.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete node %s: %w", name, err)
		}
		return nil
	}
	if !found {
		// Registered before its instance exists (or under another name):
		// it stays uninitialized, and is looked at again (said once).
		if _, said := l.missing.LoadOrStore(name, true); !said {
			l.log.Warn("no instance for node; it stays uninitialized", "node", name)
		}
		return app.RequeueAfter(l.period)
	}
	l.missing.Delete(name)
	if err := l.syncAddresses(ctx, node, in); err != nil {
		return err
	}
	if err := l.syncSpec(ctx, node, in); err != nil {
		return err
	}
	return app.RequeueAfter(l.period)
}

// addressesOf are the Node addresses an instance has, Hostname last.
func addressesOf(in *cloudsimv1.Instance) []*kplanev1.NodeAddress {
	var out []*kplanev1.NodeAddress
	hasHost := false
	for _, a := range in.Addresses {
		out = append(out, &kplanev1.NodeAddress{Type: a.Type, Address: a.Address})
		hasHost = hasHost || a.Type == kplanev1.NodeHostName
	}
	if !hasHost && in.Name != "" {
		out = append(out, &kplanev1.NodeAddress{Type: kplanev1.NodeHostName, Address: in.Name})
	}
	return out
}

func sameAddresses(a, b []*kplanev1.NodeAddress) bool {
	return slices.EqualFunc(a, b, func(x, y *kplanev1.NodeAddress) bool { return proto.Equal(x, y) })
}

func (l *nodeLoop) syncAddresses(ctx context.Context, node *kplanev1.Node, in *cloudsimv1.Instance) error {
	want := addressesOf(in)
	_, _, err := controller.UpdateStatus(ctx, l.api, node, func(cur *kplanev1.Node) *kplanev1.Node {
		if sameAddresses(cur.GetStatus().GetAddresses(), want) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Node)
		if next.Status == nil {
			next.Status = &kplanev1.NodeStatus{}
		}
		next.Status.Addresses = want
		return next
	})
	if err != nil {
		return fmt.Errorf("set addresses of node %s: %w", node.GetMetadata().GetName(), err)
	}
	return nil
}

// desiredSpec returns cur changed to agree with in, or nil when it does:
// providerID (set once), the topology and instance-type labels, no
// uninitialized taint, and the shutdown taint exactly while in is shut down.
func desiredSpec(cur *kplanev1.Node, in *cloudsimv1.Instance, now time.Time) *kplanev1.Node {
	next := proto.Clone(cur).(*kplanev1.Node)
	if next.Spec == nil {
		next.Spec = &kplanev1.NodeSpec{}
	}
	if next.Metadata == nil {
		next.Metadata = &kplanev1.ObjectMeta{}
	}
	if next.Spec.ProviderId == "" {
		next.Spec.ProviderId = in.ProviderId
	}
	labels := maps.Clone(next.Metadata.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range map[string]string{kplanev1.LabelTopologyZone: in.Zone, kplanev1.LabelTopologyRegion: in.Region, kplanev1.LabelInstanceType: in.InstanceType} {
		if v != "" {
			labels[k] = v
		}
	}
	next.Metadata.Labels = labels
	shutdown := in.State == cloudsimv1.InstanceState_INSTANCE_STATE_SHUTDOWN
	var taints []*kplanev1.Taint
	hasShutdown := false
	for _, t := range next.Spec.Taints {
		switch t.Key {
		case kplanev1.TaintNodeUninitialized:
			continue
		case kplanev1.TaintNodeShutdown:
			if !shutdown {
				continue
			}
			hasShutdown = true
		}
		taints = append(taints, t)
	}
	if shutdown && !hasShutdown {
		taints = append(taints, &kplanev1.Taint{Key: kplanev1.TaintNodeShutdown, Effect: kplanev1.TaintEffectNoSchedule, TimeAdded: timestamppb.New(now)})
	}
	next.Spec.Taints = taints
	if proto.Equal(next, cur) {
		return nil
	}
	return next
}

func (l *nodeLoop) syncSpec(ctx context.Context, node *kplanev1.Node, in *cloudsimv1.Instance) error {
	initialized := false
	_, wrote, err := controller.Update(ctx, l.api, node, func(cur *kplanev1.Node) *kplanev1.Node {
		initialized = hasTaint(cur, kplanev1.TaintNodeUninitialized)
		return desiredSpec(cur, in, time.Now())
	})
	if err != nil {
		return fmt.Errorf("initialise node %s: %w", node.GetMetadata().GetName(), err)
	}
	if wrote && initialized {
		l.log.Info("node initialised", "node", node.GetMetadata().GetName(), "provider_id", in.ProviderId, "zone", in.Zone, "instance_type", in.InstanceType)
	}
	return nil
}

func hasTaint(n *kplanev1.Node, key string) bool {
	return slices.ContainsFunc(n.GetSpec().GetTaints(), func(t *kplanev1.Taint) bool { return t.Key == key })
}
