// Package bench_test measures the scheduler end to end against an
// in-process apiserver: 100 nodes, 5000 pods created at once. It prints
// the figures (b.ReportMetric and a summary line) and asserts nothing; run
// it with `make bench-scheduler`.
//
// Nodes come from the node agent's fake runtime (bin built from
// services/nodeagent, `--runtime fake --fake-nodes 100`), which makes
// bound pods Running. When that cannot be built or started, the benchmark
// creates the 100 Nodes itself and marks bound pods Running with
// UpdateStatus, and says so in its output.
package bench_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/scheduler/internal/scheduler"
)

const (
	numNodes = 100
	numPods  = 5000
	creators = 32
	// limit caps each phase on a slow machine; figures are computed
	// from what completed.
	limit = 5 * time.Minute
)

// BenchmarkScheduler has two phases, each on a fresh apiserver:
//
//   - backlog: the 5000 pods exist before the scheduler starts, so the
//     rate is the scheduler's own (decide + bind), not the create rate;
//   - e2e: the scheduler runs and 5000 pods are created at once by 32
//     clients; measured from the first create to every pod bound, and to
//     every pod Running.
func BenchmarkScheduler(b *testing.B) {
	agent := buildAgent(b)
	for _, phase := range []string{"backlog", "e2e"} {
		b.Run(phase, func(b *testing.B) {
			for range b.N {
				runPhase(b, phase, agent)
			}
		})
	}
}

// buildAgent builds the node agent binary, or returns "" when it cannot.
func buildAgent(b *testing.B) string {
	dir := filepath.Join("..", "..", "nodeagent")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return ""
	}
	out := filepath.Join(b.TempDir(), "nodeagent")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		fmt.Printf("scheduler bench: node agent does not build (%v): %s\n", err, msg)
		return ""
	}
	return out
}

type tracker struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	running map[string]time.Time
	allB    chan struct{}
	allR    chan struct{}
}

func runPhase(b *testing.B, phase, agentBin string) {
	b.StopTimer()
	srv := testserver.Start(b, testserver.WithLogger(hclog.NewNullLogger()))
	ctx, cancel := context.WithTimeout(context.Background(), limit+2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			b.Errorf("close client: %v", err)
		}
	}()

	mode := "node agent --runtime fake --fake-nodes 100"
	stopNodes, err := startAgent(ctx, b, c, srv.Addr(), agentBin)
	if err != nil {
		fmt.Printf("scheduler bench: %v; the benchmark creates the nodes and marks pods Running itself\n", err)
		mode = "benchmark-made nodes, pods marked Running by the benchmark"
		stopNodes = simulateNodes(ctx, b, c)
	}
	defer stopNodes()

	tr := &tracker{bound: map[string]time.Time{}, running: map[string]time.Time{},
		allB: make(chan struct{}), allR: make(chan struct{})}
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := watchPods(wctx, b, c, tr)
	defer func() { stopWatch(); <-watchDone }()

	stopSched := func() {}
	startSched := func() {
		sctx, scancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			args := []string{"--apiserver", srv.Addr(), "--health-addr", "", "--leader-elect=false", "--log-level", "warn"}
			// SCHEDULER_BENCH_FLAGS adds scheduler flags, e.g. "--bind-workers=64".
			args = append(args, strings.Fields(os.Getenv("SCHEDULER_BENCH_FLAGS"))...)
			done <- app.Run(sctx, scheduler.NewService(nil), args)
		}()
		stopSched = func() {
			scancel()
			if err := <-done; err != nil {
				b.Errorf("scheduler: %v", err)
			}
		}
	}
	if phase == "e2e" {
		startSched()
	}

	b.StartTimer()
	createStart := time.Now()
	createPods(ctx, b, c)
	createEnd := time.Now()
	schedStart := createStart
	if phase == "backlog" {
		schedStart = time.Now()
		startSched()
	}
	wait := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(limit):
			return false
		}
	}
	okB := wait(tr.allB)
	okR := wait(tr.allR)
	b.StopTimer()
	stopSched()

	tr.mu.Lock()
	nb, nr := len(tr.bound), len(tr.running)
	var first, last, lastRun time.Time
	for _, t := range tr.bound {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	for _, t := range tr.running {
		if t.After(lastRun) {
			lastRun = t
		}
	}
	tr.mu.Unlock()
	if nb == 0 {
		b.Fatalf("no pod was bound")
	}
	createRate := float64(numPods) / createEnd.Sub(createStart).Seconds()
	sinceStart := float64(nb) / last.Sub(schedStart).Seconds()
	firstToLast := float64(nb) / last.Sub(first).Seconds()
	b.ReportMetric(createRate, "creates/s")
	b.ReportMetric(sinceStart, "scheduled/s")
	b.ReportMetric(firstToLast, "scheduled/s(first-to-last-bind)")
	b.ReportMetric(last.Sub(createStart).Seconds(), "s-to-all-bound")
	if nr > 0 {
		b.ReportMetric(lastRun.Sub(createStart).Seconds(), "s-to-all-running")
	}
	fmt.Printf("scheduler bench [%s] %d nodes (%s), %d pods: created in %v (%.0f/s); bound %d/%d (complete=%v), "+
		"%.0f pods/s scheduled from %s (%.0f/s first to last bind); first create -> all bound %v; "+
		"running %d/%d (complete=%v), first create -> all Running %v\n",
		phase, numNodes, mode, numPods, createEnd.Sub(createStart).Round(time.Millisecond), createRate,
		nb, numPods, okB, sinceStart, map[bool]string{true: "scheduler start", false: "first create"}[phase == "backlog"],
		firstToLast, last.Sub(createStart).Round(time.Millisecond), nr, numPods, okR, lastRun.Sub(createStart).Round(time.Millisecond))
}

// startAgent runs the fake node agent and waits for its 100 nodes to be Ready.
func startAgent(ctx context.Context, b *testing.B, c *client.Client, addr, bin string) (func(), error) {
	if bin == "" {
		return nil, errors.New("no node agent binary")
	}
	// The nodes exist with their pod CIDRs, as ipamctl leaves them; the
	// agent's nodes are Ready only once they have one.
	for i := 0; i < numNodes; i++ {
		n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i)},
			Spec: &kplanev1.NodeSpec{PodCidr: fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)}}
		if _, err := client.Nodes(c).Create(ctx, n); err != nil {
			return nil, fmt.Errorf("create node %s: %w", n.Metadata.Name, err)
		}
	}
	root := b.TempDir()
	actx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(actx, bin, "--apiserver", addr, "--runtime", "fake", "--fake-nodes", fmt.Sprint(numNodes),
		"--node-name", "bench", "--cpu", "8", "--memory", "32Gi", "--max-pods", "110", "--root-dir", root,
		"--logs-addr", "127.0.0.1:0", "--health-addr", "", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start node agent: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				b.Logf("node agent exited after the interrupt: %v", err)
			}
		case <-time.After(15 * time.Second):
			cancel()
			b.Logf("node agent killed, 15s after the interrupt: %v", <-exited)
		}
		cancel()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		nodes, _, err := client.Nodes(c).List(ctx, "", client.ListOptions{})
		ready := 0
		for _, n := range nodes {
			for _, cond := range n.GetStatus().GetConditions() {
				if cond.GetType() == "Ready" && cond.GetStatus() == "True" {
					ready++
				}
			}
		}
		if err == nil && ready >= numNodes {
			return stop, nil
		}
		select {
		case err := <-exited:
			cancel()
			return nil, fmt.Errorf("node agent exited: %v", err)
		case <-time.After(100 * time.Millisecond): // polling interval
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("node agent registered %d/%d ready nodes in 60s", ready, numNodes)
		}
	}
}

// simulateNodes creates the nodes and plays their agents: every pod bound
// to one is marked Running.
func simulateNodes(ctx context.Context, b *testing.B, c *client.Client) func() {
	alloc := map[string]string{"cpu": "8", "memory": "32Gi", "pods": "110"}
	nodes := client.Nodes(c)
	for i := range numNodes {
		n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i)}, Spec: &kplanev1.NodeSpec{},
			Status: &kplanev1.NodeStatus{Capacity: alloc, Allocatable: alloc,
				Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}}}
		created, err := nodes.Create(ctx, n)
		if err != nil {
			b.Fatalf("create node: %v", err)
		}
		if len(created.GetStatus().GetAllocatable()) == 0 {
			created.Status = n.Status
			if _, err := nodes.UpdateStatus(ctx, created); err != nil {
				b.Fatalf("node status: %v", err)
			}
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	work := make(chan *kplanev1.Pod, numPods)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				_ = client.RetryOnConflict(sctx, client.DefaultRetry, func() error {
					p.Status = &kplanev1.PodStatus{Phase: "Running", HostIp: "127.0.0.1",
						Conditions: append(p.GetStatus().GetConditions(), &kplanev1.Condition{Type: "Ready", Status: "True"})}
					_, err := client.Pods(c).UpdateStatus(sctx, p)
					if client.IsConflict(err) {
						if fresh, gerr := client.Pods(c).Get(sctx, p.Metadata.Namespace, p.Metadata.Name); gerr == nil {
							p = fresh
						}
					}
					return err
				})
			}
		}()
	}
	w, err := client.Pods(c).Watch(sctx, "default", client.WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		seen := map[string]bool{}
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			p := ev.Object
			if p == nil || p.GetSpec().GetNodeName() == "" || p.GetStatus().GetPhase() == "Running" || seen[p.GetMetadata().GetUid()] {
				continue
			}
			seen[p.GetMetadata().GetUid()] = true
			work <- proto.Clone(p).(*kplanev1.Pod)
		}
	}()
	return func() { cancel(); w.Stop(); wg.Wait() }
}

// watchPods records when each pod was first seen bound and Running.
func watchPods(ctx context.Context, b *testing.B, c *client.Client, tr *tracker) chan struct{} {
	w, err := client.Pods(c).Watch(ctx, "default", client.WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			p := ev.Object
			if p == nil {
				continue
			}
			now := time.Now()
			uid := p.GetMetadata().GetUid()
			tr.mu.Lock()
			if _, ok := tr.bound[uid]; !ok && p.GetSpec().GetNodeName() != "" {
				tr.bound[uid] = now
				if len(tr.bound) == numPods {
					close(tr.allB)
				}
			}
			if _, ok := tr.running[uid]; !ok && p.GetStatus().GetPhase() == "Running" {
				tr.running[uid] = now
				if len(tr.running) == numPods {
					close(tr.allR)
				}
			}
			tr.mu.Unlock()
		}
	}()
	return done
}

// createPods creates numPods small pods with creators concurrent clients,
// in 50 "deployments" (controller owners) so spreading has work to do.
func createPods(ctx context.Context, b *testing.B, c *client.Client) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= numPods {
					return
				}
				owner := fmt.Sprintf("web-%d", i%50)
				p := &kplanev1.Pod{
					Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", owner, i),
						Labels: map[string]string{"app": owner},
						OwnerReferences: []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: owner,
							Uid: "00000000-0000-0000-0000-0000000000" + fmt.Sprintf("%02d", i%50), Controller: true}}},
					Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "registry.example/web:1",
						Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "64Mi"}}}}},
				}
				if _, err := client.Pods(c).Create(ctx, p); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d creates failed", n)
	}
}
