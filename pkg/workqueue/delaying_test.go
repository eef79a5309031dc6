package workqueue

import (
	"testing"
	"time"
)

// waitIdleLoop waits until the delay loop has handled every change and is
// asleep on a timer for the earliest waiting key.
func waitIdleLoop(t *testing.T, q *Queue, c *fakeClock) {
	t.Helper()
	eventually(t, "delay loop to arm its timer", func() bool {
		return len(q.wake) == 0 && c.Timers() == 1
	})
}

func TestAddAfterWaitsForTheClock(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{Clock: c})
	q.AddAfter("a", 10*time.Second)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d right after AddAfter, want 0", n)
	}
	waitIdleLoop(t, q, c)
	c.Advance(9 * time.Second)
	waitIdleLoop(t, q, c)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d one second before due, want 0", n)
	}
	c.Advance(time.Second)
	eventually(t, "a to become ready", func() bool { return q.Len() == 1 })
	mustGet(t, q, "a")
	q.Done("a")
	if n := q.waitingLen(); n != 0 {
		t.Fatalf("waiting = %d, want 0", n)
	}
}

func TestAddAfterNonPositiveIsImmediate(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{Clock: c})
	q.AddAfter("a", 0)
	q.AddAfter("b", -time.Second)
	if n := q.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
}

func TestAddAfterKeepsEarliestDueTime(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{Clock: c})
	q.AddAfter("a", 10*time.Second)
	q.AddAfter("a", 5*time.Second)  // earlier: replaces
	q.AddAfter("a", 20*time.Second) // later: ignored
	if n := q.waitingLen(); n != 1 {
		t.Fatalf("waiting = %d, want 1 (one entry per key)", n)
	}
	waitIdleLoop(t, q, c)
	c.Advance(5 * time.Second)
	eventually(t, "a to become ready at the earliest due time", func() bool { return q.Len() == 1 })
	if n := q.waitingLen(); n != 0 {
		t.Fatalf("waiting = %d after a fired, want 0", n)
	}
}

func TestAddAfterReleasesInDueOrder(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{Clock: c})
	q.AddAfter("c", 3*time.Second)
	q.AddAfter("a", 1*time.Second)
	q.AddAfter("b", 2*time.Second)
	q.AddAfter("b2", 2*time.Second) // same due time as b: after b
	waitIdleLoop(t, q, c)
	c.Advance(time.Hour)
	eventually(t, "all keys ready", func() bool { return q.Len() == 4 })
	for _, want := range []string{"a", "b", "b2", "c"} {
		mustGet(t, q, want)
	}
}

func TestAddAfterEarlierKeyWakesTheLoop(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{Clock: c})
	q.AddAfter("late", time.Hour)
	waitIdleLoop(t, q, c)
	q.AddAfter("soon", time.Second)
	waitIdleLoop(t, q, c)
	c.Advance(time.Second)
	eventually(t, "soon to become ready", func() bool { return q.Len() == 1 })
	mustGet(t, q, "soon")
	if n := q.waitingLen(); n != 1 {
		t.Fatalf("waiting = %d, want 1 (late still waiting)", n)
	}
}

func TestDelayedKeyIsDedupedWithQueuedKey(t *testing.T) {
	c := newFakeClock()
	q := newTestQueue(t, Config{Clock: c})
	q.Add("a")
	q.AddAfter("a", time.Second)
	waitIdleLoop(t, q, c)
	c.Advance(time.Second)
	eventually(t, "delayed a to be merged", func() bool { return q.waitingLen() == 0 })
	if n := q.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1: a delayed add of a queued key must not queue it twice", n)
	}
}

func TestShutDownDropsDelayedKeys(t *testing.T) {
	c := newFakeClock()
	q := New(Config{Clock: c})
	q.AddAfter("a", time.Second)
	waitIdleLoop(t, q, c)
	q.ShutDown()
	if n := q.waitingLen(); n != 0 {
		t.Fatalf("waiting = %d after ShutDown, want 0", n)
	}
	if n := c.Timers(); n != 0 {
		t.Fatalf("%d timers still armed after ShutDown", n)
	}
	c.Advance(time.Hour)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
}

func TestAddAfterWithRealClock(t *testing.T) {
	q := newTestQueue(t, Config{})
	q.AddAfter("a", 5*time.Millisecond)
	mustGet(t, q, "a") // blocks until the real timer fires
	q.Done("a")
}
