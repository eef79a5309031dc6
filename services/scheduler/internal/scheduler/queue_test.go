package scheduler

import (
	"context"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/framework/plugins"
)

func qinfo(prio int32, ts time.Time) *framework.QueuedPodInfo {
	return &framework.QueuedPodInfo{Pod: &kplanev1.Pod{Spec: &kplanev1.PodSpec{Priority: prio}}, Timestamp: ts}
}

func TestSchedulingQueueOrder(t *testing.T) {
	q := newSchedulingQueue(plugins.PrioritySort{}.Less, time.Now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	q.Add("low", qinfo(0, t0))
	q.Add("high-late", qinfo(5, t0.Add(time.Second)))
	q.Add("high-early", qinfo(5, t0))
	q.AddAfter("backing-off", qinfo(100, t0), 50*time.Millisecond)
	// Adding again keeps one entry, with the new info (priority raised).
	q.Add("low", qinfo(1, t0))
	q.Add("lowest", qinfo(-1, t0))
	if a, b := q.Lens(); a != 4 || b != 1 {
		t.Fatalf("lens active=%d backoff=%d, want 4 1", a, b)
	}
	var got []string
	for range 4 {
		k, ok := q.Pop(ctx)
		if !ok {
			t.Fatal("pop failed")
		}
		got = append(got, k)
		q.Done(k)
	}
	want := []string{"high-early", "high-late", "low", "lowest"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	// activeQ is empty: Pop waits for the back-off to end.
	if k, _ := q.Pop(ctx); k != "backing-off" {
		t.Fatalf("got %q, want the backed-off pod", k)
	}
	if time.Now().Before(t0.Add(50 * time.Millisecond)) {
		t.Fatal("popped before its back-off ended")
	}
	// Added while being processed: handed out again only after Done.
	q.Add("backing-off", qinfo(100, t0))
	if a, b := q.Lens(); a != 0 || b != 0 {
		t.Fatalf("a key being processed was queued: active=%d backoff=%d", a, b)
	}
	q.Done("backing-off")
	if k, _ := q.Pop(ctx); k != "backing-off" {
		t.Fatalf("got %q after Done", k)
	}
	// An immediate Add overrides a pending back-off.
	q.AddAfter("x", qinfo(0, t0), time.Hour)
	q.Add("x", qinfo(0, t0))
	if k, _ := q.Pop(ctx); k != "x" {
		t.Fatalf("got %q, want x out of backoffQ", k)
	}
	done := make(chan bool)
	go func() {
		_, ok := q.Pop(ctx)
		done <- ok
	}()
	q.ShutDown()
	if <-done {
		t.Fatal("Pop after ShutDown returned a key")
	}
}
