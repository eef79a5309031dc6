package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/endpointsctl/endpoints"
)

// BenchmarkFakeProbeFlip measures readiness flips through the whole path
// with the fake runtime's annotation-driven probes: 1000 pods on 10 fake
// nodes behind a Service, each with a readiness probe (period 1 s); 100
// of them get kplane.io/fake-probe-readiness=failure (16 writers) and
// the time until the Endpoints list 900 ready and 100 not ready is
// reported (the probe period is part of it, as on a real kubelet), plus
// the CPU of the whole process (apiserver, endpointsctl, agent). Run with
//
//	go test -run '^$' -bench FakeProbeFlip -benchtime 1x ./internal/agent/
func BenchmarkFakeProbeFlip(b *testing.B) {
	const nodes, pods, flips, writers = 10, 1000, 100, 16
	for range b.N {
		srv := testserver.Start(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
		if err != nil {
			b.Fatal(err)
		}
		e := &env{srv: srv, api: api, ctx: ctx, root: b.TempDir()}
		for j := range nodes {
			n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("probe-%d", j)},
				Spec: &kplanev1.NodeSpec{PodCidr: fmt.Sprintf("10.101.%d.0/24", j*4)}}
			if _, err := client.For[*kplanev1.Node](api).Create(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
		controllertest.Run(b, srv.Addr(), endpoints.NewService())
		stop := startAgentB(b, e, "--runtime", "fake", "--fake-nodes", fmt.Sprint(nodes), "--node-name", "probe",
			"--heartbeat-interval", "10s")
		sel := map[string]string{"app": "probe-bench"}
		if _, err := client.For[*kplanev1.Service](api).Create(ctx, &kplanev1.Service{
			Metadata: &kplanev1.ObjectMeta{Name: "bench", Namespace: "default"},
			Spec:     &kplanev1.ServiceSpec{Selector: sel, Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}},
		}); err != nil {
			b.Fatal(err)
		}
		benchParallel(b, pods, writers, func(i int) error {
			_, err := client.For[*kplanev1.Pod](api).Create(ctx, &kplanev1.Pod{
				Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("p%04d", i), Namespace: "default", Labels: sel},
				Spec: &kplanev1.PodSpec{NodeName: fmt.Sprintf("probe-%d", i%nodes), Containers: []*kplanev1.Container{{
					Name: "c", Image: "x", Ports: []*kplanev1.ContainerPort{{ContainerPort: 80}},
					ReadinessProbe: &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(80)},
						PeriodSeconds: 1, FailureThreshold: 1},
				}}},
			})
			return err
		})
		waitEndpoints(b, ctx, api, pods, 0)

		before := cpuTime()
		start := time.Now()
		var flipped time.Duration
		var mu sync.Mutex
		benchParallel(b, flips, writers, func(i int) error {
			name := fmt.Sprintf("p%04d", i*(pods/flips))
			for {
				p, err := client.For[*kplanev1.Pod](api).Get(ctx, "default", name)
				if err != nil {
					return err
				}
				if p.Metadata.Annotations == nil {
					p.Metadata.Annotations = map[string]string{}
				}
				p.Metadata.Annotations[AnnotationFakeProbePrefix+"readiness"] = "failure"
				if _, err = client.For[*kplanev1.Pod](api).Update(ctx, p); err == nil {
					break
				} else if !client.IsConflict(err) { // the agent wrote the status meanwhile: read again
					return err
				}
			}
			mu.Lock()
			flipped = max(flipped, time.Since(start))
			mu.Unlock()
			return nil
		})
		took := waitEndpoints(b, ctx, api, pods-flips, flips).Sub(start)
		b.ReportMetric(took.Seconds()*1000, "ms-to-reflect")
		b.ReportMetric(flipped.Seconds()*1000, "ms-annotation-writes")
		b.ReportMetric((cpuTime() - before).Seconds(), "cpu_s_total")
		stop()
		_ = api.Close()
		cancel()
	}
}

func benchParallel(b *testing.B, n, writers int, f func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range writers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// waitEndpoints polls (10 ms) until the Service's Endpoints list ready and
// notReady addresses and returns when it saw that.
func waitEndpoints(b *testing.B, ctx context.Context, api *client.Client, ready, notReady int) time.Time {
	for {
		ep, err := client.For[*kplanev1.Endpoints](api).Get(ctx, "default", "bench")
		if err == nil {
			r, nr := 0, 0
			for _, s := range ep.GetSubsets() {
				r += len(s.GetAddresses())
				nr += len(s.GetNotReadyAddresses())
			}
			if r == ready && nr == notReady {
				return time.Now()
			}
		}
		select {
		case <-ctx.Done():
			b.Fatalf("Endpoints never listed %d ready and %d not ready (last error %v)", ready, notReady, err)
		case <-time.After(10 * time.Millisecond): // polling interval
		}
	}
}
