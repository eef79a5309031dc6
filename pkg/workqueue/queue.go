package workqueue

import (
	"sync"
	"time"
)

// Config configures a Queue. The zero value gives an unnamed queue with the
// default rate limiter, no metrics and the real clock.
type Config struct {
	// Name identifies the queue in metrics (the "name" label).
	Name string
	// RateLimiter decides how long AddRateLimited waits before a key is
	// queued again. Default: NewControllerRateLimiter with the Default*
	// constants and this Config's Clock.
	RateLimiter RateLimiter
	// MetricsProvider creates the queue's metrics. Default: none.
	MetricsProvider MetricsProvider
	// Clock is the source of time. Default: RealClock.
	Clock Clock
}

// Queue is a deduplicating FIFO work queue of string keys with delayed and
// rate-limited adds. It is safe for concurrent use. A Queue owns one
// goroutine (the one that moves delayed keys into the queue when they are
// due); ShutDown stops it, so every Queue must be shut down eventually.
type Queue struct {
	name    string
	clock   Clock
	limiter RateLimiter
	metrics Metrics

	mu sync.Mutex
	// ready is signalled when a key is appended to queue or on shutdown.
	ready *sync.Cond
	// idle is broadcast when processing becomes empty (for drains).
	idle *sync.Cond
	// queue holds the keys ready to be handed out, oldest first. A key is
	// in queue at most once and never while it is in processing.
	queue []string
	// dirty holds every key that needs processing: those in queue plus
	// those added again while being processed. It is what makes Add
	// idempotent.
	dirty map[string]struct{}
	// processing maps the keys handed out by Get and not yet Done to the
	// time Get returned them.
	processing map[string]time.Time
	// enqueued maps each key in queue to the time it was appended.
	enqueued     map[string]time.Time
	shuttingDown bool

	// Delayed adds (see delaying.go), guarded by mu as well.
	waiting      waitHeap
	waitingByKey map[string]*waitEntry
	waitSeq      uint64
	// wake (capacity 1) tells the delay loop that waiting changed.
	wake chan struct{}
	// stop is closed by ShutDown; loopDone is closed when the delay loop
	// has returned.
	stop     chan struct{}
	loopDone chan struct{}
	stopOnce sync.Once
}

// New returns a running Queue. Call ShutDown (or ShutDownWithDrain) when
// done with it to stop its goroutine.
func New(cfg Config) *Queue {
	clock := cfg.Clock
	if clock == nil {
		clock = RealClock{}
	}
	limiter := cfg.RateLimiter
	if limiter == nil {
		limiter = NewControllerRateLimiter(DefaultBaseDelay, DefaultMaxDelay, DefaultQPS, DefaultBurst, clock)
	}
	var metrics Metrics = noopMetrics{}
	if cfg.MetricsProvider != nil {
		metrics = cfg.MetricsProvider.NewQueueMetrics(cfg.Name)
	}
	q := &Queue{
		name:         cfg.Name,
		clock:        clock,
		limiter:      limiter,
		metrics:      metrics,
		dirty:        map[string]struct{}{},
		processing:   map[string]time.Time{},
		enqueued:     map[string]time.Time{},
		waitingByKey: map[string]*waitEntry{},
		wake:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		loopDone:     make(chan struct{}),
	}
	q.ready = sync.NewCond(&q.mu)
	q.idle = sync.NewCond(&q.mu)
	go q.delayLoop()
	return q
}

// Name returns the name given in Config.
func (q *Queue) Name() string { return q.name }

// Add marks key as needing processing. It is a no-op when key is already
// waiting in the queue or after ShutDown. A key added while a worker is
// processing it is queued again when that worker calls Done.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *Queue) addLocked(key string) {
	if q.shuttingDown {
		return
	}
	if _, ok := q.dirty[key]; ok {
		return
	}
	q.metrics.IncAdds()
	q.dirty[key] = struct{}{}
	if _, busy := q.processing[key]; busy {
		// Done will queue it; handing it out now would let two workers
		// process the same key at once.
		return
	}
	q.pushLocked(key)
}

func (q *Queue) pushLocked(key string) {
	q.queue = append(q.queue, key)
	q.enqueued[key] = q.clock.Now()
	q.metrics.SetDepth(len(q.queue))
	q.ready.Signal()
}

// Get blocks until a key is ready and returns it; the caller must call
// Done(key) when it has finished with it. shutdown is true (and key empty)
// once ShutDown has been called; the worker should then return.
func (q *Queue) Get() (key string, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) == 0 && !q.shuttingDown {
		q.ready.Wait()
	}
	if q.shuttingDown {
		return "", true
	}
	key = q.queue[0]
	q.queue[0] = "" // let the backing array forget the string
	q.queue = q.queue[1:]
	now := q.clock.Now()
	q.metrics.SetDepth(len(q.queue))
	q.metrics.ObserveQueueLatency(now.Sub(q.enqueued[key]))
	delete(q.enqueued, key)
	delete(q.dirty, key)
	q.processing[key] = now
	return key, false
}

// Done marks the processing of key, handed out by Get, as finished. If key
// was added again meanwhile it is queued again. Done for a key that is not
// being processed is a no-op.
func (q *Queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	start, ok := q.processing[key]
	if !ok {
		return
	}
	delete(q.processing, key)
	q.metrics.ObserveWorkDuration(q.clock.Now().Sub(start))
	if _, again := q.dirty[key]; again && !q.shuttingDown {
		q.pushLocked(key)
	}
	if len(q.processing) == 0 {
		q.idle.Broadcast()
	}
}

// Len returns the number of keys ready to be handed out (not counting keys
// being processed or waiting for a delay).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// ShutDown makes the queue stop handing out and accepting work: every
// blocked and future Get returns shutdown=true at once, keys still waiting
// (ready or delayed) are dropped, later adds are ignored. Workers may finish
// the keys they hold; their Done calls are accepted. ShutDown does not wait
// for them (see ShutDownWithDrain). It is idempotent and returns once the
// queue's goroutine has stopped.
//
// Unlike client-go's queue, waiting keys are not handed out after ShutDown:
// a controller stops because it is terminating or lost its lease, and in
// both cases the remaining work belongs to whoever lists the objects next.
func (q *Queue) ShutDown() {
	q.stopOnce.Do(func() {
		q.mu.Lock()
		q.shuttingDown = true
		q.queue = nil
		clear(q.dirty)
		clear(q.enqueued)
		q.waiting = nil
		clear(q.waitingByKey)
		q.metrics.SetDepth(0)
		close(q.stop)
		q.ready.Broadcast()
		q.mu.Unlock()
	})
	<-q.loopDone
}

// ShutDownWithDrain is ShutDown followed by waiting until every key handed
// out by Get has been marked Done. It blocks forever if a worker never
// calls Done.
func (q *Queue) ShutDownWithDrain() {
	q.ShutDown()
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.processing) > 0 {
		q.idle.Wait()
	}
}

// ShuttingDown reports whether ShutDown has been called.
func (q *Queue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}
