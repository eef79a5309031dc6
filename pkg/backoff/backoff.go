// Package backoff is kplane's one backoff: a capped, jittered exponential
// delay, used by the client's retries, the informers' re-watches, the
// apiserver's watch cache, the scheduler's per-pod back-off and the work
// queue's per-key rate limiter.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff describes a capped, jittered exponential backoff.
type Backoff struct {
	// Steps is the maximum number of attempts of a retry loop (e.g.
	// client.OnError); values < 1 mean 1. Delay does not use it.
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
		if d >= math.MaxInt64/2 {
			d = math.MaxInt64 / 2 // uncapped and far past any useful wait
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
