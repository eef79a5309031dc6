package agent

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// BenchmarkFakeNodes runs one agent with 100 fake nodes and binds 5000
// pods to them round-robin, measuring the time until all are Running and
// the CPU the whole test process (apiserver included) used. Run with
//
//	go test -run '^$' -bench FakeNodes -benchtime 1x ./internal/agent/
func BenchmarkFakeNodes(b *testing.B) {
	const nodes, pods = 100, 5000
	for i := 0; i < b.N; i++ {
		srv := testserver.Start(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
		if err != nil {
			b.Fatal(err)
		}
		e := &env{t: nil, srv: srv, api: api, ctx: ctx, root: b.TempDir()}
		// The nodes exist with their pod CIDRs, as ipamctl would leave them.
		for j := 0; j < nodes; j++ {
			n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("bench-%d", j)},
				Spec: &kplanev1.NodeSpec{PodCidr: fmt.Sprintf("10.100.%d.0/24", j)}}
			if _, err := client.For[*kplanev1.Node](api).Create(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
		stop := startAgentB(b, e, "--runtime", "fake", "--fake-nodes", fmt.Sprint(nodes), "--node-name", "bench",
			"--heartbeat-interval", "10s")
		before := cpuTime()
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for j := 0; j < pods; j++ {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				p := &kplanev1.Pod{
					Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("p-%d", j), Namespace: "default"},
					Spec: &kplanev1.PodSpec{NodeName: fmt.Sprintf("bench-%d", j%nodes),
						Containers: []*kplanev1.Container{{Name: "c", Image: "x"}}},
				}
				if _, err := client.For[*kplanev1.Pod](api).Create(ctx, p); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		for {
			items, _, err := client.For[*kplanev1.Pod](api).List(ctx, "default", client.ListOptions{FieldSelector: "status.phase=Running"})
			if err != nil {
				b.Fatal(err)
			}
			if len(items) == pods {
				break
			}
			select {
			case <-ctx.Done():
				b.Fatalf("only %d of %d pods Running", len(items), pods)
			case <-time.After(200 * time.Millisecond):
			}
		}
		elapsed := time.Since(start)
		b.ReportMetric(float64(pods)/elapsed.Seconds(), "pods_running/s")
		b.ReportMetric((cpuTime() - before).Seconds(), "cpu_s_total")
		stop()
		_ = api.Close()
		cancel()
	}
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
