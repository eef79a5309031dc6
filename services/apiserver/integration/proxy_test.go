package integration_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// backend is a real HTTP server on a loopback address that answers with
// its name, the method, path, query and body it received.
type backend struct {
	name string
	addr *net.TCPAddr
	// release lets /stream finish after its first chunk.
	release chan struct{}
}

func startBackend(t *testing.T, name, ip string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", ip+":0")
	must(t, err, "listen for backend "+name)
	b := &backend{name: name, addr: lis.Addr().(*net.TCPAddr), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-b.release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = buf.Flush()
		line, _ := buf.ReadString('\n')
		_, _ = conn.Write([]byte("echo:" + line))
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = buf.Flush()
		_, _ = io.Copy(io.Discard, buf) // until the proxy lets go
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Backend", name)
		_, _ = fmt.Fprintf(w, "%s %s %s?%s %s", name, r.Method, r.URL.Path, r.URL.RawQuery, body)
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

func (b *backend) port() int32 { return int32(b.addr.Port) }

// httpDo sends one request to the apiserver's main listener.
func httpDo(t *testing.T, method, url, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, strings.NewReader(body))
	must(t, err, "build request")
	resp, err := http.DefaultClient.Do(req)
	must(t, err, method+" "+url)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	must(t, err, "read body")
	return resp.StatusCode, resp.Header, string(b)
}

// requireStatus checks a Kubernetes Status answer.
func requireStatus(t *testing.T, code int, body string, wantCode int, wantReason, wantMsg string) {
	t.Helper()
	var st struct {
		Kind, Status, Reason, Message string
		Code                          int
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body %q is not a Status: %v", body, err)
	}
	if code != wantCode || st.Kind != "Status" || st.Status != "Failure" || st.Code != wantCode || st.Reason != wantReason || !strings.Contains(st.Message, wantMsg) {
		t.Fatalf("got %d %+v, want %d %s containing %q", code, st, wantCode, wantReason, wantMsg)
	}
}

func TestServiceProxy(t *testing.T) {
	srv, c := start(t)
	a := startBackend(t, "a", "127.0.0.1")
	b := startBackend(t, "b", "127.0.0.1")
	base := "http://" + srv.Addr() + "/api/v1/namespaces/default"

	create(t, c, newService("web", "", 80))
	create(t, c, kplanev1.MustWrap(&kplanev1.Endpoints{Metadata: meta("default", "web", nil), Subsets: []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}}, Ports: []*kplanev1.EndpointPort{{Port: a.port()}}},
		{Addresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}}, Ports: []*kplanev1.EndpointPort{{Port: b.port()}}},
		// Not ready: never chosen.
		{NotReadyAddresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}}, Ports: []*kplanev1.EndpointPort{{Port: 1}}},
	}}))

	code, hdr, body := httpDo(t, http.MethodGet, base+"/services/web:80/proxy/x/y?q=1", "")
	if code != http.StatusOK || !strings.HasSuffix(body, " GET /x/y?q=1 ") || hdr.Get("X-Backend") == "" {
		t.Fatalf("GET through the proxy: %d %q", code, body)
	}
	code, _, body = httpDo(t, http.MethodPost, base+"/services/web:80/proxy/submit", "payload")
	if code != http.StatusOK || !strings.HasSuffix(body, " POST /submit? payload") {
		t.Fatalf("POST through the proxy: %d %q", code, body)
	}
	for _, name := range []string{"web", "http:web:80", "web:"} {
		code, _, body = httpDo(t, http.MethodGet, base+"/services/"+name+"/proxy", "")
		if code != http.StatusOK || !strings.HasSuffix(body, " GET /? ") {
			t.Fatalf("GET %s/proxy: %d %q", name, code, body)
		}
	}
	// Cleartext HTTP/2 is gRPC's: without a gRPC content-type the gRPC
	// server refuses it clearly (415) rather than hanging.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	defer h2.CloseIdleConnections()
	h2req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, base+"/services/web:80/proxy/h2", nil)
	must(t, err, "build h2c request")
	h2resp, err := h2.Do(h2req)
	must(t, err, "h2c request")
	_ = h2resp.Body.Close()
	if h2resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("h2c GET: %s %d, want 415 from the gRPC server", h2resp.Proto, h2resp.StatusCode)
	}

	// Round robin reaches every ready endpoint.
	seen := map[string]int{}
	for range 10 {
		code, hdr, _ = httpDo(t, http.MethodGet, base+"/services/web:80/proxy/", "")
		if code != http.StatusOK {
			t.Fatalf("GET: %d", code)
		}
		seen[hdr.Get("X-Backend")]++
	}
	if seen["a"] == 0 || seen["b"] == 0 || len(seen) != 2 {
		t.Fatalf("requests by backend: %v, want both a and b", seen)
	}

	// Streaming: the first chunk arrives while the backend still holds the response.
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, base+"/services/web:80/proxy/stream", nil)
	must(t, err, "build stream request")
	resp, err := http.DefaultClient.Do(req)
	must(t, err, "stream request")
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first streamed line %q, %v", line, err)
	}
	close(a.release)
	close(b.release)
	_ = resp.Body.Close()

	// Upgrades pass through (websockets work the same way).
	conn, err := net.Dial("tcp", srv.Addr())
	must(t, err, "dial apiserver")
	defer func() { _ = conn.Close() }()
	_, err = fmt.Fprintf(conn, "GET /api/v1/namespaces/default/services/web:80/proxy/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	must(t, err, "write upgrade request")
	br := bufio.NewReader(conn)
	up, err := http.ReadResponse(br, nil)
	must(t, err, "read upgrade response")
	if up.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d", up.StatusCode)
	}
	_, err = io.WriteString(conn, "hello\n")
	must(t, err, "write after upgrade")
	if got, err := br.ReadString('\n'); err != nil || got != "echo:hello\n" {
		t.Fatalf("after upgrade got %q, %v", got, err)
	}

	// Failures are Kubernetes Status objects.
	code, _, body = httpDo(t, http.MethodGet, base+"/services/nope:80/proxy/", "")
	requireStatus(t, code, body, http.StatusNotFound, "NotFound", `services "nope" not found`)
	create(t, c, newService("empty", "", 80))
	code, _, body = httpDo(t, http.MethodGet, base+"/services/empty:80/proxy/", "")
	requireStatus(t, code, body, http.StatusServiceUnavailable, "ServiceUnavailable", `no endpoints available for service "empty"`)
	code, _, body = httpDo(t, http.MethodGet, base+"/services/web:81/proxy/", "")
	requireStatus(t, code, body, http.StatusServiceUnavailable, "ServiceUnavailable", `no service port "81"`)
	code, _, body = httpDo(t, http.MethodGet, base+"/services/https:web:80/proxy/", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", "https is not supported")
	code, _, body = httpDo(t, http.MethodGet, base+"/services/a:b:c:d/proxy/", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", "invalid service request")
	code, _, body = httpDo(t, http.MethodGet, "http://"+srv.Addr()+"/no/such/path", "")
	requireStatus(t, code, body, http.StatusNotFound, "NotFound", "/no/such/path")
	// An endpoint that does not answer: 503 naming it.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "reserve a port")
	deadPort := dead.Addr().(*net.TCPAddr).Port
	_ = dead.Close()
	create(t, c, newService("dead", "", 80))
	create(t, c, kplanev1.MustWrap(&kplanev1.Endpoints{Metadata: meta("default", "dead", nil), Subsets: []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}}, Ports: []*kplanev1.EndpointPort{{Port: int32(deadPort)}}}}}))
	code, _, body = httpDo(t, http.MethodGet, base+"/services/dead/proxy/", "")
	requireStatus(t, code, body, http.StatusServiceUnavailable, "ServiceUnavailable", "127.0.0.1:"+strconv.Itoa(deadPort))

	// HEAD goes through too (no body).
	code, _, body = httpDo(t, http.MethodHead, base+"/services/web:80/proxy/x", "")
	if code != http.StatusOK || body != "" {
		t.Fatalf("HEAD: %d %q", code, body)
	}

	// gRPC still answers on the same listener.
	get(t, c, "Service", "default", "web")

	// Every proxied request is counted by kind and status.
	_, _, metrics := httpDo(t, http.MethodGet, "http://"+srv.API().HealthAddr()+"/metrics", "")
	for _, series := range []string{
		`kplane_apiserver_proxy_requests_total{code="200",kind="services"}`,
		`kplane_apiserver_proxy_requests_total{code="503",kind="services"}`,
		`kplane_apiserver_proxy_requests_total{code="404",kind="services"} 1`,
		`kplane_apiserver_proxy_requests_total{code="101",kind="services"} 1`,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

func TestServiceProxyNamedPorts(t *testing.T) {
	srv, c := start(t)
	web, metrics := startBackend(t, "web", "127.0.0.1"), startBackend(t, "metrics", "127.0.0.1")
	base := "http://" + srv.Addr() + "/api/v1/namespaces/default"
	svc := newService("multi", "", 80, 9090) // ports named p0, p1
	create(t, c, svc)
	create(t, c, kplanev1.MustWrap(&kplanev1.Endpoints{Metadata: meta("default", "multi", nil), Subsets: []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}}, Ports: []*kplanev1.EndpointPort{
			{Name: "p0", Port: web.port()}, {Name: "p1", Port: metrics.port()}}},
	}}))
	for path, want := range map[string]string{"multi:p1": "metrics", "multi:9090": "metrics", "multi:80": "web", "multi:p0": "web", "multi": "web"} {
		code, hdr, body := httpDo(t, http.MethodGet, base+"/services/"+path+"/proxy/", "")
		if code != http.StatusOK || hdr.Get("X-Backend") != want {
			t.Fatalf("%s: %d %q from %q, want %s", path, code, body, hdr.Get("X-Backend"), want)
		}
	}
}

func TestPodProxy(t *testing.T) {
	srv, c := start(t)
	be := startBackend(t, "pod", "127.0.0.1")
	base := "http://" + srv.Addr() + "/api/v1/namespaces/default/pods"
	pod := newPod("default", "p", nil)
	pod.GetPod().Spec.Containers[0].Ports = []*kplanev1.ContainerPort{{Name: "http", ContainerPort: be.port()}}
	pod = create(t, c, pod)

	code, _, body := httpDo(t, http.MethodGet, base+"/p:http/proxy/hello", "")
	requireStatus(t, code, body, http.StatusServiceUnavailable, "ServiceUnavailable", `pod "p" has no IP`)

	pod.GetPod().Status.PodIp = "127.0.0.1"
	updateStatus(t, c, pod)
	for _, name := range []string{"p:http", "p:" + strconv.Itoa(int(be.port())), "p"} {
		code, _, body = httpDo(t, http.MethodPut, base+"/"+name+"/proxy/hello", "x")
		if code != http.StatusOK || body != "pod PUT /hello? x" {
			t.Fatalf("%s: %d %q", name, code, body)
		}
	}
	code, _, body = httpDo(t, http.MethodGet, base+"/p:nope/proxy/", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", `no container port named "nope"`)
	code, _, body = httpDo(t, http.MethodGet, base+"/ghost/proxy/", "")
	requireStatus(t, code, body, http.StatusNotFound, "NotFound", `pods "ghost" not found`)
	_, err := c.Get(testCtx(t), &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "ghost"})
	requireCode(t, err, codes.NotFound)
}

// TestSilentConnectionDropped: a connection that never says which
// protocol it speaks is closed by the listener split instead of holding
// a goroutine (and shutdown) forever; gRPC goes on meanwhile.
func TestSilentConnectionDropped(t *testing.T) {
	srv, c := start(t)
	conn, err := net.Dial("tcp", srv.Addr())
	must(t, err, "dial")
	defer func() { _ = conn.Close() }()
	get(t, c, "Namespace", "", "default")
	must(t, conn.SetReadDeadline(time.Now().Add(time.Minute)), "set deadline")
	n, err := conn.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("silent connection: read %d bytes, %v; want it closed by the server", n, err)
	}
}

// TestUpgradedConnectionEndsWithServer: a connection upgraded through
// the proxy (not tracked by the HTTP server) is closed when the apiserver
// stops, backend side included, so nothing outlives it.
func TestUpgradedConnectionEndsWithServer(t *testing.T) {
	srv, c := start(t)
	be := startBackend(t, "hold", "127.0.0.1")
	create(t, c, newService("web", "", 80))
	create(t, c, kplanev1.MustWrap(&kplanev1.Endpoints{Metadata: meta("default", "web", nil), Subsets: []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{{Ip: "127.0.0.1"}}, Ports: []*kplanev1.EndpointPort{{Port: be.port()}}}}}))
	conn, err := net.Dial("tcp", srv.Addr())
	must(t, err, "dial")
	defer func() { _ = conn.Close() }()
	_, err = fmt.Fprintf(conn, "GET /api/v1/namespaces/default/services/web/proxy/hold HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	must(t, err, "write upgrade request")
	br := bufio.NewReader(conn)
	up, err := http.ReadResponse(br, nil)
	must(t, err, "read upgrade response")
	if up.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d", up.StatusCode)
	}
	srv.Stop()
	must(t, conn.SetReadDeadline(time.Now().Add(time.Minute)), "set deadline")
	if n, err := br.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("upgraded connection after stop: read %d bytes, %v; want it closed", n, err)
	}
}
