package workqueue

import (
	"container/heap"
	"time"
)

// waitEntry is a key waiting in the delay heap until readyAt.
type waitEntry struct {
	key     string
	readyAt time.Time
	// seq keeps keys due at the same instant in the order they were added.
	seq   uint64
	index int
}

// waitHeap is a min-heap of entries by (readyAt, seq).
type waitHeap []*waitEntry

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(i, j int) bool {
	if !h[i].readyAt.Equal(h[j].readyAt) {
		return h[i].readyAt.Before(h[j].readyAt)
	}
	return h[i].seq < h[j].seq
}
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *waitHeap) Push(x any) {
	e := x.(*waitEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *waitHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return e
}

// AddAfter adds key once d has passed (at once when d <= 0). A key already
// waiting keeps the earlier of its two due times, so a delayed key is added
// once. Waiting does not block an immediate Add of the same key. Ignored
// after ShutDown.
func (q *Queue) AddAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	if d <= 0 {
		q.addLocked(key)
		return
	}
	readyAt := q.clock.Now().Add(d)
	if e, ok := q.waitingByKey[key]; ok {
		if !readyAt.Before(e.readyAt) {
			return
		}
		e.readyAt = readyAt
		heap.Fix(&q.waiting, e.index)
	} else {
		q.waitSeq++
		e := &waitEntry{key: key, readyAt: readyAt, seq: q.waitSeq}
		heap.Push(&q.waiting, e)
		q.waitingByKey[key] = e
	}
	// The loop may be sleeping until a later key; let it recompute.
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// delayLoop moves due keys from the heap into the queue. It sleeps until
// the earliest due time, or until AddAfter changes the heap, or ShutDown.
func (q *Queue) delayLoop() {
	defer close(q.loopDone)
	for {
		q.mu.Lock()
		if q.shuttingDown {
			q.mu.Unlock()
			return
		}
		now := q.clock.Now()
		for len(q.waiting) > 0 && !q.waiting[0].readyAt.After(now) {
			e := heap.Pop(&q.waiting).(*waitEntry)
			delete(q.waitingByKey, e.key)
			q.addLocked(e.key)
		}
		var timer Timer
		var fire <-chan time.Time
		if len(q.waiting) > 0 {
			timer = q.clock.NewTimer(q.waiting[0].readyAt.Sub(now))
			fire = timer.C()
		}
		q.mu.Unlock()

		select {
		case <-q.stop:
		case <-q.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
