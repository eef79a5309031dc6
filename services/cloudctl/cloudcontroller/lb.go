package cloudcontroller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// serviceLoop gives every type LoadBalancer Service a cloud load balancer
// over the ready Nodes' nodePorts, writes its address into
// status.loadBalancer, follows the Nodes as they come and go, and deletes
// the load balancer (then the cleanup finalizer) when the Service goes or
// changes type. Keys are Service keys (ns/name); a Node change queues
// every LoadBalancer Service.
type serviceLoop struct {
	api      *client.Client
	cloud    cloudsimv1.CloudClient
	services *informer.Informer
	nodes    *informer.Informer
	rec      *record.Recorder
	log      hclog.Logger
	period   time.Duration
}

func newServiceLoop(ac *app.Context, cloud cloudsimv1.CloudClient, rec *record.Recorder, period time.Duration) app.Loop {
	l := &serviceLoop{api: ac.Client, cloud: cloud, services: ac.Informers.ForKind("Service"), nodes: ac.Informers.ForKind("Node"),
		rec: rec, log: ac.Logger.Named("service"), period: period}
	return app.Loop{Name: LeaseName(LoopService), Workers: 4, Reconciler: l, Watches: []app.Watch{
		{Kind: "Service"},
		{Kind: "Node", MapToKey: func(*kplanev1.Object) []string { return l.loadBalancerKeys() }},
	}}
}

// loadBalancerKeys are the keys of every Service that has or wants a load
// balancer.
func (l *serviceLoop) loadBalancerKeys() []string {
	var keys []string
	for _, o := range l.services.Store().List() {
		if s := o.GetService(); s.GetSpec().GetType() == kplanev1.ServiceTypeLoadBalancer || slices.Contains(s.GetMetadata().GetFinalizers(), kplanev1.FinalizerLoadBalancerCleanup) {
			keys = append(keys, o.Key())
		}
	}
	return keys
}

// LoadBalancerName is the cloud name of a Service's load balancer:
// <namespace>.<name> (neither holds a dot, so it is unique), known even
// after the Service is gone.
func LoadBalancerName(namespace, name string) string { return namespace + "." + name }

// wantsLoadBalancer: type LoadBalancer and not being deleted.
func wantsLoadBalancer(s *kplanev1.Service) bool {
	return s.GetSpec().GetType() == kplanev1.ServiceTypeLoadBalancer && s.GetMetadata().GetDeletionTimestamp() == nil
}

// Backends are the Nodes a load balancer sends to: Ready, initialised,
// not shut down, not being deleted, not excluded by label, with an
// InternalIP; by name.
func Backends(nodes []*kplanev1.Node) []*cloudsimv1.Backend {
	var out []*cloudsimv1.Backend
	for _, n := range nodes {
		if n.GetMetadata().GetDeletionTimestamp() != nil ||
			apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus() != kplanev1.ConditionTrue ||
			hasTaint(n, kplanev1.TaintNodeUninitialized) || hasTaint(n, kplanev1.TaintNodeShutdown) {
			continue
		}
		if _, excluded := n.GetMetadata().GetLabels()[kplanev1.LabelExcludeFromExternalLoadBalancers]; excluded {
			continue
		}
		for _, a := range n.GetStatus().GetAddresses() {
			if a.Type == kplanev1.NodeInternalIP {
				out = append(out, &cloudsimv1.Backend{Name: n.GetMetadata().GetName(), Address: a.Address})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b *cloudsimv1.Backend) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Listeners are the load balancer's ports: each TCP service port with
// its nodePort. ok is false while a port has no nodePort yet.
func Listeners(s *kplanev1.Service) (ls []*cloudsimv1.Listener, skipped []string, ok bool) {
	for _, p := range s.GetSpec().GetPorts() {
		proto := p.GetProtocol()
		if proto == "" {
			proto = kplanev1.ProtocolTCP
		}
		if proto != kplanev1.ProtocolTCP {
			skipped = append(skipped, fmt.Sprintf("%d/%s", p.GetPort(), proto))
			continue
		}
		if p.GetNodePort() == 0 {
			return nil, nil, false
		}
		ls = append(ls, &cloudsimv1.Listener{Port: p.GetPort(), Protocol: proto, BackendPort: p.GetNodePort()})
	}
	return ls, skipped, true
}

// IngressOf is the status.loadBalancer a load balancer gives its Service.
func IngressOf(lb *cloudsimv1.LoadBalancer) *kplanev1.LoadBalancerStatus {
	mode := kplanev1.LoadBalancerIPModeProxy
	in := &kplanev1.LoadBalancerIngress{Ip: lb.ExternalIp, IpMode: &mode}
	for _, l := range lb.Listeners {
		in.Ports = append(in.Ports, &kplanev1.PortStatus{Port: l.Port, Protocol: l.Protocol})
	}
	return &kplanev1.LoadBalancerStatus{Ingress: []*kplanev1.LoadBalancerIngress{in}}
}

// sameShape reports whether the cloud's load balancer already has these
// listeners and backends.
func sameShape(lb *cloudsimv1.LoadBalancer, ls []*cloudsimv1.Listener, bs []*cloudsimv1.Backend) bool {
	if len(lb.GetListeners()) != len(ls) || len(lb.GetBackends()) != len(bs) {
		return false
	}
	for i, l := range ls {
		h := lb.Listeners[i]
		if h.Port != l.Port || h.Protocol != l.Protocol || h.BackendPort != l.BackendPort {
			return false
		}
	}
	have := slices.Clone(lb.Backends)
	slices.SortFunc(have, func(a, b *cloudsimv1.Backend) int { return strings.Compare(a.Name, b.Name) })
	return slices.EqualFunc(have, bs, func(a, b *cloudsimv1.Backend) bool { return proto.Equal(a, b) })
}

// Reconcile makes one Service's load balancer right.
func (l *serviceLoop) Reconcile(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	lbName := LoadBalancerName(ns, name)
	obj, ok := l.services.Store().Get(key)
	if !ok {
		// Gone without our finalizer (deleted while it was another type,
		// or before cloudctl ran): no load balancer may outlive it.
		return l.deleteLoadBalancer(ctx, lbName)
	}
	svc := obj.GetService()
	if !wantsLoadBalancer(svc) {
		return l.cleanup(ctx, obj, svc, lbName)
	}
	ls, skipped, ready := Listeners(svc)
	if !ready {
		return nil // the apiserver allocates nodePorts; the update queues it again
	}
	if len(ls) == 0 {
		l.rec.Eventf(ctx, obj, record.Warning, "SyncLoadBalancerFailed", "no TCP port to balance (not supported: %s)", strings.Join(skipped, ", "))
		return nil
	}
	// The finalizer first: a load balancer must never exist unrecorded.
	svc, err := l.setFinalizer(ctx, svc, true)
	if err != nil || svc == nil {
		return err
	}
	var nodes []*kplanev1.Node
	for _, o := range l.nodes.Store().List() {
		nodes = append(nodes, o.GetNode())
	}
	bs := Backends(nodes)
	got, err := l.cloud.GetLoadBalancer(ctx, &cloudsimv1.GetLoadBalancerRequest{Name: lbName})
	lb := got.GetLoadBalancer()
	switch {
	case status.Code(err) == codes.NotFound:
		lb = nil
	case err != nil:
		return fmt.Errorf("cloud: get load balancer %s: %w", lbName, err)
	}
	if lb == nil || !sameShape(lb, ls, bs) {
		resp, err := l.cloud.EnsureLoadBalancer(ctx, &cloudsimv1.EnsureLoadBalancerRequest{Name: lbName, Listeners: ls, Backends: bs})
		if err != nil {
			l.rec.Eventf(ctx, obj, record.Warning, "SyncLoadBalancerFailed", "Error syncing load balancer: %v", err)
			return fmt.Errorf("cloud: ensure load balancer %s: %w", lbName, err)
		}
		names := make([]string, len(bs))
		for i, b := range bs {
			names[i] = b.Name
		}
		if lb == nil {
			l.rec.Eventf(ctx, obj, record.Normal, "EnsuredLoadBalancer", "Ensured load balancer")
		} else {
			l.rec.Eventf(ctx, obj, record.Normal, "UpdatedLoadBalancer", "Updated load balancer with new hosts")
		}
		lb = resp.LoadBalancer
		l.log.Info("load balancer ensured", "service", key, "lb", lbName, "external_ip", lb.ExternalIp, "backends", strings.Join(names, ","))
	}
	if err := l.setIngress(ctx, svc, IngressOf(lb)); err != nil {
		return err
	}
	return app.RequeueAfter(l.period)
}

// cleanup deletes the load balancer of a Service that no longer wants
// one, clears its status, and then drops the finalizer.
func (l *serviceLoop) cleanup(ctx context.Context, obj *kplanev1.Object, svc *kplanev1.Service, lbName string) error {
	if !slices.Contains(svc.GetMetadata().GetFinalizers(), kplanev1.FinalizerLoadBalancerCleanup) && svc.GetStatus().GetLoadBalancer() == nil {
		return l.deleteLoadBalancer(ctx, lbName) // never had one, unless orphaned
	}
	if err := l.deleteLoadBalancer(ctx, lbName); err != nil {
		return err
	}
	l.rec.Eventf(ctx, obj, record.Normal, "DeletedLoadBalancer", "Deleted load balancer")
	if svc.GetMetadata().GetDeletionTimestamp() == nil {
		if err := l.setIngress(ctx, svc, nil); err != nil {
			return err
		}
	}
	_, err := l.setFinalizer(ctx, svc, false)
	return err
}

func (l *serviceLoop) deleteLoadBalancer(ctx context.Context, lbName string) error {
	_, err := l.cloud.DeleteLoadBalancer(ctx, &cloudsimv1.DeleteLoadBalancerRequest{Name: lbName})
	switch {
	case status.Code(err) == codes.NotFound:
		return nil
	case err != nil:
		return fmt.Errorf("cloud: delete load balancer %s: %w", lbName, err)
	}
	l.log.Info("load balancer deleted", "lb", lbName)
	return nil
}

// setFinalizer adds or removes the cleanup finalizer; it returns the
// Service as written (nil when it is gone or was replaced).
func (l *serviceLoop) setFinalizer(ctx context.Context, svc *kplanev1.Service, on bool) (*kplanev1.Service, error) {
	out, _, err := controller.Update(ctx, l.api, svc, func(cur *kplanev1.Service) *kplanev1.Service {
		fins := cur.GetMetadata().GetFinalizers()
		if slices.Contains(fins, kplanev1.FinalizerLoadBalancerCleanup) == on {
			return nil
		}
		if on && cur.GetMetadata().GetDeletionTimestamp() != nil {
			return nil // too late to hold it
		}
		next := proto.Clone(cur).(*kplanev1.Service)
		if on {
			next.Metadata.Finalizers = append(next.Metadata.Finalizers, kplanev1.FinalizerLoadBalancerCleanup)
		} else {
			next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == kplanev1.FinalizerLoadBalancerCleanup })
		}
		return next
	})
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: set finalizer %s=%v: %w", svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName(), kplanev1.FinalizerLoadBalancerCleanup, on, err)
	}
	return out, nil
}

func (l *serviceLoop) setIngress(ctx context.Context, svc *kplanev1.Service, want *kplanev1.LoadBalancerStatus) error {
	_, _, err := controller.UpdateStatus(ctx, l.api, svc, func(cur *kplanev1.Service) *kplanev1.Service {
		if proto.Equal(cur.GetStatus().GetLoadBalancer(), want) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Service)
		if next.Status == nil {
			next.Status = &kplanev1.ServiceStatus{}
		}
		next.Status.LoadBalancer = want
		return next
	})
	if err != nil {
		return fmt.Errorf("service %s/%s: set status.loadBalancer: %w", svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName(), err)
	}
	return nil
}
