package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// BenchmarkAgentScale runs the node agent binary as its own process
// (--runtime fake) with KPLANE_BENCH_NODES fake nodes (default 200) against
// an in-process apiserver, creates KPLANE_BENCH_PODS pods (default 20000)
// already bound to them round-robin (no scheduler), and reports how fast
// they turn Running, the create→Running latency, the status writes per
// pod (MODIFIED events a watch sees) and the agent's own peak RSS, heap in
// use at the end and CPU seconds (KPLANE_BENCH_HEAP_PROFILE=file saves its
// heap profile once all pods run; KPLANE_BENCH_AGENT_ARGS adds flags to
// the agent's; KPLANE_BENCH_AGENT_BIN runs that binary instead of one
// built from this tree, to compare with another commit). Run with
//
//	go test -run '^$' -bench AgentScale -benchtime 1x ./internal/agent/
func BenchmarkAgentScale(b *testing.B) {
	nodes, pods := testutil.EnvInt(b, "KPLANE_BENCH_NODES", 200), testutil.EnvInt(b, "KPLANE_BENCH_PODS", 20000)
	bin := os.Getenv("KPLANE_BENCH_AGENT_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "nodeagent")
		if out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput(); err != nil {
			b.Fatalf("build the node agent: %v\n%s", err, out)
		}
	}
	for range b.N {
		srv := testserver.Start(b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
		if err != nil {
			b.Fatal(err)
		}
		// The nodes exist with their pod CIDRs, as ipamctl would leave them.
		benchParallel(b, nodes, 16, func(j int) error {
			n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("bench-%d", j)},
				Spec: &kplanev1.NodeSpec{PodCidr: fmt.Sprintf("10.%d.%d.0/24", 100+j/256, j%256)}}
			_, err := client.For[*kplanev1.Node](api).Create(ctx, n)
			return err
		})
		health := freeAddr(b)
		cmd := exec.Command(bin, "--apiserver", srv.Addr(), "--health-addr", health, "--logs-addr", "127.0.0.1:0",
			"--log-level", "warn", "--root-dir", b.TempDir(), "--runtime", "fake", "--fake-nodes", strconv.Itoa(nodes),
			"--node-name", "bench", "--heartbeat-interval", "10s")
		cmd.Args = append(cmd.Args, strings.Fields(os.Getenv("KPLANE_BENCH_AGENT_ARGS"))...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		stopAgent := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		metrics := func() map[string]float64 { return scrape("http://" + health + "/metrics") }
		for deadline := time.Now().Add(30 * time.Second); metrics()["process_resident_memory_bytes"] == 0; {
			if time.Now().After(deadline) {
				stopAgent()
				b.Fatal("the agent's /metrics did not answer")
			}
			time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
		}

		// One watch sees every pod turn Running and counts its status writes.
		w, err := client.For[*kplanev1.Pod](api).Watch(ctx, "default", client.WatchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		created := make(map[string]time.Time, pods)
		var lat []time.Duration
		modified := 0
		allRunning := make(chan time.Time, 1)
		go func() {
			seen := map[string]bool{}
			for {
				ev, err := w.Recv()
				if err != nil {
					return
				}
				if ev.Type != kplanev1.EventType_EVENT_TYPE_MODIFIED {
					continue
				}
				now := time.Now()
				name := ev.Object.GetMetadata().GetName()
				mu.Lock()
				modified++
				if ev.Object.GetStatus().GetPhase() == kplanev1.PodRunning && !seen[name] {
					seen[name] = true
					lat = append(lat, now.Sub(created[name]))
					if len(seen) == pods {
						allRunning <- now
					}
				}
				mu.Unlock()
			}
		}()

		var peakRSS, peakHeap float64
		sample := func() {
			m := metrics()
			peakRSS, peakHeap = max(peakRSS, m["process_resident_memory_bytes"]), max(peakHeap, m["go_memstats_heap_inuse_bytes"])
		}
		cpu0 := metrics()["process_cpu_seconds_total"]
		start := time.Now()
		sampling, stopSampling := context.WithCancel(ctx)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-sampling.Done():
					return
				case <-t.C:
					sample()
				}
			}
		}()
		benchParallel(b, pods, 32, func(j int) error {
			name := fmt.Sprintf("p-%d", j)
			p := &kplanev1.Pod{
				Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "bench"}},
				Spec: &kplanev1.PodSpec{NodeName: fmt.Sprintf("bench-%d", j%nodes),
					Containers: []*kplanev1.Container{{Name: "c", Image: "registry.example/app:1",
						Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "10m", "memory": "16Mi"}}}}},
			}
			mu.Lock()
			created[name] = time.Now()
			mu.Unlock()
			_, err := client.For[*kplanev1.Pod](api).Create(ctx, p)
			return err
		})
		createdAll := time.Since(start)
		var end time.Time
		select {
		case end = <-allRunning:
		case <-ctx.Done():
			stopSampling()
			stopAgent()
			mu.Lock()
			b.Fatalf("only %d of %d pods Running", len(lat), pods)
		}
		stopSampling()
		sample()
		m := metrics()
		if f := os.Getenv("KPLANE_BENCH_HEAP_PROFILE"); f != "" {
			saveProfile(b, "http://"+health+"/debug/pprof/heap", f)
		}
		elapsed := end.Sub(start)
		mu.Lock()
		slices.Sort(lat)
		b.ReportMetric(float64(pods)/elapsed.Seconds(), "pods_running/s")
		b.ReportMetric(float64(pods)/createdAll.Seconds(), "pods_created/s")
		b.ReportMetric(lat[len(lat)/2].Seconds(), "p50_s")
		b.ReportMetric(lat[len(lat)*99/100].Seconds(), "p99_s")
		b.ReportMetric(float64(modified)/float64(pods), "writes/pod")
		mu.Unlock()
		b.ReportMetric(peakRSS/(1<<20), "agent_peak_rss_MiB")
		b.ReportMetric(peakHeap/(1<<20), "agent_peak_heap_MiB")
		b.ReportMetric(m["go_memstats_heap_inuse_bytes"]/(1<<20), "agent_end_heap_MiB")
		b.ReportMetric(m["process_cpu_seconds_total"]-cpu0, "agent_cpu_s")
		w.Stop()
		stopAgent()
		_ = api.Close()
		cancel()
	}
}

// saveProfile writes what url serves (a pprof profile) to file.
func saveProfile(b *testing.B, url, file string) {
	resp, err := http.Get(url) //nolint:noctx // a loopback fetch with the client's default transport
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// scrape reads the unlabelled samples of a Prometheus text endpoint; nil
// when it does not answer.
func scrape(url string) map[string]float64 {
	resp, err := http.Get(url) //nolint:noctx // a loopback scrape with the client's default transport
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

func startAgentB(b *testing.B, e *env, args ...string) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	base := []string{"--apiserver", e.srv.Addr(), "--health-addr", "127.0.0.1:0", "--logs-addr", "127.0.0.1:0",
		"--log-level", "warn", "--root-dir", e.root}
	go func() { done <- runService(ctx, append(base, args...)) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("agent: %v", err)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
