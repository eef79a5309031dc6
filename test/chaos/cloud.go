package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/apiutil"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The cloud part of the run (--cloud): cloudsim and cloudctl are in the
// kill set, a LoadBalancer Service lives through the chaos, and after it
// every LoadBalancer Service's load balancer targets exactly the ready
// nodes and every node with a pod CIDR has exactly one route.

const chaosLBService = "chaos-lb"

// routePrefix is cloudctl's default --cluster-name plus the dash.
const routePrefix = "kplane-"

// leaseNames are the Leases a controller binary holds: cloudctl one per
// loop, every other its own name.
func leaseNames(controller string) []string {
	if controller == "cloudctl" {
		return []string{"cloudctl-node", "cloudctl-route", "cloudctl-service"}
	}
	return []string{controller}
}

// setupLoadBalancer creates the run's LoadBalancer Service.
func setupLoadBalancer(ctx context.Context, api kplanev1.ResourcesClient, ns string) error {
	svc := kplanev1.MustWrap(&kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: chaosLBService, Namespace: ns, Labels: map[string]string{labelChaos: "true"}},
		Spec: &kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": chaosLBService},
			Ports: []*kplanev1.ServicePort{{Port: 80, Protocol: kplanev1.ProtocolTCP, TargetPort: kplanev1.IntOrStringFromInt32(8080)}}},
	})
	return retry(ctx, func(ctx context.Context) error {
		_, err := api.Create(ctx, &kplanev1.CreateRequest{Object: svc})
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})
}

// readyForLoadBalancers: the nodes a load balancer must target, by the
// rule cloudctl documents (Ready, initialised, not shut down, not being
// deleted, not excluded), written out again here as the test's oracle.
func readyForLoadBalancers(nodes []*kplanev1.Node) []string {
	var out []string
	for _, n := range nodes {
		tainted := slices.ContainsFunc(n.GetSpec().GetTaints(), func(t *kplanev1.Taint) bool {
			return t.Key == kplanev1.TaintNodeUninitialized || t.Key == kplanev1.TaintNodeShutdown
		})
		_, excluded := n.GetMetadata().GetLabels()[kplanev1.LabelExcludeFromExternalLoadBalancers]
		if tainted || excluded || n.GetMetadata().GetDeletionTimestamp() != nil ||
			apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus() != kplanev1.ConditionTrue {
			continue
		}
		out = append(out, n.GetMetadata().GetName())
	}
	slices.Sort(out)
	return out
}

// checkCloud returns the violations of the cloud invariants.
func checkCloud(ctx context.Context, api kplanev1.ResourcesClient, cloud cloudsimv1.CloudClient, nodes []*kplanev1.Node) ([]string, error) {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	svcs, err := list(ctx, api, "Service", "")
	if err != nil {
		return nil, err
	}
	ready := readyForLoadBalancers(nodes)
	for _, o := range svcs {
		svc := o.GetService()
		if svc.GetSpec().GetType() != kplanev1.ServiceTypeLoadBalancer || svc.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		name := svc.GetMetadata().GetNamespace() + "." + svc.GetMetadata().GetName()
		resp, err := cloud.GetLoadBalancer(ctx, &cloudsimv1.GetLoadBalancerRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			add("service %s has no load balancer", o.Key())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cloud: get load balancer %s: %w", name, err)
		}
		var backends []string
		for _, b := range resp.LoadBalancer.Backends {
			backends = append(backends, b.Name)
		}
		slices.Sort(backends)
		if !slices.Equal(backends, ready) {
			add("load balancer %s targets %v, the ready nodes are %v", name, backends, ready)
		}
		in := svc.GetStatus().GetLoadBalancer().GetIngress()
		if len(in) != 1 || in[0].GetIp() != resp.LoadBalancer.ExternalIp {
			add("service %s status.loadBalancer.ingress %v, its load balancer is at %s", o.Key(), in, resp.LoadBalancer.ExternalIp)
		}
	}

	routes, err := cloud.ListRoutes(ctx, &cloudsimv1.ListRoutesRequest{})
	if err != nil {
		return nil, fmt.Errorf("cloud: list routes: %w", err)
	}
	byNode := map[string]bool{}
	for _, n := range nodes {
		name, cidr := n.GetMetadata().GetName(), n.GetSpec().GetPodCidr()
		byNode[routePrefix+name] = true
		if cidr == "" {
			continue
		}
		var to []string
		for _, r := range routes.Routes {
			if r.DestinationCidr == cidr {
				to = append(to, r.Name+"->"+r.TargetInstanceId)
			}
		}
		want := routePrefix + name + "->" + strings.TrimPrefix(n.GetSpec().GetProviderId(), cloudsimv1.ProviderPrefix)
		if len(to) != 1 || to[0] != want {
			add("node %s (pod CIDR %s) has routes %v, want exactly %s", name, cidr, to, want)
		}
	}
	for _, r := range routes.Routes {
		if strings.HasPrefix(r.Name, routePrefix) && !byNode[r.Name] {
			add("route %s (%s) belongs to no node", r.Name, r.DestinationCidr)
		}
	}
	return out, nil
}
