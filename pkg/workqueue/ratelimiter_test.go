package workqueue

import (
	"testing"
	"time"
)

func TestExponentialRateLimiter(t *testing.T) {
	r := NewExponentialRateLimiter(5*time.Millisecond, time.Second)
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if got := r.When("a"); got != w*time.Millisecond {
			t.Fatalf("failure %d: When = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if n := r.NumRequeues("a"); n != len(want) {
		t.Fatalf("NumRequeues = %d, want %d", n, len(want))
	}
	if got := r.When("b"); got != 5*time.Millisecond {
		t.Fatalf("other key: When = %v, want 5ms (backoff is per key)", got)
	}
	r.Forget("a")
	if n := r.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
	if got := r.When("a"); got != 5*time.Millisecond {
		t.Fatalf("When after Forget = %v, want 5ms", got)
	}
}

func TestExponentialRateLimiterSaturatesWithoutOverflow(t *testing.T) {
	r := NewExponentialRateLimiter(DefaultBaseDelay, DefaultMaxDelay)
	var last time.Duration
	for i := range 200 {
		d := r.When("a")
		if d < last || d <= 0 || d > DefaultMaxDelay {
			t.Fatalf("failure %d: When = %v after %v (must grow monotonically up to %v)", i, d, last, DefaultMaxDelay)
		}
		last = d
	}
	if last != DefaultMaxDelay {
		t.Fatalf("last delay %v, want the cap %v", last, DefaultMaxDelay)
	}
}

func TestBucketRateLimiter(t *testing.T) {
	c := newFakeClock()
	r := NewBucketRateLimiter(2, 3, c) // 2 per second, 3 at once
	for i := range 3 {
		if d := r.When("k"); d != 0 {
			t.Fatalf("burst token %d: When = %v, want 0", i, d)
		}
	}
	// The bucket is empty: the next tokens come every 500ms, for any key.
	if d := r.When("x"); d != 500*time.Millisecond {
		t.Fatalf("When = %v, want 500ms", d)
	}
	if d := r.When("y"); d != time.Second {
		t.Fatalf("When = %v, want 1s", d)
	}
	c.Advance(10 * time.Second) // refills to the burst size only
	for i := range 3 {
		if d := r.When("k"); d != 0 {
			t.Fatalf("after refill, token %d: When = %v, want 0", i, d)
		}
	}
	if d := r.When("k"); d != 500*time.Millisecond {
		t.Fatalf("When = %v, want 500ms", d)
	}
	if n := r.NumRequeues("k"); n != 0 {
		t.Fatalf("NumRequeues = %d, want 0 (no per-key state)", n)
	}
	r.Forget("k")
}

func TestBucketRateLimiterUnlimited(t *testing.T) {
	r := NewBucketRateLimiter(0, 0, nil)
	for range 1000 {
		if d := r.When("k"); d != 0 {
			t.Fatalf("qps 0 (unlimited): When = %v, want 0", d)
		}
	}
}

func TestMaxOfRateLimiter(t *testing.T) {
	c := newFakeClock()
	r := NewControllerRateLimiter(time.Millisecond, time.Minute, 1, 2, c)
	// Burst of 2 is free, so the per-key backoff decides.
	if d := r.When("a"); d != time.Millisecond {
		t.Fatalf("When = %v, want 1ms (per-key backoff)", d)
	}
	if d := r.When("a"); d != 2*time.Millisecond {
		t.Fatalf("When = %v, want 2ms", d)
	}
	// Bucket now empty: the overall limit dominates.
	if d := r.When("b"); d != time.Second {
		t.Fatalf("When = %v, want 1s (bucket)", d)
	}
	if n := r.NumRequeues("a"); n != 2 {
		t.Fatalf("NumRequeues(a) = %d, want 2", n)
	}
	r.Forget("a")
	if n := r.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues(a) after Forget = %d, want 0", n)
	}
}

func TestDefaultRateLimiter(t *testing.T) {
	r := DefaultRateLimiter()
	if d := r.When("a"); d != DefaultBaseDelay {
		t.Fatalf("first delay = %v, want %v", d, DefaultBaseDelay)
	}
	if d := r.When("a"); d != 2*DefaultBaseDelay {
		t.Fatalf("second delay = %v, want %v", d, 2*DefaultBaseDelay)
	}
}

func TestQueueAddRateLimited(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{
		Clock:       c,
		RateLimiter: NewExponentialRateLimiter(time.Second, time.Minute),
	})
	q.AddRateLimited("a")
	if n := q.NumRequeues("a"); n != 1 {
		t.Fatalf("NumRequeues = %d, want 1", n)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d before the backoff passed, want 0", n)
	}
	waitIdleLoop(t, q, c)
	c.Advance(time.Second)
	eventually(t, "a to be retried after 1s", func() bool { return q.Len() == 1 })
	mustGet(t, q, "a")
	q.AddRateLimited("a") // second failure: 2s
	q.Done("a")
	waitIdleLoop(t, q, c)
	c.Advance(time.Second)
	waitIdleLoop(t, q, c)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d 1s into a 2s backoff, want 0", n)
	}
	c.Advance(time.Second)
	eventually(t, "a to be retried after 2s", func() bool { return q.Len() == 1 })
	q.Forget("a")
	if n := q.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d, want 0", n)
	}
	if n := q.Len(); n != 1 {
		t.Fatalf("Forget must not remove a from the queue: Len = %d", n)
	}
}
