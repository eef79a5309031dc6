package e2e

import (
	"context"
	"fmt"
	"io"
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

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
	"github.com/kplane/kplane/test/e2e/internal/leakctl"
	"github.com/kplane/kplane/test/e2e/stack"
)

// monoScale sizes BenchmarkShapes: KPLANE_BENCH_MONO=full for the larger
// run, the tiny one otherwise.
type monoScale struct {
	name                  string
	nodes                 int
	sets, podsPerSet      int
	jobs, completions     int
	idle, settle, leakFor time.Duration
}

func benchMonoScale() monoScale {
	if os.Getenv("KPLANE_BENCH_MONO") == "full" {
		return monoScale{name: "full", nodes: 20, sets: 10, podsPerSet: 50, jobs: 10, completions: 20,
			idle: 20 * time.Second, settle: 10 * time.Second, leakFor: 5 * time.Second}
	}
	return monoScale{name: "tiny", nodes: 5, sets: 4, podsPerSet: 10, jobs: 4, completions: 5,
		idle: 8 * time.Second, settle: 4 * time.Second, leakFor: 3 * time.Second}
}

// shapeResult are one shape's figures.
type shapeResult struct {
	procs                       int
	idleRSSMB, idleCPU          float64 // MB, cores
	watches                     float64
	rsTime, jobTime             time.Duration
	loadCPU, peakRSSMB          float64 // core-seconds, MB
	loadWatchMB, loadSentMB     float64
	killLeases                  int
	killConverge, killLeasesAll time.Duration
	leakLoops                   int
	leakGrowMB                  float64
	panicLeases                 int
	panicConverge               time.Duration
}

// BenchmarkShapes (make bench-mono) runs the same workload against the
// control plane as one process per controller and as kcm, in one run,
// and prints a table of the figures (docs/benchmarks.md, "One process or
// many"). Both shapes run two replicas of every loop, on fake nodes,
// with 4s leases, plaintext (the test-only leakctl loop has no role).
func BenchmarkShapes(b *testing.B) {
	for _, n := range []string{"replicactl", "scheduler", "nodeagent", "gcctl", "nodectl", "ipamctl", "endpointsctl", "jobctl",
		"cronjobctl", "pvctl", "deploymentctl", "statefulsetctl", "daemonsetctl", "disruptionctl"} {
		if err := ensureBinary(n, "services/"+n); err != nil {
			b.Fatal(err)
		}
	}
	sc := benchMonoScale()
	tmp := b.TempDir()
	for _, cmd := range []string{"kcm-leak", "leakctl"} {
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(tmp, cmd), "./cmd/"+cmd)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	for i := 0; i < b.N; i++ {
		fmt.Printf("bench-mono (%s): load before: %s\n", sc.name, uptime())
		sep := measureShape(b, false, sc, tmp)
		mono := measureShape(b, true, sc, tmp)
		fmt.Printf("bench-mono (%s): load after: %s\n", sc.name, uptime())
		printShapes(sc, sep, mono)
	}
}

func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// procStat reads a process's resident set (MB) and CPU time (seconds).
func procStat(pid int) (rssMB, cpuSec float64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				rssMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			k, _ := strconv.ParseFloat(f[12], 64)
			cpuSec = (u + k) / 100 // USER_HZ is 100 on Linux
		}
	}
	return rssMB, cpuSec
}

// benchShape is one running shape.
type benchShape struct {
	b      *testing.B
	s      *stack.Stack
	c      *client.Client
	extra  []*launcher.Process // leakctl processes of the separate shape
	leases []string
}

// procs are the controller processes (all but the apiserver and the node
// agent), running ones only.
func (bs *benchShape) procs() []*launcher.Process {
	var out []*launcher.Process
	for _, svc := range bs.s.Services() {
		if svc.Binary != "apiserver" && svc.Binary != "nodeagent" && svc.Process().Running() {
			out = append(out, svc.Process())
		}
	}
	for _, p := range bs.extra {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

func (bs *benchShape) totals() (rssMB, cpuSec float64) {
	for _, p := range bs.procs() {
		r, c := procStat(p.Pid())
		rssMB += r
		cpuSec += c
	}
	return rssMB, cpuSec
}

// apiMetric sums the apiserver's series whose line starts with prefix.
func (bs *benchShape) apiMetric(prefix string) float64 {
	resp, err := http.Get("http://" + bs.s.Options().APIHealthAddr + "/metrics")
	if err != nil {
		bs.b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		bs.b.Fatal(err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// holders maps each lease to its holder's pid.
func (bs *benchShape) holders(ctx context.Context) map[string]int {
	out := map[string]int{}
	for _, n := range bs.leases {
		l, err := client.Leases(bs.c).Get(ctx, kplanev1.NamespaceSystem, n)
		if err != nil {
			continue
		}
		h := l.GetSpec().GetHolderIdentity()
		if i := strings.LastIndexByte(h, '_'); i >= 0 {
			out[n], _ = strconv.Atoi(h[i+1:])
		}
	}
	return out
}

// allHeldLive reports whether every lease is held by a running process.
func (bs *benchShape) allHeldLive(ctx context.Context) bool {
	live := map[int]bool{}
	for _, p := range bs.procs() {
		live[p.Pid()] = true
	}
	h := bs.holders(ctx)
	for _, n := range bs.leases {
		if !live[h[n]] {
			return false
		}
	}
	return true
}

func (bs *benchShape) process(pid int) *launcher.Process {
	for _, p := range bs.procs() {
		if p.Pid() == pid {
			return p
		}
	}
	return nil
}

func (bs *benchShape) waitFor(ctx context.Context, what string, d time.Duration, cond func() bool) time.Duration {
	start := time.Now()
	deadline := start.Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			bs.b.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	return time.Since(start)
}

// running counts ns's pods with label key=value in phase Running, not
// being deleted.
func (bs *benchShape) running(ctx context.Context, ns, selector string) int {
	pods, _, err := client.Pods(bs.c).List(ctx, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() == nil && p.GetStatus().GetPhase() == "Running" {
			n++
		}
	}
	return n
}

// scaleBy adds d replicas to ns/name and returns the new count.
func (bs *benchShape) scaleBy(ctx context.Context, ns, name string, d int32) int32 {
	for {
		rs, err := client.ReplicaSets(bs.c).Get(ctx, ns, name)
		if err != nil {
			bs.b.Fatal(err)
		}
		n := rs.GetSpec().GetReplicas() + d
		rs.Spec.Replicas = proto.Int32(n)
		if _, err = client.ReplicaSets(bs.c).Update(ctx, rs); err == nil {
			return n
		}
		if !client.IsConflict(err) {
			bs.b.Fatal(err)
		}
	}
}

func (bs *benchShape) trigger(ctx context.Context, mode string) {
	_, err := client.Secrets(bs.c).Create(ctx, &kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Name: leakctl.Trigger, Namespace: kplanev1.NamespaceSystem},
		Data: map[string][]byte{"mode": []byte(mode)}})
	if err != nil {
		bs.b.Fatal(err)
	}
}

func measureShape(b *testing.B, mono bool, sc monoScale, tmp string) *shapeResult {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var controllers []string
	for _, c := range stack.Controllers {
		if c != "tokenctl" { // plaintext: no ServiceAccount admission, no signing key
			controllers = append(controllers, c)
		}
	}
	opts := stack.Options{BinDir: binDir, DataDir: b.TempDir(), Runtime: stack.RuntimeFake, Nodes: sc.nodes, NoProxy: true, Insecure: true,
		Replicas: 2, Controllers: controllers, Mono: mono, ControllerArgs: monoLeaseFlags, LogLevel: "warn",
		Args: map[string][]string{"jobctl": {"--backoff-scale", "0"}}}
	if mono {
		var hosted []string
		for _, c := range controllers {
			if stack.KCMHosts(c) {
				hosted = append(hosted, c)
			}
		}
		opts.KCMBinary = filepath.Join(tmp, "kcm-leak")
		opts.Args[stack.KCM] = []string{"--controllers", strings.Join(append(hosted, leakctl.Name), ",")}
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	bs := &benchShape{b: b, s: s, leases: append(slices.Clone(controllers), leakctl.Name)}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		for _, p := range bs.extra {
			_ = p.Term(sctx)
		}
		if err := s.Stop(sctx); err != nil {
			b.Logf("stop stack: %v", err)
		}
	}()
	if !mono {
		for i := 1; i <= 2; i++ {
			health, err := launcher.FreeAddr()
			if err != nil {
				b.Fatal(err)
			}
			p, err := launcher.Start(launcher.Config{Name: fmt.Sprintf("leakctl-%d", i), Binary: filepath.Join(tmp, "leakctl"),
				Args:   append([]string{"--apiserver", s.APIAddr(), "--health-addr", health, "--log-level", "warn"}, monoLeaseFlags...),
				LogDir: s.Options().LogDir, ReadyURL: "http://" + health + "/readyz"})
			if err != nil {
				b.Fatal(err)
			}
			bs.extra = append(bs.extra, p)
			if err := p.WaitHealthy(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if bs.c, err = client.Dial(ctx, s.ClientOptions()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bs.c.Close() }()
	r := &shapeResult{}
	bs.waitFor(ctx, "every lease to be held", 60*time.Second, func() bool { return bs.allHeldLive(ctx) })

	// Idle.
	time.Sleep(sc.settle) // let start-up work finish before measuring idle
	_, cpu0 := bs.totals()
	time.Sleep(sc.idle) // the idle measurement window
	rss, cpu1 := bs.totals()
	r.procs, r.idleRSSMB, r.idleCPU = len(bs.procs()), rss, (cpu1-cpu0)/sc.idle.Seconds()
	r.watches = bs.apiMetric("kplane_apiserver_watchers")

	// Load: ReplicaSets, then Jobs; peak RSS sampled all along.
	sent0, watch0 := bs.sentBytes(""), bs.sentBytes("Watch")
	var peakMu sync.Mutex
	peak := 0.0
	sampleCtx, stopSample := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			rss, _ := bs.totals()
			peakMu.Lock()
			peak = max(peak, rss)
			peakMu.Unlock()
			select {
			case <-sampleCtx.Done():
			case <-time.After(500 * time.Millisecond): // sampling pace
			}
		}
	}()
	_, cpuL0 := bs.totals()
	const ns = "default"
	start := time.Now()
	for i := range sc.sets {
		rs := shapeRS(ns, fmt.Sprintf("bench-%d", i), int32(sc.podsPerSet))
		rs.Spec.Template.Metadata.Labels["bench"] = "rs"
		if _, err := client.ReplicaSets(bs.c).Create(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	bs.waitFor(ctx, "every ReplicaSet pod to run", 5*time.Minute, func() bool { return bs.running(ctx, ns, "bench=rs") == sc.sets*sc.podsPerSet })
	r.rsTime = time.Since(start)
	start = time.Now()
	for i := range sc.jobs {
		j := &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i), Namespace: ns},
			Spec: &kplanev1.JobSpec{Completions: proto.Int32(int32(sc.completions)), Parallelism: proto.Int32(int32(sc.completions)),
				Template: &kplanev1.PodTemplateSpec{
					Metadata: &kplanev1.ObjectMeta{Annotations: map[string]string{"kplane.io/fake-exit-after": "100ms", "kplane.io/fake-exit-code": "0"}},
					Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
						Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"}}}}}}}
		if _, err := client.Jobs(bs.c).Create(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
	bs.waitFor(ctx, "every Job to complete", 5*time.Minute, func() bool {
		jobs, _, err := client.Jobs(bs.c).List(ctx, ns, client.ListOptions{})
		if err != nil {
			return false
		}
		done := 0
		for _, j := range jobs {
			if j.GetStatus().GetSucceeded() == int32(sc.completions) && j.GetStatus().GetCompletionTime() != nil {
				done++
			}
		}
		return done == sc.jobs
	})
	r.jobTime = time.Since(start)
	_, cpuL1 := bs.totals()
	stopSample()
	<-sampled
	r.loadCPU, r.peakRSSMB = cpuL1-cpuL0, peak
	r.loadSentMB = (bs.sentBytes("") - sent0) / 1e6
	r.loadWatchMB = (bs.sentBytes("Watch") - watch0) / 1e6

	// SIGKILL of the process leading replicactl.
	before := bs.holders(ctx)
	victim := bs.process(before["replicactl"])
	if victim == nil {
		b.Fatalf("no running process holds replicactl's lease (pid %d)", before["replicactl"])
	}
	for _, pid := range before {
		if pid == victim.Pid() {
			r.killLeases++
		}
	}
	if err := victim.Kill(ctx); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	want := bs.scaleBy(ctx, ns, "bench-0", 5)
	bs.waitFor(ctx, "the scale after the kill", 2*time.Minute, func() bool {
		return bs.running(ctx, ns, "app=bench-0") == int(want)
	})
	r.killConverge = time.Since(start)
	bs.waitFor(ctx, "every lease re-held after the kill", 2*time.Minute, func() bool { return bs.allHeldLive(ctx) })
	r.killLeasesAll = time.Since(start)
	if err := victim.Restart(); err != nil {
		b.Fatal(err)
	}
	if err := victim.WaitHealthy(ctx); err != nil {
		b.Fatal(err)
	}

	// Leak: the process leading leakctl keeps memory.
	before = bs.holders(ctx)
	leaker := bs.process(before[leakctl.Name])
	if leaker == nil {
		b.Fatal("no running process holds leakctl's lease")
	}
	for _, pid := range before {
		if pid == leaker.Pid() {
			r.leakLoops++
		}
	}
	rss0, _ := procStat(leaker.Pid())
	bs.trigger(ctx, "leak")
	time.Sleep(sc.leakFor) // the leak's duration
	rss1, _ := procStat(leaker.Pid())
	r.leakGrowMB = rss1 - rss0
	if _, err := client.Secrets(bs.c).Delete(ctx, kplanev1.NamespaceSystem, leakctl.Trigger, client.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}

	// Panic outside a reconcile in the process leading leakctl.
	before = bs.holders(ctx)
	victimPid := before[leakctl.Name]
	for _, pid := range before {
		if pid == victimPid {
			r.panicLeases++
		}
	}
	bs.trigger(ctx, "panic")
	bs.waitFor(ctx, "the panicking process to exit", time.Minute, func() bool { return bs.process(victimPid) == nil })
	start = time.Now()
	want = bs.scaleBy(ctx, ns, "bench-1", 5)
	bs.waitFor(ctx, "the scale after the panic", 2*time.Minute, func() bool {
		return bs.running(ctx, ns, "app=bench-1") == int(want)
	})
	r.panicConverge = time.Since(start)
	return r
}

// sentBytes sums kplane_apiserver_sent_bytes_total over every kind, of
// method (every method when "").
func (bs *benchShape) sentBytes(method string) float64 {
	resp, err := http.Get("http://" + bs.s.Options().APIHealthAddr + "/metrics")
	if err != nil {
		bs.b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		bs.b.Fatal(err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "kplane_apiserver_sent_bytes_total{") && (method == "" || strings.Contains(l, `method="`+method+`"`)) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

func printShapes(sc monoScale, sep, mono *shapeResult) {
	row := func(what, a, b string) { fmt.Printf("| %-58s | %16s | %16s |\n", what, a, b) }
	f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	d := func(v time.Duration) string { return v.Round(100 * time.Millisecond).String() }
	ratio := func(a, b float64) string { return f2(b / a) }
	fmt.Printf("\nbench-mono (%s): %d nodes, %d ReplicaSets x %d pods, %d Jobs x %d completions; 2 replicas of every loop\n",
		sc.name, sc.nodes, sc.sets, sc.podsPerSet, sc.jobs, sc.completions)
	row("", "separate", "kcm")
	row("---", "---", "---")
	row("controller processes (incl. scheduler, leakctl)", strconv.Itoa(sep.procs), strconv.Itoa(mono.procs))
	row("RSS of those processes, idle (MB)", f1(sep.idleRSSMB), f1(mono.idleRSSMB)+" (x"+ratio(sep.idleRSSMB, mono.idleRSSMB)+")")
	row("CPU, idle (cores)", f2(sep.idleCPU), f2(mono.idleCPU))
	row("apiserver watch streams, idle", f1(sep.watches), f1(mono.watches))
	row("ReplicaSets: time to all pods running", d(sep.rsTime), d(mono.rsTime))
	row("Jobs: time to all complete", d(sep.jobTime), d(mono.jobTime))
	row("CPU during the load (core-seconds)", f1(sep.loadCPU), f1(mono.loadCPU)+" (x"+ratio(sep.loadCPU, mono.loadCPU)+")")
	row("peak RSS during the load (MB)", f1(sep.peakRSSMB), f1(mono.peakRSSMB))
	row("apiserver bytes sent during the load, watches (MB)", f2(sep.loadWatchMB), f2(mono.loadWatchMB)+" (x"+ratio(sep.loadWatchMB, mono.loadWatchMB)+")")
	row("apiserver bytes sent during the load, all (MB)", f2(sep.loadSentMB), f2(mono.loadSentMB))
	row("SIGKILL replicactl's leader: leases it held", strconv.Itoa(sep.killLeases), strconv.Itoa(mono.killLeases))
	row("  then time to a +5 scale running", d(sep.killConverge), d(mono.killConverge))
	row("  then time to every lease held again", d(sep.killLeasesAll), d(mono.killLeasesAll))
	row("leak: loops in the leaking process", strconv.Itoa(sep.leakLoops), strconv.Itoa(mono.leakLoops))
	row("leak: its RSS growth (MB)", f1(sep.leakGrowMB), f1(mono.leakGrowMB))
	row("panic in leakctl: leases its process held", strconv.Itoa(sep.panicLeases), strconv.Itoa(mono.panicLeases))
	row("  then time to a +5 scale running", d(sep.panicConverge), d(mono.panicConverge))
}
