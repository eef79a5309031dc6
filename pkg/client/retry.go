package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff describes a capped, jittered exponential backoff.
type Backoff struct {
	// Steps is the maximum number of attempts (OnError) or the number of
	// doublings before the delay stops growing (Delay); values < 1 mean 1.
	Steps int
	// Duration is the first delay.
	Duration time.Duration
	// Factor multiplies the delay after each attempt (values < 1 mean 1).
	Factor float64
	// Jitter adds up to Jitter*delay of random extra delay, so that many
	// clients failing at once do not retry in lockstep.
	Jitter float64
	// Cap bounds the delay before jitter (0 = no cap).
	Cap time.Duration
}

// DefaultRetry is the backoff used for read-modify-write conflicts: a few
// quick attempts, since a conflict usually clears as soon as the writer
// rereads.
var DefaultRetry = Backoff{Steps: 5, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second}

// Delay returns the jittered delay before retry number attempt (0-based).
func (b Backoff) Delay(attempt int) time.Duration {
	d := float64(b.Duration)
	f := b.Factor
	if f < 1 {
		f = 1
	}
	for i := 0; i < attempt; i++ {
		d *= f
		if b.Cap > 0 && d >= float64(b.Cap) {
			d = float64(b.Cap)
			break
		}
	}
	if b.Cap > 0 && d > float64(b.Cap) {
		d = float64(b.Cap)
	}
	if b.Jitter > 0 {
		d += d * b.Jitter * rand.Float64()
	}
	return time.Duration(d)
}

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
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
