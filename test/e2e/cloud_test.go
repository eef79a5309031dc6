package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/pkg/apiutil"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

func init() {
	binaries["cloudsim"] = "services/cloudsim"
	binaries["cloudctl"] = "services/cloudctl"
	binaries["proxy"] = "services/proxy"
}

// cloudView is what the cloud test reads from cloudsim's API.
type cloudView struct {
	t   *testing.T
	api cloudsimv1.CloudClient
}

func (c cloudView) routes() map[string]*cloudsimv1.Route {
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	r, err := c.api.ListRoutes(ctx, &cloudsimv1.ListRoutesRequest{})
	if err != nil {
		return nil
	}
	out := map[string]*cloudsimv1.Route{}
	for _, x := range r.Routes {
		out[x.Name] = x
	}
	return out
}

func (c cloudView) backends(lb string) []string {
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	r, err := c.api.GetLoadBalancer(ctx, &cloudsimv1.GetLoadBalancerRequest{Name: lb})
	if err != nil {
		return nil
	}
	var out []string
	for _, b := range r.LoadBalancer.Backends {
		out = append(out, b.Name)
	}
	slices.Sort(out)
	return out
}

// TestCloudLoadBalancer runs the local stack with the simulated cloud:
// cloudsim, cloudctl and three node agents with --cloud-provider=external.
// The nodes are initialised from their instances and routed; a
// LoadBalancer Service over a 3-replica web ReplicaSet gets an ingress
// address that reaches all three pods from the host; terminating a node's
// instance (cloudsim's admin command) deletes its Node and route, takes it
// out of the load balancer, and its pods come back on the other nodes.
func TestCloudLoadBalancer(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 200+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s, killed := startStackWithKills(ctx, t, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 3, Cloud: true,
		Controllers: []string{"scheduler", "ipamctl", "replicactl", "nodectl", "endpointsctl"},
		Args: map[string][]string{
			"ipamctl":   {"--cluster-cidr", cluster.String()},
			"nodeagent": {"--heartbeat-interval", "1s", "--housekeeping-interval", "500ms"},
			"cloudctl":  {"--node-monitor-period", "1s", "--route-reconcile-period", "1s"},
		},
	})
	c := &epCluster{t: t, s: s, api: dialStack(ctx, t, s)}
	opts := s.Options()
	conn, err := grpc.NewClient(opts.CloudAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	cloud := cloudView{t: t, api: cloudsimv1.NewCloudClient(conn)}
	nodes := []string{"node-1", "node-2", "node-3"}

	node := func(name string) *kplanev1.Node {
		ctx, opt := call(t)
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: name}, opt)
		if err != nil {
			return nil
		}
		return resp.GetObject().GetNode()
	}
	c.eventually("nodes initialised from their instances and routed", func() string {
		routes := cloud.routes()
		for i, name := range nodes {
			n := node(name)
			if n == nil {
				return name + " not registered"
			}
			if !strings.HasPrefix(n.GetSpec().GetProviderId(), cloudsimv1.ProviderPrefix) || n.GetMetadata().GetLabels()[kplanev1.LabelTopologyZone] == "" {
				return name + " not initialised"
			}
			if slices.ContainsFunc(n.GetSpec().GetTaints(), func(t *kplanev1.Taint) bool { return t.Key == kplanev1.TaintNodeUninitialized }) {
				return name + " still has the uninitialized taint"
			}
			if a := n.GetStatus().GetAddresses(); len(a) == 0 || a[0].Address != opts.NodeIP(i+1) {
				return fmt.Sprintf("%s addresses %v, want %s first", name, a, opts.NodeIP(i+1))
			}
			r := routes["kplane-"+name]
			if r == nil || r.DestinationCidr != n.GetSpec().GetPodCidr() {
				return fmt.Sprintf("%s (pod CIDR %q) has route %v", name, n.GetSpec().GetPodCidr(), r)
			}
			cond := apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeNetworkUnavailable)
			if cond.GetStatus() != kplanev1.ConditionFalse {
				return fmt.Sprintf("%s NetworkUnavailable %v", name, cond)
			}
			if apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus() != kplanev1.ConditionTrue {
				return name + " not Ready"
			}
		}
		return ""
	})

	web := map[string]string{"app": "web"}
	c.create(nameServerReplicaSet(web, &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromString("http")}, PeriodSeconds: 1}))
	lbsvc := epService("web", web, &kplanev1.ServicePort{Name: "http", Port: svcPort, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")})
	lbsvc.GetService().Spec.Type = kplanev1.ServiceTypeLoadBalancer
	c.create(lbsvc)

	var ingress string
	c.eventually("status.loadBalancer.ingress", func() string {
		o, err := c.get("Service", "web")
		if err != nil {
			return err.Error()
		}
		in := o.GetService().GetStatus().GetLoadBalancer().GetIngress()
		if len(in) != 1 || in[0].Ip == "" {
			return fmt.Sprintf("ingress %v", in)
		}
		ingress = in[0].Ip
		return ""
	})
	if !netip.MustParsePrefix(opts.CloudLBRange).Contains(netip.MustParseAddr(ingress)) {
		t.Fatalf("ingress %s is not from cloudsim's range %s", ingress, opts.CloudLBRange)
	}
	url := "http://" + net.JoinHostPort(ingress, strconv.Itoa(svcPort)) + "/"
	lbName := "default.web"

	// reachesAll: from the host, through the load balancer, every ready
	// web pod answers (and nothing else does).
	reachesAll := func(what string) []string {
		var want []string
		c.eventually(what, func() string {
			pods := c.webPods()
			want = nil
			for _, p := range pods {
				if !naReady(p) {
					return p.GetMetadata().GetName() + " not ready"
				}
				want = append(want, p.GetMetadata().GetName())
			}
			if len(want) != 3 {
				return fmt.Sprintf("%d web pods", len(want))
			}
			slices.Sort(want)
			seen := map[string]bool{}
			for range 30 {
				body, err := httpGet(url)
				if err != nil {
					return err.Error()
				}
				if !slices.Contains(want, body) {
					return fmt.Sprintf("answered by %q, not one of %v", body, want)
				}
				seen[body] = true
			}
			if len(seen) != 3 {
				return fmt.Sprintf("30 requests reached %v of %v", seen, want)
			}
			return ""
		})
		return want
	}
	before := reachesAll("the load balancer reaches all three web pods")
	if got := cloud.backends(lbName); !slices.Equal(got, nodes) {
		t.Fatalf("load balancer backends %v, want %v", got, nodes)
	}

	// The node of the first web pod loses its instance: cloudsim's admin
	// command terminates it, and its agent dies with the machine.
	p := c.pod(before[0])
	victim := p.GetSpec().GetNodeName()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "cloudsim"), "instance", "terminate", victim, "--cloud", opts.CloudAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"INSTANCE_STATE_TERMINATED"`) {
		t.Fatalf("cloudsim instance terminate %s: %v\n%s", victim, err, out)
	}
	idx := slices.Index(nodes, victim)
	agent := fmt.Sprintf("nodeagent-%d", idx+1)
	killed[agent] = true
	if err := s.Service(agent).Process().Kill(ctx); err != nil {
		t.Fatal(err)
	}
	rest := slices.Delete(slices.Clone(nodes), idx, idx+1)
	c.eventually(victim+" deleted, its route gone, out of the load balancer", func() string {
		if node(victim) != nil {
			return victim + " still exists"
		}
		if r := cloud.routes()["kplane-"+victim]; r != nil {
			return fmt.Sprintf("route %v remains", r)
		}
		if got := cloud.backends(lbName); !slices.Equal(got, rest) {
			return fmt.Sprintf("backends %v, want %v", got, rest)
		}
		return ""
	})
	after := reachesAll("the web pods back on the other nodes, all reached through the load balancer")
	for _, name := range after {
		if n := c.pod(name).GetSpec().GetNodeName(); n == victim {
			t.Fatalf("pod %s still on %s", name, victim)
		}
	}
	if slices.Equal(before, after) {
		t.Fatalf("web pods %v unchanged after %s went away", after, victim)
	}
	if rs := cloud.routes(); len(rs) != 2 {
		t.Fatalf("routes %v, want one per remaining node", rs)
	}

	// Deleting the Service deletes its load balancer (the finalizer holds
	// it until then).
	c.deleteObj("Service", "default", "web")
	c.eventually("the Service and its load balancer gone", func() string {
		if !c.gone("Service", "default", "web") {
			return "the Service remains"
		}
		if cloud.backends(lbName) != nil {
			return "the load balancer remains"
		}
		return ""
	})
	if _, err := httpGet(url); err == nil {
		t.Fatalf("%s still answers after the load balancer was deleted", url)
	}
}

// startStackWithKills is startStack for a test that kills some of the
// stack's processes: the exit status of a process named in the returned
// set is no error when the stack stops.
func startStackWithKills(ctx context.Context, t *testing.T, opts stack.Options) (*stack.Stack, map[string]bool) {
	t.Helper()
	s, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	killed := map[string]bool{}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				name, _, _ := strings.Cut(strings.TrimPrefix(e.Error(), "stop "), ":")
				if !killed[name] {
					t.Errorf("stop stack: %v", e)
				}
			}
		}
		if t.Failed() {
			t.Logf("logs in %s", s.Options().LogDir)
		}
	})
	return s, killed
}
