package pv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/controllertest"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// BenchmarkBind measures how long pvctl takes to bind N claims, from the
// first claim's creation to the last claim Bound: to N static volumes
// (matching and the two binding writes), and through the local-path
// provisioner (a directory and a volume object more per claim). The
// apiserver (embedded etcd) and pvctl run in this process; creates go
// through 16 concurrent clients. make bench-pvctl runs it.
func BenchmarkBind(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, mode := range []string{"static", "provisioned"} {
			b.Run(fmt.Sprintf("%s-%d", mode, n), func(b *testing.B) {
				for range b.N {
					benchBind(b, n, mode == "provisioned")
				}
			})
		}
	}
}

func benchBind(b *testing.B, n int, provision bool) {
	b.StopTimer()
	srv := testserver.Start(b)
	api := srv.Client()
	ctl := controllertest.Run(b, srv.Addr(), NewService(), "--storage-root", b.TempDir())
	defer func() { _ = ctl.Stop() }()
	ctx := context.Background()
	class := "manual"
	if provision {
		class = "local"
		if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(mkClass(class, kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate, false))}); err != nil {
			b.Fatal(err)
		}
	} else {
		parallel(b, n, func(i int) error {
			_, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(mkPV(fmt.Sprintf("pv-%04d", i), "1Gi", class))})
			return err
		})
	}
	// Watch the claims before creating them, so the end is seen at once.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := api.Watch(wctx, &kplanev1.WatchRequest{Kind: kindPVC, Namespace: "default"})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan time.Time, 1)
	go func() {
		bound := map[string]bool{}
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			c := ev.GetObject().GetPersistentVolumeClaim()
			if c.GetStatus().GetPhase() == kplanev1.ClaimBound {
				bound[c.GetMetadata().GetName()] = true
				if len(bound) == n {
					done <- time.Now()
					return
				}
			}
		}
	}()
	b.StartTimer()
	start := time.Now()
	parallel(b, n, func(i int) error {
		_, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(mkClaim(fmt.Sprintf("claim-%04d", i), "1Gi", &class))})
		return err
	})
	select {
	case end := <-done:
		b.StopTimer()
		d := end.Sub(start)
		b.ReportMetric(d.Seconds(), "s/bind-all")
		b.ReportMetric(float64(n)/d.Seconds(), "claims/s")
		b.Logf("%d claims bound (%s) in %v: %.0f claims/s", n, map[bool]string{false: "static volumes", true: "provisioned"}[provision], d.Round(time.Millisecond), float64(n)/d.Seconds())
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d claims not all bound after 5 minutes", n)
	}
}

// parallel runs fn(0..n-1) on 16 goroutines.
func parallel(b *testing.B, n int, fn func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		}()
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
