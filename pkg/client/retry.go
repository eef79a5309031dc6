package client

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/pkg/backoff"
)

// Backoff describes a capped, jittered exponential backoff; it is the one
// backoff of kplane (package backoff), named here for the client's users.
type Backoff = backoff.Backoff

// DefaultRetry is the backoff used for read-modify-write conflicts: a few
// quick attempts, since a conflict usually clears as soon as the writer
// rereads.
var DefaultRetry = Backoff{Steps: 5, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second}

// OnError runs fn until it succeeds, returns an error retriable rejects,
// b.Steps attempts were made, or ctx ends. Between attempts it waits
// b.Delay(attempt). The last error is returned wrapped, so status code checks
// such as IsConflict still work on it.
func OnError(ctx context.Context, b Backoff, retriable func(error) bool, fn func() error) error {
	steps := b.Steps
	if steps < 1 {
		steps = 1
	}
	var err error
	for attempt := 0; attempt < steps; attempt++ {
		if attempt > 0 {
			if serr := Sleep(ctx, b.Delay(attempt-1)); serr != nil {
				return fmt.Errorf("retry interrupted after %d attempts (last error: %v): %w", attempt, err, serr)
			}
		}
		err = fn()
		if err == nil || !retriable(err) {
			return err
		}
	}
	return fmt.Errorf("still failing after %d attempts: %w", steps, err)
}

// RetryOnConflict runs fn, a read-modify-write, again while it fails with a
// conflict (gRPC Aborted), at most b.Steps times. fn must reread the object
// on every call: retrying a write with a stale resourceVersion can never
// succeed.
func RetryOnConflict(ctx context.Context, b Backoff, fn func() error) error {
	return OnError(ctx, b, IsConflict, fn)
}

// Sleep waits for d or until ctx ends, returning ctx.Err() in the latter case.
func Sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }
