package proxier

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
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
