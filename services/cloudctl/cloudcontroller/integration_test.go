package cloudcontroller_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/cloudctl/cloudcontroller"
	"github.com/kplane/kplane/services/cloudsim/balancer"
	"github.com/kplane/kplane/services/cloudsim/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is an in-process apiserver, a real cloudsim over gRPC on a
// loopback socket, and cloudctl running every loop between them.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	api   *client.Client
	cloud cloudsimv1.CloudClient
	base  string // a loopback /24 prefix of this test's own: "127.243.N."
}

func newFixture(t *testing.T, args ...string) *fixture {
	t.Helper()
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	n := rand.IntN(256)
	cloud, err := sim.New(sim.Config{StateFile: filepath.Join(t.TempDir(), "cloud.json"),
		LBIPRange: netip(fmt.Sprintf("127.244.%d.0/28", n)),
		Balancer:  balancer.Options{Interval: 100 * time.Millisecond, Timeout: 500 * time.Millisecond, UnhealthyAfter: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	cloudsimv1.RegisterCloudServer(gs, cloud)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: cloudctl stops before the sim.
	t.Cleanup(func() { _ = api.Close(); _ = conn.Close(); gs.Stop(); <-done; cloud.Close() })
	all := append([]string{"--cloud", ln.Addr().String(), "--node-monitor-period", "200ms", "--route-reconcile-period", "200ms",
		"--load-balancer-reconcile-period", "1s"}, controllertest.LeaderElection("cloudctl-test")...)
	controllertest.Run(t, srv.Addr(), cloudcontroller.NewService(), append(all, args...)...)
	return &fixture{t: t, ctx: ctx, api: api, cloud: cloudsimv1.NewCloudClient(conn), base: fmt.Sprintf("127.243.%d.", n)}
}

func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	testutil.Eventually(f.t, 60*time.Second, what, cond)
}

func (f *fixture) instance(name, ip string) *cloudsimv1.Instance {
	f.t.Helper()
	r, err := f.cloud.CreateInstance(f.ctx, &cloudsimv1.CreateInstanceRequest{Name: name, Zone: "zone-a", Region: "region-1", InstanceType: "sim.small",
		Addresses: []*cloudsimv1.Address{{Type: "InternalIP", Address: ip}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return r.Instance
}

// node registers a Node as a node agent with --cloud-provider=external
// does: uninitialized taint, NetworkUnavailable, Ready.
func (f *fixture) node(name, podCIDR string) {
	f.t.Helper()
	nodes := client.For[*kplanev1.Node](f.api)
	n, err := nodes.Create(f.ctx, &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name},
		Spec: &kplanev1.NodeSpec{PodCidr: podCIDR, Taints: []*kplanev1.Taint{{Key: kplanev1.TaintNodeUninitialized, Value: "true", Effect: kplanev1.TaintEffectNoSchedule}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	// cloudctl may write the Node between the create and this status
	// write: reread on a conflict.
	for {
		now := timestamppb.Now()
		n.Status = &kplanev1.NodeStatus{Addresses: n.GetStatus().GetAddresses(), Conditions: []*kplanev1.Condition{
			{Type: kplanev1.NodeReady, Status: kplanev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: kplanev1.NodeNetworkUnavailable, Status: kplanev1.ConditionTrue, Reason: cloudcontroller.ReasonNoRouteCreated, LastHeartbeatTime: now, LastTransitionTime: now},
		}}
		_, err := nodes.UpdateStatus(f.ctx, n)
		if err == nil {
			return
		}
		if !client.IsConflict(err) {
			f.t.Fatal(err)
		}
		if n, err = nodes.Get(f.ctx, "", name); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) getNode(name string) *kplanev1.Node {
	n, err := client.For[*kplanev1.Node](f.api).Get(f.ctx, "", name)
	if err != nil {
		return nil
	}
	return n
}

func (f *fixture) routes() map[string]*cloudsimv1.Route {
	r, err := f.cloud.ListRoutes(f.ctx, &cloudsimv1.ListRoutesRequest{})
	if err != nil {
		return nil
	}
	out := map[string]*cloudsimv1.Route{}
	for _, x := range r.Routes {
		out[x.Name] = x
	}
	return out
}

func hasTaint(n *kplanev1.Node, key string) bool {
	return slices.ContainsFunc(n.GetSpec().GetTaints(), func(t *kplanev1.Taint) bool { return t.Key == key })
}

func netUnavailable(n *kplanev1.Node) *kplanev1.Condition {
	return apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeNetworkUnavailable)
}

func (f *fixture) setState(id string, st cloudsimv1.InstanceState) {
	f.t.Helper()
	if _, err := f.cloud.SetInstanceState(f.ctx, &cloudsimv1.SetInstanceStateRequest{Id: id, State: st}); err != nil {
		f.t.Fatal(err)
	}
}

// TestNodeAndRouteLoops: a Node is initialised from its instance, its pod
// CIDR routed to it (and only then NetworkUnavailable False), tainted
// while its instance is shut down, and deleted, route and all, once the
// instance is terminated. Every loop holds its own Lease.
func TestNodeAndRouteLoops(t *testing.T) {
	f := newFixture(t)
	in := f.instance("node-1", f.base+"1")
	f.node("node-1", "10.244.1.0/24")
	f.node("node-2", "10.244.2.0/24") // no instance: stays uninitialized, no route

	f.eventually("node-1 initialised from its instance", func() bool {
		n := f.getNode("node-1")
		l := n.GetMetadata().GetLabels()
		addrs := n.GetStatus().GetAddresses()
		return n.GetSpec().GetProviderId() == "kplane-sim://"+in.Id && !hasTaint(n, kplanev1.TaintNodeUninitialized) &&
			l[kplanev1.LabelTopologyZone] == "zone-a" && l[kplanev1.LabelTopologyRegion] == "region-1" && l[kplanev1.LabelInstanceType] == "sim.small" &&
			len(addrs) == 2 && addrs[0].Type == kplanev1.NodeInternalIP && addrs[0].Address == f.base+"1" && addrs[1].Address == "node-1"
	})
	f.eventually("node-1's route, then NetworkUnavailable False", func() bool {
		r := f.routes()["kplane-node-1"]
		c := netUnavailable(f.getNode("node-1"))
		return r != nil && r.DestinationCidr == "10.244.1.0/24" && r.TargetInstanceId == in.Id &&
			c.GetStatus() == kplanev1.ConditionFalse && c.GetReason() == cloudcontroller.ReasonRouteCreated
	})
	n2 := f.getNode("node-2")
	if !hasTaint(n2, kplanev1.TaintNodeUninitialized) || netUnavailable(n2).GetStatus() != kplanev1.ConditionTrue || f.routes()["kplane-node-2"] != nil {
		t.Fatalf("node-2 without an instance: %v; want it tainted, NetworkUnavailable and unrouted", n2)
	}

	// A route this cluster does not want is removed; another cluster's stays.
	for _, r := range []*cloudsimv1.Route{{Name: "kplane-ghost", DestinationCidr: "10.244.9.0/24", TargetInstanceId: in.Id}, {Name: "other-x", DestinationCidr: "10.250.0.0/24", TargetInstanceId: in.Id}} {
		if _, err := f.cloud.CreateRoute(f.ctx, &cloudsimv1.CreateRouteRequest{Route: r}); err != nil {
			t.Fatal(err)
		}
	}
	f.eventually("the stray route removed", func() bool { rs := f.routes(); return rs["kplane-ghost"] == nil && rs["other-x"] != nil })

	f.setState(in.Id, cloudsimv1.InstanceState_INSTANCE_STATE_SHUTDOWN)
	f.eventually("shutdown taint", func() bool { return hasTaint(f.getNode("node-1"), kplanev1.TaintNodeShutdown) })
	f.setState(in.Id, cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING)
	f.eventually("shutdown taint gone", func() bool { n := f.getNode("node-1"); return n != nil && !hasTaint(n, kplanev1.TaintNodeShutdown) })

	f.setState(in.Id, cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED)
	f.eventually("node-1 deleted and its route gone", func() bool { return f.getNode("node-1") == nil && f.routes()["kplane-node-1"] == nil })

	for _, loop := range cloudcontroller.AllLoops {
		l, err := client.For[*kplanev1.Lease](f.api).Get(f.ctx, kplanev1.NamespaceSystem, cloudcontroller.LeaseName(loop))
		if err != nil || l.GetSpec().GetHolderIdentity() != "cloudctl-test" {
			t.Fatalf("lease of loop %s: %v, %v", loop, l, err)
		}
	}
}

// server answers every connection on addr with name.
func server(t *testing.T, addr, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, name)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func dial(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func (f *fixture) lb(name string) *cloudsimv1.LoadBalancer {
	r, err := f.cloud.GetLoadBalancer(f.ctx, &cloudsimv1.GetLoadBalancerRequest{Name: name})
	if err != nil {
		return nil
	}
	return r.LoadBalancer
}

func backendNames(lb *cloudsimv1.LoadBalancer) string {
	var out []string
	for _, b := range lb.GetBackends() {
		out = append(out, b.Name)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// TestServiceLoop: a LoadBalancer Service gets a load balancer over the
// ready nodes' nodePort that really forwards, its ingress address in
// status.loadBalancer and the cleanup finalizer; the backends follow the
// nodes' readiness; a type change and a deletion remove the load
// balancer, the status and the finalizer.
func TestServiceLoop(t *testing.T) {
	f := newFixture(t, "--controllers", "node,service")
	for i, name := range []string{"node-a", "node-b"} {
		f.instance(name, fmt.Sprintf("%s%d", f.base, i+1))
		f.node(name, fmt.Sprintf("10.244.%d.0/24", i+1))
	}
	f.eventually("nodes initialised", func() bool {
		return !hasTaint(f.getNode("node-a"), kplanev1.TaintNodeUninitialized) && !hasTaint(f.getNode("node-b"), kplanev1.TaintNodeUninitialized)
	})
	// One "node port" served on both node addresses, as the proxy does.
	var nodePort int
	for nodePort = 30000 + rand.IntN(2700); ; nodePort++ {
		a, err := net.Listen("tcp", fmt.Sprintf("%s1:%d", f.base, nodePort))
		if err != nil {
			continue
		}
		_ = a.Close()
		break
	}
	server(t, fmt.Sprintf("%s1:%d", f.base, nodePort), "node-a")
	server(t, fmt.Sprintf("%s2:%d", f.base, nodePort), "node-b")

	svcs := client.For[*kplanev1.Service](f.api)
	_, err := svcs.Create(f.ctx, &kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: &kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []*kplanev1.ServicePort{{Port: 8080, NodePort: int32(nodePort), TargetPort: kplanev1.IntOrStringFromInt32(8080)}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ingress string
	f.eventually("status.loadBalancer.ingress and the finalizer", func() bool {
		s, err := svcs.Get(f.ctx, "default", "web")
		in := s.GetStatus().GetLoadBalancer().GetIngress()
		if err != nil || len(in) != 1 || !slices.Contains(s.GetMetadata().GetFinalizers(), kplanev1.FinalizerLoadBalancerCleanup) {
			return false
		}
		ingress = in[0].Ip
		return len(in[0].Ports) == 1 && in[0].Ports[0].Port == 8080
	})
	lb := f.lb("default.web")
	if lb.GetExternalIp() != ingress || backendNames(lb) != "node-a,node-b" {
		t.Fatalf("load balancer %v; want %s over node-a and node-b", lb, ingress)
	}
	addr := net.JoinHostPort(ingress, "8080")
	seen := map[string]bool{}
	f.eventually("the load balancer reaches both nodes", func() bool {
		seen[dial(addr)] = true
		return seen["node-a"] && seen["node-b"]
	})

	// node-b not ready: out of the load balancer; ready again: back in.
	setReady := func(name, st string) {
		_, _, err := controllerUpdateStatus(f, name, st)
		if err != nil {
			t.Fatal(err)
		}
	}
	setReady("node-b", kplanev1.ConditionFalse)
	f.eventually("node-b out of the load balancer", func() bool { return backendNames(f.lb("default.web")) == "node-a" })
	for range 5 {
		if got := dial(addr); got != "node-a" {
			t.Fatalf("answered by %q, want only node-a", got)
		}
	}
	setReady("node-b", kplanev1.ConditionTrue)
	f.eventually("node-b back", func() bool { return backendNames(f.lb("default.web")) == "node-a,node-b" })

	// Type ClusterIP: no load balancer, status and finalizer cleared.
	s, _ := svcs.Get(f.ctx, "default", "web")
	s.Spec.Type = kplanev1.ServiceTypeClusterIP
	for _, p := range s.Spec.Ports {
		p.NodePort = 0
	}
	if _, err := svcs.Update(f.ctx, s); err != nil {
		t.Fatal(err)
	}
	f.eventually("load balancer removed after the type change", func() bool {
		s, err := svcs.Get(f.ctx, "default", "web")
		return err == nil && f.lb("default.web") == nil && s.GetStatus().GetLoadBalancer() == nil && len(s.GetMetadata().GetFinalizers()) == 0
	})

	// Back to LoadBalancer, then deleted: the finalizer holds the Service
	// until the load balancer is gone.
	s, _ = svcs.Get(f.ctx, "default", "web")
	s.Spec.Type = kplanev1.ServiceTypeLoadBalancer
	if _, err := svcs.Update(f.ctx, s); err != nil {
		t.Fatal(err)
	}
	f.eventually("a load balancer again", func() bool { return f.lb("default.web") != nil })
	f.eventually("the finalizer again", func() bool {
		s, err := svcs.Get(f.ctx, "default", "web")
		return err == nil && slices.Contains(s.GetMetadata().GetFinalizers(), kplanev1.FinalizerLoadBalancerCleanup)
	})
	if _, err := svcs.Delete(f.ctx, "default", "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("service and load balancer gone", func() bool {
		_, err := svcs.Get(f.ctx, "default", "web")
		return client.IsNotFound(err) && f.lb("default.web") == nil
	})
}

func controllerUpdateStatus(f *fixture, name, ready string) (*kplanev1.Node, bool, error) {
	nodes := client.For[*kplanev1.Node](f.api)
	for {
		n, err := nodes.Get(f.ctx, "", name)
		if err != nil {
			return nil, false, err
		}
		now := timestamppb.Now()
		n.Status.Conditions = apiutil.SetStatusCondition(n.Status.Conditions, &kplanev1.Condition{Type: kplanev1.NodeReady, Status: ready, Reason: "Test", LastHeartbeatTime: now, LastTransitionTime: now})
		out, err := nodes.UpdateStatus(f.ctx, n)
		if client.IsConflict(err) {
			continue
		}
		return out, err == nil, err
	}
}

// TestFlagErrors: bad flags are refused, naming the flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--controllers", "node,lb"}, "--controllers"},
		{[]string{"--controllers", ""}, "--controllers"},
		{[]string{"--cloud", ""}, "--cloud"},
		{[]string{"--cluster-name", "a b"}, "--cluster-name"},
		{[]string{"--node-monitor-period", "0s"}, "--node-monitor-period"},
		{[]string{"--leader-elect-lease-duration", "1s", "--leader-elect-renew-deadline", "2s"}, "renew-deadline"},
	} {
		err := appRun(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
