package proxier

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// udpBackend answers every datagram with "<name> <datagram>".
func udpBackend(t *testing.T, name string) *net.UDPAddr {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort([]byte(name+" "+string(buf[:n])), from) // a lost answer fails the test's read
		}
	}()
	t.Cleanup(func() {
		_ = c.Close()
		wg.Wait()
	})
	return c.LocalAddr().(*net.UDPAddr)
}

// udpAsk sends msg from c and returns the answer ("" after a timeout).
func udpAsk(t *testing.T, c *net.UDPConn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		return ""
	}
	if err := c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// TestProxyUDP: a UDP service port spreads client addresses over its
// endpoints round robin, keeps each client's session on one endpoint,
// drops datagrams without endpoints, and closes with the Service.
func TestProxyUDP(t *testing.T) {
	f := newFixture(t)
	a, b := udpBackend(t, "a"), udpBackend(t, "b")
	ip := randomClusterIP().String()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.LocalAddr().(*net.UDPAddr).Port)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	f.create(webService(ip, port, func(s *kplanev1.ServiceSpec) {
		s.Ports[0].Name, s.Ports[0].Protocol = "dns", kplanev1.ProtocolUDP
	}))
	ep := &kplanev1.Endpoints{Metadata: &kplanev1.ObjectMeta{Namespace: kplanev1.NamespaceDefault, Name: "web"}}
	for _, be := range []*net.UDPAddr{a, b} {
		ep.Subsets = append(ep.Subsets, &kplanev1.EndpointSubset{
			Addresses: []*kplanev1.EndpointAddress{{Ip: be.IP.String()}},
			Ports:     []*kplanev1.EndpointPort{{Name: "dns", Port: int32(be.Port), Protocol: kplanev1.ProtocolUDP}},
		})
	}
	epObj := f.create(kplanev1.MustWrap(ep))
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *net.UDPConn {
		c, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	first := dial()
	var answer string
	testutil.Eventually(t, wait, "a UDP answer through "+addr, func() bool {
		answer = udpAsk(t, first, "hi")
		return answer != ""
	})
	answers := map[string]int{answer: 1}
	for range 3 {
		answers[udpAsk(t, dial(), "hi")]++
	}
	if answers["a hi"] != 2 || answers["b hi"] != 2 {
		t.Fatalf("4 clients got %v, want 2 answers from each of a and b", answers)
	}
	for range 3 {
		if got := udpAsk(t, first, "again"); got != answer[:1]+" again" {
			t.Fatalf("the first client's session answered %q, want its endpoint %s", got, answer[:1])
		}
	}

	// No endpoints: a new client's datagrams are dropped, and counted.
	next := proto.Clone(epObj).(*kplanev1.Object)
	next.GetEndpoints().Subsets = nil
	f.update(next)
	testutil.Eventually(t, wait, "datagrams dropped without endpoints", func() bool {
		return udpAsk(t, dial(), "anyone?") == "" &&
			promtest.ToFloat64(f.proxy.proxier.metrics.refused.WithLabelValues("default/web:dns")) >= 1
	})

	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: kplanev1.NamespaceDefault, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the UDP listener closed", func() bool { return len(f.proxy.proxier.Addrs()) == 0 })
}
