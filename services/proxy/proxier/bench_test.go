package proxier

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

var (
	benchDuration = flag.Duration("proxy-bench-duration", 3*time.Second, "BenchmarkProxy: time spent on each path per workload")
	benchClients  = flag.Int("proxy-bench-clients", 16, "BenchmarkProxy: concurrent clients")
	benchBinary   = flag.String("proxy-bench-binary", "", "BenchmarkProxy: run this proxy binary (bin/proxy) as its own process rather than the proxy in-process")
)

// bigBody is what GET /big answers: a bulk transfer, where splice counts.
const bigBody = 4 << 20

// httpBackends starts n HTTP servers on loopback: "/" answers "ok",
// "/big" answers bigBody bytes.
func httpBackends(t testing.TB, n int) []string {
	t.Helper()
	big := bytes.Repeat([]byte("x"), bigBody)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		_, _ = w.Write(big)
	})
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Serve(ln)
		}()
		t.Cleanup(func() {
			_ = srv.Close()
			<-done
		})
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// phase is one measured run of a workload against one set of targets.
type phase struct {
	requests int
	bytes    int64
	errors   int
	elapsed  time.Duration
	lat      []time.Duration
}

func (p *phase) add(q phase) {
	p.requests += q.requests
	p.bytes += q.bytes
	p.errors += q.errors
	p.elapsed += q.elapsed
	p.lat = append(p.lat, q.lat...)
}

func (p *phase) rate() float64 { return float64(p.requests) / p.elapsed.Seconds() }
func (p *phase) mbps() float64 { return float64(p.bytes) / (1 << 20) / p.elapsed.Seconds() }

func (p *phase) quantile(q float64) time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	slices.Sort(p.lat)
	return p.lat[min(len(p.lat)-1, int(q*float64(len(p.lat))))]
}

// workload is how clients talk to the targets.
type workload struct {
	name      string
	path      string
	keepAlive bool
}

var workloads = []workload{
	{name: "small GET, keep-alive", path: "/", keepAlive: true},
	{name: "small GET, new connection each", path: "/", keepAlive: false},
	{name: "4 MiB GET, keep-alive", path: "/big", keepAlive: true},
}

// run has clients GET path from targets (round robin per client) for d.
func (w workload) run(targets []string, clients int, d time.Duration) phase {
	tr := &http.Transport{DisableKeepAlives: !w.keepAlive, MaxIdleConnsPerHost: clients, MaxIdleConns: 4 * clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var total phase
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine phase
			for n := i; time.Now().Before(deadline); n++ {
				t0 := time.Now()
				r, err := hc.Get("http://" + targets[n%len(targets)] + w.path)
				if err != nil {
					mine.errors++
					continue
				}
				nb, err := io.Copy(io.Discard, r.Body)
				_ = r.Body.Close()
				if err != nil || r.StatusCode != http.StatusOK {
					mine.errors++
					continue
				}
				mine.lat = append(mine.lat, time.Since(t0))
				mine.requests++
				mine.bytes += nb
			}
			mu.Lock()
			total.add(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	return total
}

// benchResult is one workload's direct and proxied figures.
type benchResult struct {
	w              workload
	direct, proxed phase
}

// benchRounds alternate the two paths within a workload.
const benchRounds = 4

// runProxyBench serves backends through a Service on a running proxy and
// runs every workload straight to the backends and through the
// clusterIP, alternating benchRounds times (direct, proxied, direct,
// ...) so that a noisy neighbour on the machine hits both alike; d is
// each path's total time per workload.
func runProxyBench(t testing.TB, clients int, d time.Duration) []benchResult {
	addr := benchService(t)
	var out []benchResult
	for _, w := range workloads {
		r := benchResult{w: w}
		for range benchRounds {
			r.direct.add(w.run(addr.backends, clients, d/benchRounds))
			r.proxed.add(w.run([]string{addr.clusterIP}, clients, d/benchRounds))
		}
		out = append(out, r)
	}
	return out
}

type benchAddrs struct {
	clusterIP string
	backends  []string
}

// benchService starts an apiserver, a proxy, three HTTP backends and a
// Service over them, and waits until the proxy serves it.
func benchService(t testing.TB) benchAddrs {
	var f *fixture
	if *benchBinary == "" {
		f = newFixture(t, "--log-level", "error")
	} else {
		f = externalProxy(t, *benchBinary)
	}
	backends := httpBackends(t, 3)
	ip := randomClusterIP().String()
	port := freePort(t, ip)
	ep := &kplanev1.Endpoints{Metadata: &kplanev1.ObjectMeta{Namespace: kplanev1.NamespaceDefault, Name: "web"}}
	for _, b := range backends {
		host, p, _ := net.SplitHostPort(b)
		pn, _ := strconv.Atoi(p)
		ep.Subsets = append(ep.Subsets, &kplanev1.EndpointSubset{
			Addresses: []*kplanev1.EndpointAddress{{Ip: host}},
			Ports:     []*kplanev1.EndpointPort{{Name: "app", Port: int32(pn)}},
		})
	}
	f.create(webService(ip, port))
	f.create(kplanev1.MustWrap(ep))
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	testutil.Eventually(t, wait, "the proxy serves "+addr, func() bool {
		r, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	return benchAddrs{clusterIP: addr, backends: backends}
}

// externalProxy starts a test apiserver and binary (bin/proxy) as a
// process against it; the process is killed when the test ends.
func externalProxy(t testing.TB, binary string) *fixture {
	t.Helper()
	srv := testserver.Start(t)
	cmd := exec.Command(binary, "--apiserver", srv.Addr(), "--health-addr", "", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", binary, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the process's exit status does not matter here
		_ = cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, api: srv.Client()}
}

// BenchmarkProxy prints requests/s, p50/p99 latency and MB/s straight to
// the backends and through the proxy's clusterIP, with the ratios (make
// bench-proxy).
func BenchmarkProxy(b *testing.B) {
	for range b.N {
		results := runProxyBench(b, *benchClients, *benchDuration)
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		_, _ = fmt.Fprintf(tw, "workload\tpath\treq/s\tMB/s\tp50\tp99\terrors\t\n")
		for _, r := range results {
			for _, row := range []struct {
				name string
				p    *phase
			}{{"direct", &r.direct}, {"clusterIP", &r.proxed}} {
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.1f\t%v\t%v\t%d\t\n", r.w.name, row.name, row.p.rate(), row.p.mbps(),
					row.p.quantile(0.5).Round(time.Microsecond), row.p.quantile(0.99).Round(time.Microsecond), row.p.errors)
			}
			_, _ = fmt.Fprintf(tw, "%s\tratio\t%.2f\t%.2f\tx%.2f\tx%.2f\t\t\n", r.w.name, r.proxed.rate()/r.direct.rate(), r.proxed.mbps()/r.direct.mbps(),
				float64(r.proxed.quantile(0.5))/float64(r.direct.quantile(0.5)), float64(r.proxed.quantile(0.99))/float64(r.direct.quantile(0.99)))
		}
		_ = tw.Flush()
		where := "in-process"
		if *benchBinary != "" {
			where = "process " + *benchBinary
		}
		fmt.Printf("(%d clients, %v per path per workload, proxy %s; proxy, backends and clients share this machine)\n", *benchClients, *benchDuration, where)
	}
}

// TestProxyBenchSmoke runs the benchmark's harness for a moment: every
// workload completes requests on both paths without errors.
func TestProxyBenchSmoke(t *testing.T) {
	for _, r := range runProxyBench(t, 2, 200*time.Millisecond) {
		for name, p := range map[string]phase{"direct": r.direct, "clusterIP": r.proxed} {
			if p.requests == 0 || p.errors != 0 {
				t.Errorf("%s via %s: %d requests, %d errors", r.w.name, name, p.requests, p.errors)
			}
		}
	}
}
