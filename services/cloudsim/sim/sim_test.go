package sim_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/testutil"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	"github.com/kplane/kplane/services/cloudsim/balancer"
	"github.com/kplane/kplane/services/cloudsim/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// running is a sim served over a real gRPC socket.
type running struct {
	api   cloudsimv1.CloudClient
	cloud *sim.Cloud
	stop  func()
}

// lbRange is a loopback range of this test's own, so that parallel runs
// on the host never share load balancer addresses.
func lbRange() netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("127.241.%d.0/28", rand.IntN(256)))
}

func serve(t *testing.T, cfg sim.Config) *running {
	t.Helper()
	if cfg.Balancer.Interval == 0 {
		cfg.Balancer = balancer.Options{Interval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond, UnhealthyAfter: 1}
	}
	cloud, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	cloudsimv1.RegisterCloudServer(srv, cloud)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r := &running{api: cloudsimv1.NewCloudClient(conn), cloud: cloud}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = conn.Close()
		srv.Stop()
		<-done
		cloud.Close()
	}
	t.Cleanup(r.stop)
	return r
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantCode(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), field) {
		t.Fatalf("got %v, want %s naming %q", err, code, field)
	}
}

func TestInstances(t *testing.T) {
	dir := t.TempDir()
	r := serve(t, sim.Config{StateFile: filepath.Join(dir, "state.json"), LBIPRange: lbRange()})
	c := ctx(t)
	resp, err := r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-1", Zone: "zone-a", Region: "region-1", InstanceType: "sim.small",
		Addresses: []*cloudsimv1.Address{{Type: "InternalIP", Address: "127.0.0.11"}}})
	if err != nil {
		t.Fatal(err)
	}
	in := resp.Instance
	if !strings.HasPrefix(in.Id, "i-") || in.ProviderId != "kplane-sim://"+in.Id || in.State != cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING {
		t.Fatalf("created %v", in)
	}
	for _, req := range []*cloudsimv1.GetInstanceRequest{{Id: in.Id}, {Name: "node-1"}, {ProviderId: in.ProviderId}} {
		got, err := r.api.GetInstance(c, req)
		if err != nil || got.Instance.Id != in.Id {
			t.Fatalf("get %v: %v, %v", req, got, err)
		}
	}

	// Bad input names the field and writes nothing.
	_, err = r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "Node_1"})
	wantCode(t, err, codes.InvalidArgument, "name")
	_, err = r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-2", Addresses: []*cloudsimv1.Address{{Type: "InternalIP", Address: "nope"}}})
	wantCode(t, err, codes.InvalidArgument, "addresses[0].address")
	_, err = r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-2", Addresses: []*cloudsimv1.Address{{Type: "Public", Address: "1.2.3.4"}}})
	wantCode(t, err, codes.InvalidArgument, "addresses[0].type")
	_, err = r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-1"})
	wantCode(t, err, codes.AlreadyExists, "node-1")
	_, err = r.api.GetInstance(c, &cloudsimv1.GetInstanceRequest{Id: in.Id, Name: "node-1"})
	wantCode(t, err, codes.InvalidArgument, "exactly one")
	_, err = r.api.GetInstance(c, &cloudsimv1.GetInstanceRequest{ProviderId: "aws://x"})
	wantCode(t, err, codes.InvalidArgument, "providerID")
	_, err = r.api.GetInstance(c, &cloudsimv1.GetInstanceRequest{Name: "node-9"})
	wantCode(t, err, codes.NotFound, "node-9")
	_, err = r.api.SetInstanceState(c, &cloudsimv1.SetInstanceStateRequest{Id: in.Id})
	wantCode(t, err, codes.InvalidArgument, "state")
	list, _ := r.api.ListInstances(c, &cloudsimv1.ListInstancesRequest{})
	if len(list.Instances) != 1 {
		t.Fatalf("bad requests wrote something: %v", list.Instances)
	}

	// shutdown, start, terminate (final); the name is then free again.
	for _, st := range []cloudsimv1.InstanceState{cloudsimv1.InstanceState_INSTANCE_STATE_SHUTDOWN, cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING, cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED} {
		got, err := r.api.SetInstanceState(c, &cloudsimv1.SetInstanceStateRequest{Id: in.Id, State: st})
		if err != nil || got.Instance.State != st {
			t.Fatalf("set %v: %v, %v", st, got, err)
		}
	}
	_, err = r.api.SetInstanceState(c, &cloudsimv1.SetInstanceStateRequest{Id: in.Id, State: cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING})
	wantCode(t, err, codes.FailedPrecondition, "terminated")
	again, err := r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.api.GetInstance(c, &cloudsimv1.GetInstanceRequest{Name: "node-1"})
	if err != nil || got.Instance.Id != again.Instance.Id {
		t.Fatalf("by name after re-creation: %v, %v; want the live %s", got, err, again.Instance.Id)
	}
}

func TestRoutes(t *testing.T) {
	r := serve(t, sim.Config{StateFile: filepath.Join(t.TempDir(), "state.json"), LBIPRange: lbRange()})
	c := ctx(t)
	in, err := r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	id := in.Instance.Id
	if _, err := r.api.CreateRoute(c, &cloudsimv1.CreateRouteRequest{Route: &cloudsimv1.Route{Name: "k-node-1", DestinationCidr: "10.244.1.0/24", TargetInstanceId: id}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		route *cloudsimv1.Route
		code  codes.Code
		field string
	}{
		{&cloudsimv1.Route{DestinationCidr: "10.244.2.0/24", TargetInstanceId: id}, codes.InvalidArgument, "route.name"},
		{&cloudsimv1.Route{Name: "x", DestinationCidr: "10.244.2.1/24", TargetInstanceId: id}, codes.InvalidArgument, "route.destinationCIDR"},
		{&cloudsimv1.Route{Name: "x", DestinationCidr: "10.244.2.0/24"}, codes.InvalidArgument, "route.targetInstanceID"},
		{&cloudsimv1.Route{Name: "x", DestinationCidr: "10.244.2.0/24", TargetInstanceId: "i-none"}, codes.NotFound, "i-none"},
		{&cloudsimv1.Route{Name: "k-node-1", DestinationCidr: "10.244.2.0/24", TargetInstanceId: id}, codes.AlreadyExists, "k-node-1"},
		{&cloudsimv1.Route{Name: "x", DestinationCidr: "10.244.0.0/16", TargetInstanceId: id}, codes.AlreadyExists, "overlaps"},
	} {
		_, err := r.api.CreateRoute(c, &cloudsimv1.CreateRouteRequest{Route: tc.route})
		wantCode(t, err, tc.code, tc.field)
	}
	list, _ := r.api.ListRoutes(c, &cloudsimv1.ListRoutesRequest{})
	if len(list.Routes) != 1 {
		t.Fatalf("routes %v, want only k-node-1", list.Routes)
	}
	if _, err := r.api.DeleteRoute(c, &cloudsimv1.DeleteRouteRequest{Name: "k-node-1"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.api.DeleteRoute(c, &cloudsimv1.DeleteRouteRequest{Name: "k-node-1"})
	wantCode(t, err, codes.NotFound, "k-node-1")
	if _, err := r.api.SetInstanceState(c, &cloudsimv1.SetInstanceStateRequest{Id: id, State: cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED}); err != nil {
		t.Fatal(err)
	}
	_, err = r.api.CreateRoute(c, &cloudsimv1.CreateRouteRequest{Route: &cloudsimv1.Route{Name: "y", DestinationCidr: "10.244.3.0/24", TargetInstanceId: id}})
	wantCode(t, err, codes.FailedPrecondition, "terminated")
}

// backend is a TCP server that answers every connection with its name.
func backend(t *testing.T, addr, name string) net.Listener {
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

// dial connects to the load balancer and reads one line ("" when the
// connection is closed without an answer).
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

// twoBackends listens on the same port at two loopback addresses, as two
// nodes serve one nodePort.
func twoBackends(t *testing.T) (a, b net.Listener, port int) {
	base := fmt.Sprintf("127.242.%d.", rand.IntN(256))
	for range 20 {
		a = backend(t, base+"1:0", "node-a")
		port = a.Addr().(*net.TCPAddr).Port
		l, err := net.Listen("tcp", fmt.Sprintf("%s2:%d", base, port))
		if err != nil {
			_ = a.Close()
			continue
		}
		_ = l.Close()
		return a, backend(t, fmt.Sprintf("%s2:%d", base, port), "node-b"), port
	}
	t.Fatal("no port free on both backend addresses")
	return nil, nil, 0
}

func TestLoadBalancerForwardsToHealthyBackends(t *testing.T) {
	r := serve(t, sim.Config{StateFile: filepath.Join(t.TempDir(), "state.json"), LBIPRange: lbRange()})
	c := ctx(t)
	a, b, port := twoBackends(t)
	aIP := a.Addr().(*net.TCPAddr).IP.String()
	bIP := b.Addr().(*net.TCPAddr).IP.String()
	resp, err := r.api.EnsureLoadBalancer(c, &cloudsimv1.EnsureLoadBalancerRequest{Name: "default.web",
		Listeners: []*cloudsimv1.Listener{{Port: 8080, BackendPort: int32(port)}},
		Backends:  []*cloudsimv1.Backend{{Name: "node-a", Address: aIP}, {Name: "node-b", Address: bIP}}})
	if err != nil {
		t.Fatal(err)
	}
	lb := resp.LoadBalancer
	if lb.Listeners[0].ExternalPort != 8080 || lb.ExternalIp == "" {
		t.Fatalf("load balancer %v: want its own address on the service port", lb)
	}
	addr := net.JoinHostPort(lb.ExternalIp, "8080")
	seen := map[string]bool{}
	testutil.Eventually(t, 20*time.Second, "connections reach both backends", func() bool {
		seen[dial(addr)] = true
		return seen["node-a"] && seen["node-b"]
	})

	// A backend that stops answering is taken out of rotation.
	_ = b.Close()
	testutil.Eventually(t, 20*time.Second, "node-b reported unhealthy", func() bool {
		got, err := r.api.GetLoadBalancer(c, &cloudsimv1.GetLoadBalancerRequest{Name: "default.web"})
		if err != nil {
			return false
		}
		for _, h := range got.LoadBalancer.Health {
			if h.Name == "node-b" && !h.Healthy {
				return true
			}
		}
		return false
	})
	for range 10 {
		if got := dial(addr); got != "node-a" {
			t.Fatalf("connection answered %q, want node-a (the only healthy backend)", got)
		}
	}

	// Removing a backend from the load balancer stops traffic to it too.
	b2 := backend(t, net.JoinHostPort(bIP, fmt.Sprint(port)), "node-b")
	defer func() { _ = b2.Close() }()
	if _, err := r.api.EnsureLoadBalancer(c, &cloudsimv1.EnsureLoadBalancerRequest{Name: "default.web",
		Listeners: []*cloudsimv1.Listener{{Port: 8080, BackendPort: int32(port)}},
		Backends:  []*cloudsimv1.Backend{{Name: "node-b", Address: bIP}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "only node-b answers", func() bool { return dial(addr) == "node-b" })
	for range 10 {
		if got := dial(addr); got != "node-b" {
			t.Fatalf("connection answered %q after node-a left the load balancer", got)
		}
	}

	// Bad requests name the field.
	for _, tc := range []struct {
		req   *cloudsimv1.EnsureLoadBalancerRequest
		field string
	}{
		{&cloudsimv1.EnsureLoadBalancerRequest{Name: "x"}, "listeners"},
		{&cloudsimv1.EnsureLoadBalancerRequest{Name: "x", Listeners: []*cloudsimv1.Listener{{Port: 80, BackendPort: 30000, Protocol: "UDP"}}}, "listeners[0].protocol"},
		{&cloudsimv1.EnsureLoadBalancerRequest{Name: "x", Listeners: []*cloudsimv1.Listener{{Port: 0, BackendPort: 30000}}}, "listeners[0].port"},
		{&cloudsimv1.EnsureLoadBalancerRequest{Name: "x", Listeners: []*cloudsimv1.Listener{{Port: 80, BackendPort: 70000}}}, "listeners[0].backendPort"},
		{&cloudsimv1.EnsureLoadBalancerRequest{Name: "x", Listeners: []*cloudsimv1.Listener{{Port: 80, BackendPort: 30000}}, Backends: []*cloudsimv1.Backend{{Name: "n", Address: "x"}}}, "backends[0].address"},
	} {
		_, err := r.api.EnsureLoadBalancer(c, tc.req)
		wantCode(t, err, codes.InvalidArgument, tc.field)
	}

	if _, err := r.api.DeleteLoadBalancer(c, &cloudsimv1.DeleteLoadBalancerRequest{Name: "default.web"}); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("a deleted load balancer still accepts connections")
	}
	_, err = r.api.DeleteLoadBalancer(c, &cloudsimv1.DeleteLoadBalancerRequest{Name: "default.web"})
	wantCode(t, err, codes.NotFound, "default.web")
}

// TestPortRangeMode: load balancers share one address, each listener on
// a port of the range (compose publishes that range).
func TestPortRangeMode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	ip := netip.MustParseAddr("127.0.0.1")
	r := serve(t, sim.Config{StateFile: filepath.Join(t.TempDir(), "state.json"), LBListenIP: ip, LBAdvertiseIP: ip, LBPortMin: base, LBPortMax: base + 1})
	c := ctx(t)
	a := backend(t, "127.0.0.1:0", "node-a")
	port := int32(a.Addr().(*net.TCPAddr).Port)
	resp, err := r.api.EnsureLoadBalancer(c, &cloudsimv1.EnsureLoadBalancerRequest{Name: "default.web",
		Listeners: []*cloudsimv1.Listener{{Port: 80, BackendPort: port}, {Port: 443, BackendPort: port}},
		Backends:  []*cloudsimv1.Backend{{Name: "node-a", Address: "127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	ls := resp.LoadBalancer.Listeners
	if resp.LoadBalancer.ExternalIp != "127.0.0.1" || ls[0].ExternalPort != int32(base) || ls[1].ExternalPort != int32(base+1) {
		t.Fatalf("load balancer %v: want 127.0.0.1 with ports %d and %d", resp.LoadBalancer, base, base+1)
	}
	testutil.Eventually(t, 20*time.Second, "the first listener forwards", func() bool { return dial(fmt.Sprintf("127.0.0.1:%d", base)) == "node-a" })
	_, err = r.api.EnsureLoadBalancer(c, &cloudsimv1.EnsureLoadBalancerRequest{Name: "other",
		Listeners: []*cloudsimv1.Listener{{Port: 80, BackendPort: port}}})
	wantCode(t, err, codes.ResourceExhausted, "no port left")
}

// TestRestartKeepsState: a sim started again on the same state file has
// the same instances, routes and load balancers, on the same addresses.
func TestRestartKeepsState(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	rng := lbRange()
	r := serve(t, sim.Config{StateFile: state, LBIPRange: rng})
	c := ctx(t)
	in, err := r.api.CreateInstance(c, &cloudsimv1.CreateInstanceRequest{Name: "node-a", Zone: "z"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.api.CreateRoute(c, &cloudsimv1.CreateRouteRequest{Route: &cloudsimv1.Route{Name: "k-node-a", DestinationCidr: "10.1.0.0/24", TargetInstanceId: in.Instance.Id}}); err != nil {
		t.Fatal(err)
	}
	a := backend(t, "127.0.0.1:0", "node-a")
	port := int32(a.Addr().(*net.TCPAddr).Port)
	lb, err := r.api.EnsureLoadBalancer(c, &cloudsimv1.EnsureLoadBalancerRequest{Name: "default.web",
		Listeners: []*cloudsimv1.Listener{{Port: 8080, BackendPort: port}}, Backends: []*cloudsimv1.Backend{{Name: "node-a", Address: "127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(lb.LoadBalancer.ExternalIp, "8080")
	testutil.Eventually(t, 20*time.Second, "the load balancer forwards", func() bool { return dial(addr) == "node-a" })
	r.stop()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("the stopped sim still accepts connections")
	}
	if matches, _ := filepath.Glob(state + ".*.tmp"); len(matches) > 0 {
		t.Fatalf("temporary state files left: %v", matches)
	}

	r2 := serve(t, sim.Config{StateFile: state, LBIPRange: rng})
	got, err := r2.api.GetInstance(c, &cloudsimv1.GetInstanceRequest{Name: "node-a"})
	if err != nil || got.Instance.Id != in.Instance.Id || got.Instance.Zone != "z" {
		t.Fatalf("instance after restart: %v, %v", got, err)
	}
	routes, err := r2.api.ListRoutes(c, &cloudsimv1.ListRoutesRequest{})
	if err != nil || len(routes.Routes) != 1 || routes.Routes[0].DestinationCidr != "10.1.0.0/24" {
		t.Fatalf("routes after restart: %v, %v", routes, err)
	}
	lb2, err := r2.api.GetLoadBalancer(c, &cloudsimv1.GetLoadBalancerRequest{Name: "default.web"})
	if err != nil || lb2.LoadBalancer.ExternalIp != lb.LoadBalancer.ExternalIp {
		t.Fatalf("load balancer after restart: %v, %v; want address %s", lb2, err, lb.LoadBalancer.ExternalIp)
	}
	testutil.Eventually(t, 20*time.Second, "the restarted load balancer forwards", func() bool { return dial(addr) == "node-a" })

	// A state file that does not parse is an error naming it, not an empty cloud.
	if err := os.WriteFile(state, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.New(sim.Config{StateFile: state, LBIPRange: rng}); err == nil || !strings.Contains(err.Error(), state) {
		t.Fatalf("corrupt state: %v, want an error naming %s", err, state)
	}
}

func TestConfigValidate(t *testing.T) {
	ip := netip.MustParseAddr("127.0.0.1")
	for _, cfg := range []sim.Config{
		{LBIPRange: lbRange()},
		{StateFile: "s", LBIPRange: lbRange(), LBAdvertiseIP: ip, LBPortMin: 1, LBPortMax: 2},
		{StateFile: "s", LBAdvertiseIP: ip},
		{StateFile: "s", LBAdvertiseIP: ip, LBListenIP: ip, LBPortMin: 10, LBPortMax: 5},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: want an error", cfg)
		}
	}
}
