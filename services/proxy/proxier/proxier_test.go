package proxier

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestProxierCloseEndsConnections: Close (the proxy's SIGTERM) closes the
// listeners and every forwarded connection, and a later Sync opens
// nothing.
func TestProxierCloseEndsConnections(t *testing.T) {
	p, err := NewProxier(hclog.NewNullLogger(), prometheus.NewRegistry(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a := startBackend(t, "a")
	ip := randomClusterIP().String()
	addr := net.JoinHostPort(ip, strconv.Itoa(int(freePort(t, ip))))
	plan := []PortPlan{{Name: "ns/web", Listen: []string{addr}, Endpoints: []string{a.addr().String()}}}
	if err := p.Sync("ns/web", plan); err != nil {
		t.Fatal(err)
	}
	s, err := connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if ans, err := s.ask("hi"); err != nil || ans != "a hi" {
		t.Fatalf("through the proxy: %q, %v", ans, err)
	}
	p.Close()
	if _, err := s.ask("still?"); err == nil {
		t.Fatal("a forwarded connection outlived Close")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("the listener outlived Close")
	}
	if err := p.Sync("ns/web", plan); err != nil || len(p.Addrs()) != 0 {
		t.Fatalf("Sync after Close: %v, listening on %v; want nothing", err, p.Addrs())
	}
}

// TestProxierAddressTakenByAnotherService: two Services claiming one
// address: the second is refused with an error naming the holder, and
// gets it once the first lets go.
func TestProxierAddressTakenByAnotherService(t *testing.T) {
	p, err := NewProxier(hclog.NewNullLogger(), prometheus.NewRegistry(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ip := randomClusterIP().String()
	addr := net.JoinHostPort(ip, strconv.Itoa(int(freePort(t, ip))))
	if err := p.Sync("ns/one", []PortPlan{{Name: "ns/one", Listen: []string{addr}}}); err != nil {
		t.Fatal(err)
	}
	err = p.Sync("ns/two", []PortPlan{{Name: "ns/two", Listen: []string{addr}}})
	if err == nil || !strings.Contains(err.Error(), "taken by ns/one") {
		t.Fatalf("second claim of %s: %v, want an error naming ns/one", addr, err)
	}
	if err := p.Sync("ns/one", nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync("ns/two", []PortPlan{{Name: "ns/two", Listen: []string{addr}}}); err != nil {
		t.Fatalf("after ns/one let go: %v", err)
	}
	// No endpoints: accepted, then reset.
	if ok, err := refused(addr); !ok {
		t.Fatalf("a port without endpoints: %v, want the connection refused", err)
	}
}

// TestProxierUDPSessionExpires: an idle UDP session ends (its socket and
// goroutine with it); the client's next datagram opens a new one.
func TestProxierUDPSessionExpires(t *testing.T) {
	p, err := NewProxier(hclog.NewNullLogger(), prometheus.NewRegistry(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.udpTimeout = 300 * time.Millisecond
	a := udpBackend(t, "a")
	ip := randomClusterIP().String()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.LocalAddr().(*net.UDPAddr)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync("ns/dns", []PortPlan{{Protocol: kplanev1.ProtocolUDP, Name: "ns/dns", Listen: []string{addr.String()}, Endpoints: []string{a.String()}}}); err != nil {
		t.Fatal(err)
	}
	if got := p.Addrs(); len(got) != 1 || got[0] != "udp/"+addr.String() {
		t.Fatalf("listening on %v, want udp/%s", got, addr)
	}
	c, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got := udpAsk(t, c, "hi"); got != "a hi" {
		t.Fatalf("answer %q, want \"a hi\"", got)
	}
	active := p.metrics.active.WithLabelValues("ns/dns")
	if n := promtest.ToFloat64(active); n != 1 {
		t.Fatalf("%v active sessions, want 1", n)
	}
	testutil.Eventually(t, 10*time.Second, "the idle session ends", func() bool { return promtest.ToFloat64(active) == 0 })
	if got := udpAsk(t, c, "back"); got != "a back" {
		t.Fatalf("after the session ended: %q, want \"a back\"", got)
	}
	if n := promtest.ToFloat64(p.metrics.accepted.WithLabelValues("ns/dns")); n != 2 {
		t.Fatalf("%v sessions opened, want 2", n)
	}
}
