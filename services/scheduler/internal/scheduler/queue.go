package scheduler

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// schedulingQueue is kube-scheduler's scheduling queue, the part that
// orders: activeQ, a heap ordered by the QueueSort plugin (priority, then
// time queued), and backoffQ, pods waiting out their back-off, moved to
// activeQ when it ends. The third part, the unschedulable set, is the
// pending pods marked unschedulable (scheduler.go): cluster events move
// them back through backoffQ (moveAll). A key is in at most one of the
// two heaps and is never handed out twice at once: one added while being
// scheduled is queued again when Done.
type schedulingQueue struct {
	less func(a, b *framework.QueuedPodInfo) bool
	now  func() time.Time

	mu         sync.Mutex
	active     podHeap
	backoff    backoffHeap
	items      map[string]*queued // in active or backoff
	processing map[string]bool
	// again holds keys added while being processed, with their info.
	again  map[string]*framework.QueuedPodInfo
	wake   chan struct{}
	closed bool
}

type queued struct {
	key     string
	info    *framework.QueuedPodInfo
	readyAt time.Time
	index   int // in its heap
	active  bool
}

func newSchedulingQueue(less func(a, b *framework.QueuedPodInfo) bool, now func() time.Time) *schedulingQueue {
	q := &schedulingQueue{less: less, now: now, items: map[string]*queued{}, processing: map[string]bool{},
		again: map[string]*framework.QueuedPodInfo{}, wake: make(chan struct{})}
	q.active.less = less
	return q
}

// Add puts key in activeQ (moving it out of backoffQ if it was there).
func (q *schedulingQueue) Add(key string, info *framework.QueuedPodInfo) { q.AddAfter(key, info, 0) }

// AddAfter puts key in backoffQ until d has passed (activeQ when d <= 0).
// A key already queued keeps the earlier of the two times.
func (q *schedulingQueue) AddAfter(key string, info *framework.QueuedPodInfo, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.processing[key] {
		q.again[key] = info
		return
	}
	readyAt := q.now().Add(d)
	if it := q.items[key]; it != nil {
		it.info = info
		switch {
		case it.active:
			heap.Fix(&q.active, it.index)
			return
		case d > 0 && !readyAt.Before(it.readyAt):
			return
		}
		heap.Remove(&q.backoff, it.index)
		delete(q.items, key)
	}
	it := &queued{key: key, info: info, readyAt: readyAt}
	q.items[key] = it
	if d <= 0 {
		it.active = true
		heap.Push(&q.active, it)
	} else {
		heap.Push(&q.backoff, it)
	}
	q.signalLocked()
}

func (q *schedulingQueue) signalLocked() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// flushLocked moves the pods whose back-off ended to activeQ and returns
// how long until the next one ends (0: none waiting).
func (q *schedulingQueue) flushLocked() time.Duration {
	now := q.now()
	for len(q.backoff.items) > 0 {
		it := q.backoff.items[0]
		if wait := it.readyAt.Sub(now); wait > 0 {
			return wait
		}
		heap.Pop(&q.backoff)
		it.active = true
		heap.Push(&q.active, it)
	}
	return 0
}

// Pop returns the first key of activeQ, waiting for one; false once the
// queue is shut down or ctx ends.
func (q *schedulingQueue) Pop(ctx context.Context) (string, bool) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return "", false
		}
		wait := q.flushLocked()
		if len(q.active.items) > 0 {
			it := heap.Pop(&q.active).(*queued)
			delete(q.items, it.key)
			q.processing[it.key] = true
			q.mu.Unlock()
			return it.key, true
		}
		wake := q.wake
		q.mu.Unlock()
		var tc <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-wake:
		case <-tc:
		case <-ctx.Done():
			return "", false
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// Done ends the processing of key; if it was added meanwhile it is queued
// now.
func (q *schedulingQueue) Done(key string) {
	q.mu.Lock()
	delete(q.processing, key)
	info, again := q.again[key]
	delete(q.again, key)
	q.mu.Unlock()
	if again {
		q.Add(key, info)
	}
}

// Lens returns the sizes of activeQ and backoffQ.
func (q *schedulingQueue) Lens() (active, backoff int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.active.items), len(q.backoff.items)
}

// ShutDown makes Pop return false.
func (q *schedulingQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.signalLocked()
	}
}

// podHeap is activeQ: a heap by less.
type podHeap struct {
	items []*queued
	less  func(a, b *framework.QueuedPodInfo) bool
}

func (h *podHeap) Len() int           { return len(h.items) }
func (h *podHeap) Less(i, j int) bool { return h.less(h.items[i].info, h.items[j].info) }
func (h *podHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *podHeap) Push(x any) {
	it := x.(*queued)
	it.index = len(h.items)
	h.items = append(h.items, it)
}
func (h *podHeap) Pop() any {
	n := len(h.items) - 1
	it := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	return it
}

// backoffHeap is backoffQ: a heap by the time the back-off ends.
type backoffHeap struct{ items []*queued }

func (h *backoffHeap) Len() int           { return len(h.items) }
func (h *backoffHeap) Less(i, j int) bool { return h.items[i].readyAt.Before(h.items[j].readyAt) }
func (h *backoffHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *backoffHeap) Push(x any) {
	it := x.(*queued)
	it.index = len(h.items)
	h.items = append(h.items, it)
}
func (h *backoffHeap) Pop() any {
	n := len(h.items) - 1
	it := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	return it
}
