package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestConcurrentCounter is "nothing lost, nothing doubled" for optimistic
// concurrency: 50 writers each add N to one Lease's leaseTransitions by
// read / compare-and-swap / retry on Aborted, and the result is exact.
// Over gRPC and over REST (GET, then PUT with the resourceVersion read,
// 409 Conflict on a lost race), as kubectl and client-go write.
func TestConcurrentCounter(t *testing.T) { transports(t, testConcurrentCounter) }

func testConcurrentCounter(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	writers := 50
	if viaREST(c) {
		// A REST write also records its field manager (a conversion
		// round trip): fewer writers keep the test inside its deadline on
		// a loaded machine and still race.
		writers = 12
	}
	const increments = 6
	ctx := testCtx(t)
	create(t, c, newLease("default", "counter"))

	var conflicts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range increments {
				for attempt := 0; ; attempt++ {
					resp, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "default", Name: "counter"})
					if err != nil {
						errs <- fmt.Errorf("writer %d: get: %w", w, err)
						return
					}
					l := resp.GetObject()
					l.GetLease().Spec.LeaseTransitions++
					_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: l})
					if status.Code(err) == codes.Aborted {
						// Someone else won: back off (jittered, as
						// client-go's RetryOnConflict does), reread, retry.
						conflicts.Add(1)
						if err := backoff(ctx, attempt); err != nil {
							errs <- fmt.Errorf("writer %d: %w", w, err)
							return
						}
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("writer %d: update: %w", w, err)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	must(t, errors.Join(all...), "writers")

	got := get(t, c, "Lease", "default", "counter")
	if n := int(got.GetLease().GetSpec().GetLeaseTransitions()); n != writers*increments {
		t.Fatalf("counter = %d, want exactly %d", n, writers*increments)
	}
	// Every successful increment was a spec change: one generation each.
	if g := int(got.Meta().GetGeneration()); g != 1+writers*increments {
		t.Fatalf("generation = %d, want %d", g, 1+writers*increments)
	}
	if conflicts.Load() == 0 {
		t.Fatalf("no write conflicted; the test did not exercise compare-and-swap")
	}
	t.Logf("%d increments with %d conflicts retried", writers*increments, conflicts.Load())
}

// backoff waits a jittered, exponentially growing delay (at most 20ms)
// before a conflicting writer retries, so 50 writers do not spin in
// lock-step; it returns early with the context's error.
func backoff(ctx context.Context, attempt int) error {
	limit := time.Millisecond << min(attempt, 4)
	limit = min(limit, 20*time.Millisecond)
	timer := time.NewTimer(rand.N(limit) + time.Millisecond)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("retry backoff: %w", ctx.Err())
	case <-timer.C:
		return nil
	}
}
