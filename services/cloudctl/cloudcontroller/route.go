package cloudcontroller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Reasons of the NetworkUnavailable condition the route loop writes, as
// Kubernetes' route controller spells them.
const (
	ReasonRouteCreated   = "RouteCreated"
	ReasonNoRouteCreated = "NoRouteCreated"
)

// routesKey is the route loop's only key: routes are reconciled as a set
// (one listing of the cloud's routes against every Node).
const routesKey = "routes"

// routeLoop keeps one cloud route per Node pod CIDR, to the Node's
// instance, named <cluster-name>-<node>; routes of that prefix that match
// no Node are deleted. A Node's NetworkUnavailable condition turns False
// only once its route exists.
type routeLoop struct {
	api     *client.Client
	cloud   cloudsimv1.CloudClient
	nodes   *informer.Informer
	log     hclog.Logger
	cluster string
	period  time.Duration
}

func newRouteLoop(ac *app.Context, cloud cloudsimv1.CloudClient, cluster string, period time.Duration) app.Loop {
	l := &routeLoop{api: ac.Client, cloud: cloud, nodes: ac.Informers.ForKind("Node"), log: ac.Logger.Named("route"), cluster: cluster, period: period}
	return app.Loop{Name: LeaseName(LoopRoute), Workers: 1, Reconciler: l,
		Watches: []app.Watch{{Kind: "Node", MapToKey: func(*kplanev1.Object) []string { return []string{routesKey} }}}}
}

// RouteName is the name of the route of node in cluster.
func RouteName(cluster, node string) string { return cluster + "-" + node }

// wantedRoute is the route a Node needs, or nil (no pod CIDR yet, no
// instance yet, or being deleted).
func wantedRoute(cluster string, n *kplanev1.Node) *cloudsimv1.Route {
	id, ok := strings.CutPrefix(n.GetSpec().GetProviderId(), cloudsimv1.ProviderPrefix)
	if !ok || id == "" || n.GetSpec().GetPodCidr() == "" || n.GetMetadata().GetDeletionTimestamp() != nil {
		return nil
	}
	p, err := netip.ParsePrefix(n.GetSpec().GetPodCidr())
	if err != nil {
		return nil
	}
	return &cloudsimv1.Route{Name: RouteName(cluster, n.GetMetadata().GetName()), DestinationCidr: p.Masked().String(), TargetInstanceId: id}
}

// RoutePlan is what the route loop changes in the cloud.
type RoutePlan struct {
	Delete []string
	Create []*cloudsimv1.Route
}

// PlanRoutes compares the cloud's routes with the ones the Nodes need:
// this cluster's routes (by name prefix) that no Node needs as they are
// are deleted, and the missing ones created. Deletes go first, so a
// range moved to a new route does not collide with its old one.
func PlanRoutes(cluster string, nodes []*kplanev1.Node, have []*cloudsimv1.Route) RoutePlan {
	want := map[string]*cloudsimv1.Route{}
	for _, n := range nodes {
		if r := wantedRoute(cluster, n); r != nil {
			want[r.Name] = r
		}
	}
	var plan RoutePlan
	exists := map[string]bool{}
	for _, r := range have {
		if !strings.HasPrefix(r.Name, cluster+"-") {
			continue // not ours
		}
		if w := want[r.Name]; w != nil && proto.Equal(w, r) {
			exists[r.Name] = true
			continue
		}
		plan.Delete = append(plan.Delete, r.Name)
	}
	for name, r := range want {
		if !exists[name] {
			plan.Create = append(plan.Create, r)
		}
	}
	slices.Sort(plan.Delete)
	slices.SortFunc(plan.Create, func(a, b *cloudsimv1.Route) int { return strings.Compare(a.Name, b.Name) })
	return plan
}

// Reconcile makes the cloud's routes match the Nodes, then reports each
// Node's route in its NetworkUnavailable condition.
func (l *routeLoop) Reconcile(ctx context.Context, _ string) error {
	var nodes []*kplanev1.Node
	for _, o := range l.nodes.Store().List() {
		nodes = append(nodes, o.GetNode())
	}
	resp, err := l.cloud.ListRoutes(ctx, &cloudsimv1.ListRoutesRequest{})
	if err != nil {
		return fmt.Errorf("cloud: list routes: %w", err)
	}
	plan := PlanRoutes(l.cluster, nodes, resp.Routes)
	var errs []error
	for _, name := range plan.Delete {
		_, err := l.cloud.DeleteRoute(ctx, &cloudsimv1.DeleteRouteRequest{Name: name})
		if err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, fmt.Errorf("cloud: delete route %s: %w", name, err))
			continue
		}
		l.log.Info("route deleted", "route", name)
	}
	failed := map[string]string{}
	for _, r := range plan.Create {
		_, err := l.cloud.CreateRoute(ctx, &cloudsimv1.CreateRouteRequest{Route: r})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			failed[r.Name] = err.Error()
			errs = append(errs, fmt.Errorf("cloud: create route %s: %w", r.Name, err))
			continue
		}
		l.log.Info("route created", "route", r.Name, "destination", r.DestinationCidr, "target", r.TargetInstanceId)
	}
	for _, n := range nodes {
		r := wantedRoute(l.cluster, n)
		if r == nil {
			continue
		}
		msg, bad := failed[r.Name]
		if err := l.setCondition(ctx, n, !bad, msg); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return app.RequeueAfter(l.period)
}

// setCondition writes NetworkUnavailable False (RouteCreated) when the
// route exists, True (NoRouteCreated) when creating it failed.
func (l *routeLoop) setCondition(ctx context.Context, n *kplanev1.Node, created bool, why string) error {
	st, reason, msg := kplanev1.ConditionFalse, ReasonRouteCreated, "cloud route created"
	if !created {
		st, reason, msg = kplanev1.ConditionTrue, ReasonNoRouteCreated, "could not create the cloud route: "+why
	}
	_, _, err := controller.UpdateStatus(ctx, l.api, n, func(cur *kplanev1.Node) *kplanev1.Node {
		old := apiutil.FindCondition(cur.GetStatus().GetConditions(), kplanev1.NodeNetworkUnavailable)
		if old.GetStatus() == st && old.GetReason() == reason {
			return nil
		}
		now := timestamppb.Now()
		next := proto.Clone(cur).(*kplanev1.Node)
		if next.Status == nil {
			next.Status = &kplanev1.NodeStatus{}
		}
		next.Status.Conditions = apiutil.SetStatusCondition(next.Status.Conditions, &kplanev1.Condition{
			Type: kplanev1.NodeNetworkUnavailable, Status: st, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now})
		return next
	})
	if err != nil {
		return fmt.Errorf("set %s=%s on node %s: %w", kplanev1.NodeNetworkUnavailable, st, n.GetMetadata().GetName(), err)
	}
	return nil
}
