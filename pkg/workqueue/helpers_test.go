package workqueue

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/testutil"
)

// fakeClock is a Clock that only moves when Advance is called.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[*fakeTimer]struct{}{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t
	}
	c.timers[t] = struct{}{}
	return t
}

// Advance moves the clock forward and fires the timers that became due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			t.c <- c.now
			delete(c.timers, t)
		}
	}
}

// Timers returns the number of timers waiting to fire.
func (c *fakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	clock *fakeClock
	at    time.Time
	c     chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, active := t.clock.timers[t]
	delete(t.clock.timers, t)
	return active
}

// eventually polls cond until it holds, failing the test after a deadline
// that is generous so that a slow, shared machine does not make it flaky.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}

// waitingLen returns the number of keys waiting for their delay.
func (q *Queue) waitingLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// checkInvariants verifies the queue's internal bookkeeping: each key is
// ready at most once, a ready key is dirty and not being processed, and
// the delay heap holds each key once.
func (q *Queue) checkInvariants() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	seen := map[string]bool{}
	for _, k := range q.queue {
		if seen[k] {
			return fmt.Errorf("key %q is in the queue twice", k)
		}
		seen[k] = true
		if _, ok := q.dirty[k]; !ok {
			return fmt.Errorf("queued key %q is not dirty", k)
		}
		if _, ok := q.processing[k]; ok {
			return fmt.Errorf("queued key %q is also being processed", k)
		}
	}
	for k := range q.dirty {
		_, busy := q.processing[k]
		if !seen[k] && !busy {
			return fmt.Errorf("dirty key %q is neither queued nor being processed", k)
		}
	}
	if len(q.enqueued) != len(q.queue) {
		return fmt.Errorf("enqueued has %d entries for %d queued keys", len(q.enqueued), len(q.queue))
	}
	if len(q.waitingByKey) != len(q.waiting) {
		return fmt.Errorf("delay heap has %d entries but its index %d", len(q.waiting), len(q.waitingByKey))
	}
	for i, e := range q.waiting {
		if e.index != i || q.waitingByKey[e.key] != e {
			return fmt.Errorf("delay heap entry %d (%q) is not indexed correctly", i, e.key)
		}
	}
	return nil
}
