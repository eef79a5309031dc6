package proxier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

const wait = 30 * time.Second

type fixture struct {
	t     testing.TB
	ctx   context.Context
	api   kplanev1.ResourcesClient
	proxy *proxy
}

// newFixture runs a test apiserver and one proxy against it (nodePorts on
// 127.0.0.1).
func newFixture(t testing.TB, args ...string) *fixture {
	t.Helper()
	srv := testserver.Start(t)
	svc, p := newService()
	ctl := controllertest.Run(t, srv.Addr(), svc, append([]string{"--node-ip", "127.0.0.1"}, args...)...)
	ctl.Context(t) // setup done: p.proxier is set
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, api: srv.Client(), proxy: p}
}

func (f *fixture) create(obj *kplanev1.Object) *kplanev1.Object {
	f.t.Helper()
	resp, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: obj})
	if err != nil {
		f.t.Fatalf("create %s: %v", obj.Key(), err)
	}
	return resp.GetObject()
}

func (f *fixture) update(obj *kplanev1.Object) *kplanev1.Object {
	f.t.Helper()
	resp, err := f.api.Update(f.ctx, &kplanev1.UpdateRequest{Object: obj})
	if err != nil {
		f.t.Fatalf("update %s: %v", obj.Key(), err)
	}
	return resp.GetObject()
}

// webService is a Service "web" with one port and no selector: its
// Endpoints are the test's to write, as a user's would be.
func webService(ip string, port int32, mutate ...func(*kplanev1.ServiceSpec)) *kplanev1.Object {
	spec := &kplanev1.ServiceSpec{ClusterIp: ip, Ports: []*kplanev1.ServicePort{{Name: "app", Port: port, TargetPort: kplanev1.IntOrStringFromInt32(9)}}}
	for _, m := range mutate {
		m(spec)
	}
	return kplanev1.MustWrap(&kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Namespace: kplanev1.NamespaceDefault, Name: "web"}, Spec: spec})
}

// endpointsOf lists backends as Endpoints of "web", one subset each (their
// ports differ), under the port name "app".
func endpointsOf(backends ...*backend) *kplanev1.Object {
	ep := &kplanev1.Endpoints{Metadata: &kplanev1.ObjectMeta{Namespace: kplanev1.NamespaceDefault, Name: "web"}}
	for _, b := range backends {
		ep.Subsets = append(ep.Subsets, &kplanev1.EndpointSubset{
			Addresses: []*kplanev1.EndpointAddress{{Ip: b.addr().Addr().String()}},
			Ports:     []*kplanev1.EndpointPort{{Name: "app", Port: int32(b.addr().Port())}},
		})
	}
	return kplanev1.MustWrap(ep)
}

// setEndpoints replaces the subsets of the stored Endpoints cur.
func (f *fixture) setEndpoints(cur *kplanev1.Object, backends ...*backend) *kplanev1.Object {
	f.t.Helper()
	next := proto.Clone(cur).(*kplanev1.Object)
	next.GetEndpoints().Subsets = endpointsOf(backends...).GetEndpoints().Subsets
	return f.update(next)
}

func counts(names []string) map[string]int {
	m := map[string]int{}
	for _, n := range names {
		m[n]++
	}
	return m
}

// TestProxyServesAService drives one Service through its life against a
// real apiserver and real TCP backends: round robin over every endpoint,
// an endpoint removed while a connection to it is open (the connection
// lives on, new ones avoid it), half-close, ClientIP affinity, no ready
// endpoint (connections reset), and the Service deleted (listener gone).
func TestProxyServesAService(t *testing.T) {
	f := newFixture(t)
	a, b, c := startBackend(t, "a"), startBackend(t, "b"), startBackend(t, "c")
	ip := randomClusterIP().String()
	port := freePort(t, ip)
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	svc := f.create(webService(ip, port))
	ep := f.create(endpointsOf(a, b, c))
	name := "default/web:app"

	testutil.Eventually(t, wait, "the proxy answers on "+addr, func() bool {
		s, err := connect(addr)
		if err != nil {
			return false
		}
		s.close()
		return true
	})
	got, err := whoAnswers(addr, 30)
	if err != nil {
		t.Fatalf("30 connections: %v", err)
	}
	if n := counts(got); n["a"] != 10 || n["b"] != 10 || n["c"] != 10 {
		t.Fatalf("30 connections went %v, want 10 to each backend (round robin)", n)
	}

	// A connection to b stays open while b leaves the Endpoints.
	var held *session
	for held == nil || held.backend != "b" {
		if held != nil {
			held.close()
		}
		if held, err = connect(addr); err != nil {
			t.Fatal(err)
		}
	}
	defer held.close()
	ep = f.setEndpoints(ep, a, c)
	testutil.Eventually(t, wait, "new connections avoid b", func() bool {
		got, err := whoAnswers(addr, 4)
		return err == nil && !slices.Contains(got, "b")
	})
	got, err = whoAnswers(addr, 10)
	if n := counts(got); err != nil || n["a"] != 5 || n["c"] != 5 {
		t.Fatalf("10 connections after removing b went %v (%v), want 5 each to a and c", n, err)
	}
	if ans, err := held.ask("still there?"); err != nil || ans != "b still there?" {
		t.Fatalf("the connection to b after b left the Endpoints: %q, %v; want it answered by b", ans, err)
	}

	// Half-close: the client's FIN reaches the backend, whose answer still
	// comes back.
	up, err := connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 1<<20)
	if _, err := fmt.Fprintf(up.c, "upload\n%s", payload); err != nil {
		t.Fatal(err)
	}
	if err := up.c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	ans, err := up.r.ReadString('\n')
	if want := fmt.Sprintf("%s got %d bytes\n", up.backend, len(payload)); err != nil || ans != want {
		t.Fatalf("after a half-close: %q, %v; want %q", ans, err, want)
	}
	up.close()

	// ClientIP affinity: every connection from this host sticks to one
	// endpoint.
	next := proto.Clone(svc).(*kplanev1.Object)
	next.GetService().Spec.SessionAffinity = kplanev1.ServiceAffinityClientIP
	f.update(next)
	testutil.Eventually(t, wait, "10 connections in a row reach one endpoint", func() bool {
		got, err := whoAnswers(addr, 10)
		return err == nil && len(counts(got)) == 1
	})

	// No ready endpoint: connections are reset, and counted.
	ep = f.setEndpoints(ep)
	testutil.Eventually(t, wait, "connections refused without endpoints", func() bool {
		ok, _ := refused(addr)
		return ok
	})
	if n := promtest.ToFloat64(f.proxy.proxier.metrics.refused.WithLabelValues(name)); n < 1 {
		t.Errorf("refused connections metric = %v, want at least 1", n)
	}
	if n := promtest.ToFloat64(f.proxy.proxier.metrics.accepted.WithLabelValues(name)); n < 42 {
		t.Errorf("accepted connections metric = %v, want at least 42", n)
	}
	if n := promtest.ToFloat64(f.proxy.proxier.metrics.active.WithLabelValues(name)); n != 1 {
		t.Errorf("active connections metric = %v, want 1 (the one held to b)", n)
	}
	// Endpoints back: served again.
	f.setEndpoints(ep, c)
	testutil.Eventually(t, wait, "served by c again", func() bool {
		got, err := whoAnswers(addr, 1)
		return err == nil && got[0] == "c"
	})

	// The Service deleted: its listener closes; the open connection lives.
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: kplanev1.NamespaceDefault, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the listener on "+addr+" closed", func() bool {
		_, err := net.DialTimeout("tcp", addr, time.Second)
		return errors.Is(err, syscall.ECONNREFUSED) && len(f.proxy.proxier.Addrs()) == 0
	})
	if ans, err := held.ask("and now?"); err != nil || ans != "b and now?" {
		t.Fatalf("the connection to b after the Service was deleted: %q, %v; want it answered", ans, err)
	}
}

// TestProxyNodePortAndPorts: a NodePort Service is served on its cluster
// IP and on the node IP's nodePort; removing one of two ports closes only
// its listeners.
func TestProxyNodePortAndPorts(t *testing.T) {
	f := newFixture(t)
	a, b := startBackend(t, "a"), startBackend(t, "b")
	ip := randomClusterIP().String()
	p1, p2 := freePort(t, ip), freePort(t, ip)
	nodePort := freeNodePort(t, "127.0.0.1")
	svc := f.create(webService(ip, p1, func(s *kplanev1.ServiceSpec) {
		s.Type = kplanev1.ServiceTypeNodePort
		s.Ports[0].NodePort = nodePort
		s.Ports = append(s.Ports, &kplanev1.ServicePort{Name: "other", Port: p2, TargetPort: kplanev1.IntOrStringFromInt32(9)})
	}))
	ep := endpointsOf(a)
	ep.GetEndpoints().Subsets = append(ep.GetEndpoints().Subsets, &kplanev1.EndpointSubset{
		Addresses: []*kplanev1.EndpointAddress{{Ip: b.addr().Addr().String()}},
		Ports:     []*kplanev1.EndpointPort{{Name: "other", Port: int32(b.addr().Port())}},
	})
	f.create(ep)
	addr1 := net.JoinHostPort(ip, strconv.Itoa(int(p1)))
	addr2 := net.JoinHostPort(ip, strconv.Itoa(int(p2)))
	nodeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))
	for addr, want := range map[string]string{addr1: "a", addr2: "b", nodeAddr: "a"} {
		testutil.Eventually(t, wait, addr+" answered by "+want, func() bool {
			got, err := whoAnswers(addr, 2)
			return err == nil && got[0] == want && got[1] == want
		})
	}

	next := proto.Clone(svc).(*kplanev1.Object)
	next.GetService().Spec.Ports = next.GetService().Spec.Ports[:1]
	f.update(next)
	testutil.Eventually(t, wait, "the removed port's listener closed", func() bool {
		_, err := net.DialTimeout("tcp", addr2, time.Second)
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	if got, err := whoAnswers(addr1, 1); err != nil || got[0] != "a" {
		t.Fatalf("the remaining port: %v, %v; want a", got, err)
	}
	if got := f.proxy.proxier.Addrs(); !slices.Equal(got, sorted(addr1, nodeAddr)) {
		t.Fatalf("listening on %v, want %v", got, sorted(addr1, nodeAddr))
	}
}

// TestProxyRetriesAnAddressInUse: a cluster IP:port another process holds
// is retried until it is free.
func TestProxyRetriesAnAddressInUse(t *testing.T) {
	f := newFixture(t)
	a := startBackend(t, "a")
	ip := randomClusterIP().String()
	squatter, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := squatter.Addr().String()
	port := int32(squatter.Addr().(*net.TCPAddr).Port)
	f.create(webService(ip, port))
	f.create(endpointsOf(a))
	testutil.Eventually(t, wait, "a listen error counted", func() bool {
		return promtest.ToFloat64(f.proxy.proxier.metrics.listenErrs) >= 1
	})
	_ = squatter.Close()
	testutil.Eventually(t, wait, "served once the address is free", func() bool {
		got, err := whoAnswers(addr, 1)
		return err == nil && got[0] == "a"
	})
}

func TestProxyRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dial-timeout", "0s"}, "dial-timeout"},
		{[]string{"--dial-timeout", "-1s"}, "must be positive"},
		{[]string{"--dial-timeout", "soon"}, "not a duration"},
		{[]string{"--node-ip", "node-1"}, "node-ip"},
		{[]string{"--node-ip", ""}, "not an IP address"},
		{[]string{"--node-ip-check-interval", "-1s"}, "must not be negative"},
		{[]string{"--node-ip-check-interval", "often"}, "not a duration"},
		{[]string{"--node-ip-check-interval", "2s"}, "--node-ip-check-interval needs --node-ip"},
	} {
		err := app.Run(context.Background(), NewService(), append([]string{"--apiserver", "127.0.0.1:1", "--health-addr", ""}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// TestProxySkipsADeadEndpoint: an endpoint that refuses connections (its
// pod died, the Endpoints not updated yet) costs a dial error, not a
// failed connection.
func TestProxySkipsADeadEndpoint(t *testing.T) {
	f := newFixture(t, "--dial-timeout", "2s")
	if got := f.proxy.proxier.dialTimeout; got != 2*time.Second {
		t.Fatalf("--dial-timeout 2s gave a dial timeout of %v", got)
	}
	a, dead := startBackend(t, "a"), startBackend(t, "dead")
	dead.close()
	ip := randomClusterIP().String()
	port := freePort(t, ip)
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	f.create(webService(ip, port))
	f.create(endpointsOf(a, dead))
	testutil.Eventually(t, wait, "the proxy answers on "+addr, func() bool {
		_, err := whoAnswers(addr, 1)
		return err == nil
	})
	got, err := whoAnswers(addr, 10)
	if n := counts(got); err != nil || n["a"] != 10 {
		t.Fatalf("10 connections: %v, %v; want all answered by a", n, err)
	}
	if n := promtest.ToFloat64(f.proxy.proxier.metrics.dialErrors.WithLabelValues("default/web:app")); n < 5 {
		t.Fatalf("dial errors metric = %v, want at least 5 (every other connection tried the dead endpoint first)", n)
	}
}
