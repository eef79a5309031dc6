package workqueue

import (
	"sync"
	"testing"
	"time"
)

func newTestQueue(t *testing.T, cfg Config) *Queue {
	t.Helper()
	q := New(cfg)
	t.Cleanup(q.ShutDown)
	return q
}

func mustGet(t *testing.T, q *Queue, want string) {
	t.Helper()
	got, shutdown := q.Get()
	if shutdown {
		t.Fatalf("Get: shutdown, want %q", want)
	}
	if got != want {
		t.Fatalf("Get = %q, want %q", got, want)
	}
}

func TestFIFOAndDedup(t *testing.T) {
	q := newTestQueue(t, Config{})
	for _, k := range []string{"a", "b", "a", "c", "b"} {
		q.Add(k)
	}
	if n := q.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 after adding a,b,a,c,b", n)
	}
	mustGet(t, q, "a")
	mustGet(t, q, "b")
	mustGet(t, q, "c")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
	for _, k := range []string{"a", "b", "c"} {
		q.Done(k)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d after Done of keys not re-added, want 0", n)
	}
}

func TestAddWhileProcessingRequeuesOnDone(t *testing.T) {
	q := newTestQueue(t, Config{})
	q.Add("a")
	mustGet(t, q, "a")
	q.Add("a")
	q.Add("a")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d while a is processed, want 0 (a must not be handed out twice)", n)
	}
	q.Add("b")
	mustGet(t, q, "b")
	q.Done("a")
	if n := q.Len(); n != 1 {
		t.Fatalf("Len = %d after Done(a), want 1 (a re-queued once)", n)
	}
	mustGet(t, q, "a")
	q.Done("a")
	q.Done("b")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
}

func TestDoneOfUnknownKeyIsNoop(t *testing.T) {
	q := newTestQueue(t, Config{})
	q.Done("never-got")
	q.Add("a")
	q.Done("a") // a is queued, not processing: must stay queued
	if n := q.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
	if err := q.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestGetBlocksUntilAdd(t *testing.T) {
	q := newTestQueue(t, Config{})
	got := make(chan string)
	go func() {
		k, _ := q.Get()
		got <- k
	}()
	select {
	case k := <-got:
		t.Fatalf("Get returned %q from an empty queue", k)
	case <-time.After(20 * time.Millisecond):
	}
	q.Add("x")
	if k := <-got; k != "x" {
		t.Fatalf("Get = %q, want x", k)
	}
	q.Done("x")
}

func TestShutDownReleasesGettersAndDropsWork(t *testing.T) {
	q := New(Config{})
	const getters = 4
	var wg sync.WaitGroup
	results := make(chan bool, getters)
	for range getters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, shutdown := q.Get()
			results <- shutdown
		}()
	}
	q.ShutDown()
	wg.Wait()
	close(results)
	for shutdown := range results {
		if !shutdown {
			t.Fatal("a blocked Get returned a key after ShutDown")
		}
	}
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown = false after ShutDown")
	}
	q.Add("late")
	q.AddAfter("late", time.Second)
	q.AddRateLimited("late")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d after adds on a shut-down queue, want 0", n)
	}
	if k, shutdown := q.Get(); !shutdown || k != "" {
		t.Fatalf("Get = %q, %v after ShutDown; want \"\", true", k, shutdown)
	}
	q.ShutDown() // idempotent
}

func TestShutDownDropsQueuedKeysAndKeepsInFlight(t *testing.T) {
	q := New(Config{})
	q.Add("a")
	q.Add("b")
	mustGet(t, q, "a")
	q.Add("a") // dirty while processing
	q.ShutDown()
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d after ShutDown, want 0 (waiting keys dropped)", n)
	}
	q.Done("a") // accepted, and not re-queued
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get handed out a key after ShutDown")
	}
	if err := q.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestShutDownWithDrainWaitsForDone(t *testing.T) {
	q := New(Config{})
	q.Add("a")
	q.Add("b")
	mustGet(t, q, "a")
	mustGet(t, q, "b")
	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	eventually(t, "shutdown to start", q.ShuttingDown)
	q.Done("a")
	select {
	case <-drained:
		t.Fatal("ShutDownWithDrain returned while b was still being processed")
	case <-time.After(20 * time.Millisecond):
	}
	q.Done("b")
	<-drained
}

func TestShutDownWithDrainWithNothingInFlight(t *testing.T) {
	q := New(Config{})
	q.Add("a")
	q.ShutDownWithDrain() // must not block: a was never handed out
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown = false")
	}
}

func TestNameFromConfig(t *testing.T) {
	q := newTestQueue(t, Config{Name: "pods"})
	if q.Name() != "pods" {
		t.Fatalf("Name = %q", q.Name())
	}
}
