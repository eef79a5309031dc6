package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestAPIServerServiceRangesAndProxy runs bin/apiserver with its
// allocation flags: Services get values from the given ranges, a full
// range is refused, the allocation records survive a SIGKILL, and the
// service proxy on the gRPC port reaches a real HTTP backend. The
// apiserver is secured (apiConfig); the test is the admin.
func TestAPIServerServiceRangesAndProxy(t *testing.T) {
	a := newAPIConfig(t)
	p := launch(t, a.config(t.TempDir(), t.TempDir(),
		"--service-cluster-ip-range", "10.200.0.0/29", "--service-node-port-range", "31000-31001",
		"--allocation-repair-interval", "1s"))
	waitHealthy(t, p)
	c := a.dial(t)
	httpc, err := a.pki.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}

	service := func(name, typ string, ports ...int32) *kplanev1.Object {
		spec := &kplanev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": name}}
		for i, port := range ports {
			spec.Ports = append(spec.Ports, &kplanev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: port})
		}
		return kplanev1.MustWrap(&kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name}, Spec: spec})
	}
	ctx, wait := call(t)
	resp, err := c.Create(ctx, &kplanev1.CreateRequest{Object: service("web", "NodePort", 80, 81)}, wait)
	if err != nil {
		t.Fatal(err)
	}
	web := resp.Object.GetService().Spec
	if ip := netip.MustParseAddr(web.ClusterIp); !netip.MustParsePrefix("10.200.0.0/29").Contains(ip) {
		t.Fatalf("clusterIP %s outside --service-cluster-ip-range", ip)
	}
	if a, b := web.Ports[0].NodePort, web.Ports[1].NodePort; a == b || a < 31000 || a > 31001 || b < 31000 || b > 31001 {
		t.Fatalf("nodePorts %d, %d: want 31000 and 31001", a, b)
	}
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: service("more", "NodePort", 80)}, wait)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "31000-31001") {
		t.Fatalf("a third node port: %v, want ResourceExhausted naming the range", err)
	}

	// A real backend behind hand-written Endpoints, through the proxy.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "backend saw "+r.URL.Path)
	})}
	go func() { _ = backend.Serve(lis) }()
	t.Cleanup(func() { _ = backend.Close() })
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Endpoints{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "web"},
		Subsets: []*kplanev1.EndpointSubset{{Addresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}},
			Ports: []*kplanev1.EndpointPort{{Name: "p1", Port: int32(lis.Addr().(*net.TCPAddr).Port)}}}},
	})}, wait)
	if err != nil {
		t.Fatal(err)
	}
	get := func(url string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Body.Close() }()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, body := get(a.pki.URL(a.addr) + "/api/v1/namespaces/default/services/web:p1/proxy/hello"); code != http.StatusOK || body != "backend saw /hello" {
		t.Fatalf("proxy: %d %q", code, body)
	}
	if code, _ := get(a.pki.URL(a.addr) + "/api/v1/namespaces/default/services/web:p0/proxy/"); code != http.StatusServiceUnavailable {
		t.Fatalf("port without endpoints: %d, want 503", code)
	}

	// SIGKILL and start again: the records are in etcd with the service.
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("apiserver did not die")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, p)
	dup := service("dup", "ClusterIP", 80)
	dup.GetService().Spec.ClusterIp = web.ClusterIp
	ctx2, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = c.Create(ctx2, &kplanev1.CreateRequest{Object: dup}, wait)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "provided IP is already allocated") {
		t.Fatalf("web's IP after a restart: %v, want already allocated", err)
	}
}
