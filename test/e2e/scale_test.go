package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/scalereport"
	"github.com/kplane/kplane/test/e2e/stack"
)

// scaleConfig is one run of the scale scenario (make bench-scale).
type scaleConfig struct {
	Nodes, Pods int
	// Plot is where the PNG goes ("" for none).
	Plot string
	// ProfileDir receives a CPU profile (10 s) and a heap profile of every
	// process once each count of ProfileAt pods is Running ("" for none),
	// named <process>.<count>.cpu.pprof and <process>.<count>.heap.pprof:
	// profiles early and late in one run show what grows with the pods.
	ProfileDir string
	ProfileAt  []int
	// Insecure runs the stack without TLS and authentication.
	Insecure bool
	// Timeout bounds the wait for every pod to run.
	Timeout time.Duration
	// DataDir keeps etcd's data and the processes' logs ("" for a
	// temporary directory).
	DataDir string
}

// scaleResult is what one run measured.
type scaleResult struct {
	AllRunning time.Duration
	Tenths     []float64
	Ratio      float64
	Samples    []scalereport.Sample
	// PeakRSS and CPU (user+system seconds during the run) by process.
	PeakRSS map[string]uint64
	CPU     map[string]float64
	// CPUPerPod is each process's CPU milliseconds per pod by tenth of
	// the run ("bench" is this process, following every pod's events).
	CPUPerPod map[string][]float64
	// StartupP50/P99: from a pod's ADDED event to its first Running one.
	StartupP50, StartupP99 time.Duration
	// ListPaged (pages of 500), ListFull (one call), Kpctl (get pods -A).
	ListPaged, ListFull, Kpctl time.Duration
	ListItems                  int
	// APIp99 and APIcount by gRPC method, for calls made during the run.
	APIp99   map[string]float64
	APICount map[string]float64
}

// TestScaleSmall runs the scale scenario on 100 fake nodes with a
// ReplicaSet of 5,000 (the CI-sized make bench-scale): every pod must
// run, the report must be complete and the plot written. It prints the
// figures; it asserts no rate or time.
func TestScaleSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack and 5,000 pods")
	}
	res := runScale(t, scaleConfig{Nodes: 100, Pods: 5000, Plot: filepath.Join(t.TempDir(), "scale.png"), Timeout: 10 * time.Minute})
	if len(res.Tenths) != 10 {
		t.Fatalf("tenths: %v", res.Tenths)
	}
	if res.ListItems != 5000 {
		t.Errorf("the paginated List returned %d pods, want 5000", res.ListItems)
	}
	for _, p := range []string{"apiserver", "scheduler-1", "replicactl-1", "ipamctl-1", "nodeagent"} {
		if res.PeakRSS[p] == 0 {
			t.Errorf("no RSS sampled for %s", p)
		}
		if len(res.CPUPerPod[p]) != 10 {
			t.Errorf("no CPU per pod by tenth for %s: %v", p, res.CPUPerPod[p])
		}
	}
	if res.APICount["Create"] < 5000 {
		t.Errorf("the apiserver's metrics show %v Creates during the run, want at least 5000", res.APICount["Create"])
	}
}

// BenchmarkScale is make bench-scale: SCALE_NODES fake nodes (1000),
// a ReplicaSet of SCALE_PODS (100000), the plot written to SCALE_PLOT,
// profiles to SCALE_PROFILE_DIR at SCALE_PROFILE_AT Running pods.
func BenchmarkScale(b *testing.B) {
	cfg := scaleConfig{Nodes: testutil.EnvInt(b, "SCALE_NODES", 1000), Pods: testutil.EnvInt(b, "SCALE_PODS", 100000),
		Plot: os.Getenv("SCALE_PLOT"), ProfileDir: os.Getenv("SCALE_PROFILE_DIR"),
		ProfileAt: envInts(b, "SCALE_PROFILE_AT", []int{20000}), Insecure: os.Getenv("SCALE_INSECURE") == "1", DataDir: os.Getenv("SCALE_DATA_DIR")}
	cfg.Timeout = max(10*time.Minute, time.Duration(cfg.Pods/50)*time.Second)
	for range b.N {
		res := runScale(b, cfg)
		b.ReportMetric(res.AllRunning.Seconds(), "s-all-running")
		b.ReportMetric(res.Ratio, "last/first-tenth")
	}
}

// runScale starts the apiserver, scheduler, replicactl, ipamctl (and
// tokenctl when secure) and one node agent faking cfg.Nodes nodes as
// processes, creates a ReplicaSet of cfg.Pods and follows every pod
// until all run, sampling RSS; then it times Lists and kpctl, reads the
// apiserver's latency histograms, prints the table and writes the plot.
func runScale(tb testing.TB, cfg scaleConfig) *scaleResult {
	tb.Helper()
	needBinaries(tb, "scheduler", "replicactl", "ipamctl", "nodeagent")
	for n, dir := range map[string]string{"tokenctl": "services/tokenctl", "kpctl": "cmd/kpctl"} {
		if err := ensureBinary(n, dir); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout+5*time.Minute)
	defer cancel()
	dataDir := cfg.DataDir
	if dataDir == "" {
		dataDir = tb.TempDir()
	}
	s, err := stack.Start(ctx, stack.Options{BinDir: binDir, DataDir: dataDir,
		Controllers: []string{"scheduler", "replicactl", "ipamctl"}, Runtime: stack.RuntimeFake, Nodes: cfg.Nodes,
		NoProxy: true, LogLevel: "warn", Insecure: cfg.Insecure,
		// Leases that survive an apiserver starved of CPU for tens of
		// seconds: on this shared two-core machine (load average 20-40
		// from other work) lease renewals of 10 s failed, every
		// controller's new term relisted 100,000 pods, and the relists
		// starved the apiserver further. The scenario measures the
		// control plane's throughput, not leader election.
		ControllerArgs: []string{"--leader-elect-lease-duration", "60s", "--leader-elect-renew-deadline", "45s", "--leader-elect-retry-period", "5s"}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			tb.Errorf("stop stack: %v", err)
		}
		if tb.Failed() {
			tb.Logf("logs in %s", s.Options().LogDir)
		}
	})
	cli, err := client.Dial(ctx, s.ClientOptions())
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = cli.Close() }() // the run is over; nothing to report
	api := kplanev1.NewResourcesClient(cli.Conn())

	waitFor(tb, ctx, 5*time.Minute, func() string {
		nodes, _, err := client.Nodes(cli).List(ctx, "", client.ListOptions{})
		if err != nil {
			return err.Error()
		}
		ready := 0
		for _, n := range nodes {
			if n.GetSpec().GetPodCidr() == "" {
				continue
			}
			for _, c := range n.GetStatus().GetConditions() {
				if c.GetType() == "Ready" && c.GetStatus() == "True" {
					ready++
				}
			}
		}
		if ready < cfg.Nodes {
			return fmt.Sprintf("%d/%d nodes Ready with a pod CIDR", ready, cfg.Nodes)
		}
		return ""
	})
	if !cfg.Insecure {
		waitDefaultServiceAccount(tb, api)
	}

	before := scrapeLatency(tb, s)
	cpuBefore := processCPU(s)
	tr := newScaleTracker()
	wctx, wcancel := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- tr.follow(wctx, api) }()
	defer func() {
		wcancel()
		if err := <-watchDone; err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("pod watch: %v", err)
		}
	}()
	waitFor(tb, ctx, time.Minute, func() string {
		if !tr.synced() {
			return "the pod watch has not started"
		}
		return ""
	})

	rs := replicaSet("scale", int32(cfg.Pods))
	start := time.Now()
	tr.setStart(start)
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: rs}); err != nil {
		tb.Fatal(err)
	}

	res := &scaleResult{PeakRSS: map[string]uint64{}}
	profileAt := cfg.ProfileAt // the counts still to profile at, ascending
	if cfg.ProfileDir == "" {
		profileAt = nil
	}
	var profWG sync.WaitGroup
	deadline := time.Now().Add(cfg.Timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		running := tr.runningCount()
		smp := scalereport.Sample{At: time.Since(start), Running: running, RSS: map[string]uint64{}, CPU: processCPU(s)}
		for _, svc := range s.Services() {
			if rss := processRSS(svc.Process().Pid()); rss > 0 {
				smp.RSS[svc.Name] = rss
				res.PeakRSS[svc.Name] = max(res.PeakRSS[svc.Name], rss)
			}
		}
		res.Samples = append(res.Samples, smp)
		if len(profileAt) > 0 && running >= profileAt[0] {
			at := profileAt[0]
			profileAt = profileAt[1:]
			profWG.Add(1)
			go func() {
				defer profWG.Done()
				profileAll(tb, s, cfg.ProfileDir, at)
			}()
		}
		if running >= cfg.Pods {
			break
		}
		if time.Now().After(deadline) {
			for i := 0; i < len(res.Samples); i += max(1, len(res.Samples)/20) {
				fmt.Printf("at %5.0fs: %d Running\n", res.Samples[i].At.Seconds(), res.Samples[i].Running)
			}
			if cfg.Plot != "" {
				title := fmt.Sprintf("kplane: ReplicaSet of %d on %d fake nodes (timed out)", cfg.Pods, cfg.Nodes)
				if err := scalereport.Plot(cfg.Plot, title, res.Samples); err != nil {
					tb.Error(err)
				}
			}
			tb.Fatalf("%d/%d pods Running after %v", running, cfg.Pods, cfg.Timeout)
		}
		for _, svc := range s.Services() {
			if !svc.Process().Running() {
				tb.Fatalf("%s exited: %v; see %s", svc.Name, svc.Process().ExitErr(), svc.Process().LogPath())
			}
		}
		<-tick.C
	}
	profWG.Wait()
	runningAt, startup := tr.times()
	res.AllRunning = slices.Max(runningAt)
	res.Tenths = scalereport.Tenths(runningAt, cfg.Pods)
	res.CPUPerPod = scalereport.CPUPerPod(res.Samples, scalereport.TenthBounds(runningAt, cfg.Pods), cfg.Pods)
	if len(res.Tenths) == 10 && res.Tenths[0] > 0 {
		res.Ratio = res.Tenths[9] / res.Tenths[0]
	}
	res.StartupP50 = scalereport.Percentile(startup, 50)
	res.StartupP99 = scalereport.Percentile(startup, 99)
	res.CPU = map[string]float64{}
	for n, c := range processCPU(s) {
		res.CPU[n] = c - cpuBefore[n]
	}
	after := scrapeLatency(tb, s)
	res.APIp99, res.APICount = map[string]float64{}, map[string]float64{}
	for m, h := range after {
		d := h.Sub(before[m])
		if d.Count() > 0 {
			res.APIp99[m] = d.Quantile(0.99)
			res.APICount[m] = d.Count()
		}
	}

	// Lists once everything runs, as an operator would look.
	t0 := time.Now()
	tok := ""
	for {
		resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Limit: 500, Continue: tok})
		if err != nil {
			tb.Fatalf("paginated list: %v", err)
		}
		res.ListItems += len(resp.GetItems())
		if tok = resp.GetContinue(); tok == "" {
			break
		}
	}
	res.ListPaged = time.Since(t0)
	t0 = time.Now()
	fullN, err := listPodsOnce(ctx, api)
	if err != nil {
		tb.Fatal(err)
	}
	res.ListFull = time.Since(t0)
	if fullN != res.ListItems {
		tb.Errorf("the full list has %d pods, the paginated one %d", fullN, res.ListItems)
	}
	t0 = time.Now()
	kp := kpctlFor(s, "get", "pods", "-A")
	kp.Stdout = io.Discard
	var kpErr strings.Builder
	kp.Stderr = &kpErr
	if err := kp.Run(); err != nil {
		tb.Fatalf("kpctl get pods -A: %v: %s", err, kpErr.String())
	}
	res.Kpctl = time.Since(t0)

	printScale(cfg, res)
	if cfg.Plot != "" {
		title := fmt.Sprintf("kplane: ReplicaSet of %d on %d fake nodes", cfg.Pods, cfg.Nodes)
		if err := scalereport.Plot(cfg.Plot, title, res.Samples); err != nil {
			tb.Fatal(err)
		}
		fmt.Printf("plot: %s\n", cfg.Plot)
	}
	return res
}

func waitFor(tb testing.TB, ctx context.Context, d time.Duration, what func() string) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := what()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			tb.Fatalf("timed out: %s", msg)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}

// kpctlFor runs bin/kpctl against the stack as the admin.
func kpctlFor(s *stack.Stack, args ...string) *exec.Cmd {
	conn := []string{"--server", s.APIAddr()}
	if kc := s.Kubeconfig(); kc != "" {
		conn = []string{"--kubeconfig", kc}
	}
	return exec.Command(filepath.Join(binDir, "kpctl"), append(conn, args...)...)
}

// scaleTracker follows the pods of "default": when each was first seen
// and first seen Running.
type scaleTracker struct {
	mu      sync.Mutex
	start   time.Time
	added   map[string]time.Time
	running map[string]time.Time
	isSync  bool
}

func newScaleTracker() *scaleTracker {
	return &scaleTracker{added: map[string]time.Time{}, running: map[string]time.Time{}}
}

func (t *scaleTracker) setStart(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start = at
}

func (t *scaleTracker) synced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.isSync
}

func (t *scaleTracker) runningCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.running)
}

// times returns when each pod first ran (since the start) and each
// pod's startup latency (first seen to first Running).
func (t *scaleTracker) times() (runningAt, startup []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, r := range t.running {
		runningAt = append(runningAt, r.Sub(t.start))
		if a, ok := t.added[name]; ok {
			startup = append(startup, r.Sub(a))
		}
	}
	return runningAt, startup
}

// follow watches pods, resuming from the last revision it saw when the
// stream breaks, until ctx ends.
func (t *scaleTracker) follow(ctx context.Context, api kplanev1.ResourcesClient) error {
	rv := ""
	for ctx.Err() == nil {
		stream, err := api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default", ResourceVersion: rv, AllowBookmarks: true})
		if err != nil {
			return fmt.Errorf("watch pods: %w", err)
		}
		t.mu.Lock()
		t.isSync = true
		t.mu.Unlock()
		for {
			ev, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if client.IsOutOfRange(err) || rv == "" {
					return fmt.Errorf("pod watch ended: %w", err)
				}
				break // resume from rv
			}
			if r := ev.GetObject().Meta().GetResourceVersion(); r != "" {
				rv = r
			}
			p := ev.GetObject().GetPod()
			if p == nil || ev.GetType() == kplanev1.EventType_EVENT_TYPE_DELETED {
				continue
			}
			now := time.Now()
			name := p.GetMetadata().GetName()
			t.mu.Lock()
			if _, ok := t.added[name]; !ok {
				t.added[name] = now
			}
			if _, ok := t.running[name]; !ok && p.GetStatus().GetPhase() == "Running" {
				t.running[name] = now
			}
			t.mu.Unlock()
		}
	}
	return ctx.Err()
}

// processRSS is the resident set of pid in bytes (0 when unknown).
func processRSS(pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }() // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// processCPU is every process's user+system CPU seconds so far, this
// benchmark's own as "bench".
func processCPU(s *stack.Stack) map[string]float64 {
	out := map[string]float64{}
	for _, svc := range s.Services() {
		if c, ok := pidCPU(strconv.Itoa(svc.Process().Pid())); ok {
			out[svc.Name] = c
		}
	}
	if c, ok := pidCPU("self"); ok {
		out["bench"] = c
	}
	return out
}

// pidCPU reads a process's user+system CPU seconds from /proc/PID/stat.
func pidCPU(pid string) (float64, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are fields 14 and 15 of the whole line, in clock ticks (100/s).
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100, true
}

// scrapeLatency reads the apiserver's request latency histograms.
func scrapeLatency(tb testing.TB, s *stack.Stack) map[string]*scalereport.Histogram {
	tb.Helper()
	resp, err := http.Get("http://" + s.Service("apiserver").HealthAddr + "/metrics")
	if err != nil {
		tb.Fatalf("apiserver metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }() // read fully below
	hs, err := scalereport.ParseHistograms(resp.Body, "kplane_apiserver_request_duration_seconds", "method")
	if err != nil {
		tb.Fatal(err)
	}
	return hs
}

// profileAll saves a 10 s CPU profile and a heap profile of every
// process into dir, all processes at once.
func profileAll(tb testing.TB, s *stack.Stack, dir string, at int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Errorf("profiles: %v", err)
		return
	}
	var wg sync.WaitGroup
	for _, svc := range s.Services() {
		for _, p := range []struct{ path, file string }{
			{"/debug/pprof/profile?seconds=10", fmt.Sprintf("%s.%d.cpu.pprof", svc.Name, at)},
			{"/debug/pprof/heap", fmt.Sprintf("%s.%d.heap.pprof", svc.Name, at)},
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fetchTo("http://"+svc.HealthAddr+p.path, filepath.Join(dir, p.file)); err != nil {
					tb.Errorf("profile %s: %v", svc.Name, err)
				}
			}()
		}
	}
	wg.Wait()
	fmt.Printf("profiles at %d Running in %s\n", at, dir)
}

func fetchTo(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read fully below
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return os.WriteFile(path, b, 0o644)
}

func printScale(cfg scaleConfig, r *scaleResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nscale: ReplicaSet of %d on %d fake nodes: all Running after %.1fs (%.0f pods/s overall)\n",
		cfg.Pods, cfg.Nodes, r.AllRunning.Seconds(), float64(cfg.Pods)/r.AllRunning.Seconds())
	tenthsHeader(&b, "tenth")
	b.WriteString("| pods Running/s |")
	for _, v := range r.Tenths {
		fmt.Fprintf(&b, " %.0f |", v)
	}
	fmt.Fprintf(&b, " **%.2f** |\n\n", r.Ratio)
	names := make([]string, 0, len(r.PeakRSS))
	for n := range r.PeakRSS {
		names = append(names, n)
	}
	slices.Sort(names)
	b.WriteString("| process | peak RSS (MiB) | CPU during the run (s) |\n|---|---|---|\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| %s | %.0f | %.1f |\n", n, float64(r.PeakRSS[n])/(1<<20), r.CPU[n])
	}
	if len(r.CPUPerPod) > 0 {
		procs := slices.Sorted(maps.Keys(r.CPUPerPod))
		b.WriteString("\n")
		tenthsHeader(&b, "CPU ms per pod, by tenth")
		total := make([]float64, 10)
		row := func(name string, per []float64) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, v := range per {
				fmt.Fprintf(&b, " %.2f |", v)
			}
			if per[0] > 0 {
				fmt.Fprintf(&b, " %.2f |\n", per[9]/per[0])
			} else {
				b.WriteString(" - |\n")
			}
		}
		for _, n := range procs {
			row(n, r.CPUPerPod[n])
			for k, v := range r.CPUPerPod[n] {
				total[k] += v
			}
		}
		row("all", total)
	}
	fmt.Fprintf(&b, "\n| measure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| pod startup latency p50 / p99 (first seen -> Running) | %v / %v |\n",
		r.StartupP50.Round(time.Millisecond), r.StartupP99.Round(time.Millisecond))
	fmt.Fprintf(&b, "| List of %d pods over gRPC, pages of 500 | %v |\n", r.ListItems, r.ListPaged.Round(time.Millisecond))
	fmt.Fprintf(&b, "| List of %d pods over gRPC, one call | %v |\n", r.ListItems, r.ListFull.Round(time.Millisecond))
	fmt.Fprintf(&b, "| kpctl get pods -A | %v |\n", r.Kpctl.Round(time.Millisecond))
	methods := make([]string, 0, len(r.APIp99))
	for m := range r.APIp99 {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	b.WriteString("\n| API method (during the run) | calls | p99 |\n|---|---|---|\n")
	for _, m := range methods {
		fmt.Fprintf(&b, "| %s | %.0f | %v |\n", m, r.APICount[m], time.Duration(r.APIp99[m]*float64(time.Second)).Round(100*time.Microsecond))
	}
	fmt.Print(b.String())
}

// tenthsHeader writes the header of a table by tenth of the run, first
// naming its rows.
func tenthsHeader(b *strings.Builder, first string) {
	fmt.Fprintf(b, "| %s | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | last/first |\n|---|", first)
	for range 11 {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

// listPodsOnce lists every pod in one call and counts them (the items go as
// soon as it returns).
func listPodsOnce(ctx context.Context, api kplanev1.ResourcesClient) (int, error) {
	resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod"}, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		return 0, fmt.Errorf("list: %w", err)
	}
	return len(resp.GetItems()), nil
}

// envInts reads a comma-separated list of positive integers from the
// environment (def when unset), sorted ascending.
func envInts(tb testing.TB, name string, def []int) []int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			tb.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
