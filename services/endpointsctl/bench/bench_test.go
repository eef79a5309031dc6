// Package bench measures endpointsctl against a real apiserver (make
// bench-endpoints).
package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/endpointsctl/endpoints"
)

const (
	pods    = 1000
	flips   = 100
	writers = 16
)

// BenchmarkFlip100Of1000: a Service over 1000 pods (written with their
// status directly; no node agent), all ready; then 100 of them turn not
// ready at once (16 concurrent writers). It reports the time from the
// first of those writes until the Endpoints list exactly 900 ready and
// 100 not ready, and the Endpoints writes that took, for batch periods
// 0 and 500ms.
func BenchmarkFlip100Of1000(b *testing.B) {
	for _, batch := range []time.Duration{0, 500 * time.Millisecond} {
		b.Run(fmt.Sprintf("batch=%v", batch), func(b *testing.B) {
			for range b.N {
				run(b, batch)
			}
		})
	}
}

func run(b *testing.B, batch time.Duration) {
	srv := testserver.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = api.Close() }() // closing a bench client; nothing to report
	ctl := controllertest.Run(b, srv.Addr(), endpoints.NewService(), "--endpoint-updates-batch-period", batch.String())
	sel := map[string]string{"app": "bench"}
	if _, err := client.Services(api).Create(ctx, &kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: "bench", Namespace: "default"},
		Spec:     &kplanev1.ServiceSpec{Selector: sel, Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}},
	}); err != nil {
		b.Fatal(err)
	}
	all := make([]*kplanev1.Pod, pods)
	parallel(b, pods, func(i int) error {
		p, err := client.Pods(api).Create(ctx, &kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("p%04d", i), Namespace: "default", Labels: sel},
			Spec:     &kplanev1.PodSpec{NodeName: "fake", Containers: []*kplanev1.Container{{Name: "c", Image: "fake"}}},
		})
		if err != nil {
			return err
		}
		p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning, PodIp: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255),
			Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.Now()}}}
		all[i], err = client.Pods(api).UpdateStatus(ctx, p)
		return err
	})
	waitFor(b, ctx, api, pods, 0)

	reconciles := func() (n uint64, sum float64) {
		mfs, err := ctl.Context(b).Registry.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "kplane_controller_reconcile_duration_seconds" {
				for _, m := range mf.GetMetric() {
					n += m.GetHistogram().GetSampleCount()
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
		return n, sum
	}
	writes := func() float64 {
		mfs, err := ctl.Context(b).Registry.Gather()
		if err != nil {
			b.Fatal(err)
		}
		n := 0.0
		for _, mf := range mfs {
			switch mf.GetName() {
			case "kplane_endpointsctl_endpoints_creates_total", "kplane_endpointsctl_endpoints_updates_total":
				n += mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return n
	}
	before := writes()
	rn0, rs0 := reconciles()
	start := time.Now()
	var flipped time.Duration
	var once sync.Mutex
	parallel(b, flips, func(i int) error {
		p := all[i*(pods/flips)]
		p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionFalse, LastTransitionTime: timestamppb.Now()}}
		_, err := client.Pods(api).UpdateStatus(ctx, p)
		once.Lock()
		flipped = max(flipped, time.Since(start))
		once.Unlock()
		return err
	})
	seen := waitFor(b, ctx, api, pods-flips, flips)
	took := seen.Sub(start)
	// Writes still in flight after the Endpoints were right would count
	// too: wait out one more batch period plus a margin before counting.
	time.Sleep(batch + 200*time.Millisecond) // settling before a final count, not synchronisation
	n := writes() - before
	rn1, rs1 := reconciles()
	rn, rsum := rn1-rn0, rs1-rs0
	b.ReportMetric(took.Seconds()*1000, "ms-to-reflect")
	b.ReportMetric(flipped.Seconds()*1000, "ms-flip-writes")
	b.ReportMetric((took-flipped).Seconds()*1000, "ms-after-last-flip")
	b.ReportMetric(n, "endpoints-writes")
	b.Logf("batch %v: %d reconciles, %v each on average", batch, rn, (time.Duration(rsum / float64(max(rn, 1)) * 1e9)).Round(time.Millisecond))
	b.Logf("batch %v: %d of %d pods not ready; the status writes took %v; Endpoints right after %v (%v after the last status write) with %v Endpoints writes",
		batch, flips, pods, flipped.Round(time.Millisecond), took.Round(time.Millisecond), (took - flipped).Round(time.Millisecond), n)
}

func parallel(b *testing.B, n int, f func(i int) error) {
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

// waitFor polls (5ms) until the Endpoints list ready and notReady
// addresses, and returns when it saw that.
func waitFor(b *testing.B, ctx context.Context, api *client.Client, ready, notReady int) time.Time {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ep, err := client.Endpoints(api).Get(ctx, "default", "bench")
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
		if time.Now().After(deadline) {
			b.Fatalf("Endpoints never listed %d ready and %d not ready (last error %v)", ready, notReady, err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}
