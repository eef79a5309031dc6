package workqueue

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

type opKind int

const (
	opAdd opKind = iota
	opAddAfter
	opAddRateLimited
	opAdvance
	opYield
	numOpKinds
)

type op struct {
	kind  opKind
	key   int
	delay time.Duration
}

func (o op) String() string {
	return fmt.Sprintf("%d(key%d,%v)", o.kind, o.key, o.delay)
}

func opGen(keys int) *rapid.Generator[op] {
	return rapid.Custom(func(t *rapid.T) op {
		return op{
			kind:  opKind(rapid.IntRange(0, int(numOpKinds)-1).Draw(t, "kind")),
			key:   rapid.IntRange(0, keys-1).Draw(t, "key"),
			delay: time.Duration(rapid.IntRange(-5, 3000).Draw(t, "delayMs")) * time.Millisecond,
		}
	})
}

// propertyModel is what the driver and the workers know about the keys.
// version[i] is bumped before every add of key i: it stands for the state
// of the object that a reconcile must eventually see. seen[i] is the
// version the last successful processing of key i observed.
type propertyModel struct {
	version  []atomic.Int64
	inFlight []atomic.Int32

	mu     sync.Mutex
	seen   []int64
	failed error
}

func (m *propertyModel) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed == nil {
		m.failed = fmt.Errorf(format, args...)
	}
}

func (m *propertyModel) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// worker processes keys like a controller does: it fails now and then and
// retries with AddRateLimited, otherwise it records the version it saw and
// calls Forget.
func (m *propertyModel) worker(q *Queue, rng *rand.Rand) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		i, err := strconv.Atoi(key)
		if err != nil {
			m.fail("Get returned unknown key %q", key)
			q.Done(key)
			continue
		}
		if !m.inFlight[i].CompareAndSwap(0, 1) {
			m.fail("key %s handed to two workers at once", key)
		}
		v := m.version[i].Load()
		for range rng.IntN(4) {
			runtime.Gosched()
		}
		if rng.IntN(4) == 0 && q.NumRequeues(key) < 3 {
			q.AddRateLimited(key)
		} else {
			m.mu.Lock()
			if v < m.seen[i] {
				m.failed = fmt.Errorf("key %s: processed version %d after version %d", key, v, m.seen[i])
			}
			m.seen[i] = v
			m.mu.Unlock()
			q.Forget(key)
		}
		m.inFlight[i].Store(0)
		q.Done(key)
	}
}

// quiescent reports whether nothing is queued, delayed or being processed.
func (q *Queue) quiescent() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) == 0 && len(q.processing) == 0 && len(q.waiting) == 0
}

// TestQueueProperties drives a queue with random interleavings of Add,
// AddAfter, AddRateLimited and clock moves while several workers process
// keys (and sometimes fail and requeue them). It checks that no key is
// processed by two workers at once, that the bookkeeping never holds a key
// twice, and that nothing is lost: once everything settles, the last
// processing of every key saw the state after its last add.
func TestQueueProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		keys := rapid.IntRange(1, 10).Draw(rt, "keys")
		workers := rapid.IntRange(1, 8).Draw(rt, "workers")
		seed := rapid.Uint64().Draw(rt, "workerSeed")
		ops := rapid.SliceOfN(opGen(keys), 1, 150).Draw(rt, "ops")

		c := newFakeClock()
		q := New(Config{
			Clock: c,
			// A small bucket so that the overall limit comes into play.
			RateLimiter: NewControllerRateLimiter(5*time.Millisecond, time.Second, 50, 5, c),
		})
		m := &propertyModel{
			version:  make([]atomic.Int64, keys),
			inFlight: make([]atomic.Int32, keys),
			seen:     make([]int64, keys),
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.worker(q, rand.New(rand.NewPCG(seed, uint64(w))))
			}()
		}
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				q.ShutDown()
				wg.Wait()
			}
		}
		defer stop()

		for _, o := range ops {
			key := strconv.Itoa(o.key)
			switch o.kind {
			case opAdd:
				m.version[o.key].Add(1)
				q.Add(key)
			case opAddAfter:
				m.version[o.key].Add(1)
				q.AddAfter(key, o.delay)
			case opAddRateLimited:
				m.version[o.key].Add(1)
				q.AddRateLimited(key)
			case opAdvance:
				c.Advance(o.delay)
			case opYield:
				runtime.Gosched()
			}
			if err := q.checkInvariants(); err != nil {
				rt.Fatalf("after %v: %v", o, err)
			}
			if err := m.err(); err != nil {
				rt.Fatal(err)
			}
		}

		// Let every delay and backoff run out; failing workers may add new
		// delays meanwhile, so keep moving the clock until all is settled.
		deadline := time.Now().Add(20 * time.Second)
		for !q.quiescent() {
			if time.Now().After(deadline) {
				rt.Fatalf("queue did not settle: len=%d waiting=%d", q.Len(), q.waitingLen())
			}
			if err := q.checkInvariants(); err != nil {
				rt.Fatal(err)
			}
			c.Advance(time.Hour)
			runtime.Gosched()
		}
		stop()
		if err := m.err(); err != nil {
			rt.Fatal(err)
		}
		for i := range keys {
			if v := m.version[i].Load(); m.seen[i] != v {
				rt.Fatalf("key %d lost: last added at version %d, last processed at version %d", i, v, m.seen[i])
			}
		}
	})
}

// TestQueueSoak runs one long seeded interleaving with real time and many
// workers, as a complement to the short rapid cases.
func TestQueueSoak(t *testing.T) {
	const keys, workers, adds = 50, 16, 20000
	rng := rand.New(rand.NewPCG(1, 2))
	q := New(Config{RateLimiter: NewControllerRateLimiter(time.Microsecond, time.Millisecond, 0, 1, nil)})
	m := &propertyModel{
		version:  make([]atomic.Int64, keys),
		inFlight: make([]atomic.Int32, keys),
		seen:     make([]int64, keys),
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.worker(q, rand.New(rand.NewPCG(3, uint64(w))))
		}()
	}
	for range adds {
		i := rng.IntN(keys)
		m.version[i].Add(1)
		switch rng.IntN(3) {
		case 0:
			q.Add(strconv.Itoa(i))
		case 1:
			q.AddAfter(strconv.Itoa(i), time.Duration(rng.IntN(200))*time.Microsecond)
		default:
			q.AddRateLimited(strconv.Itoa(i))
		}
	}
	eventually(t, "queue to settle", q.quiescent)
	q.ShutDown()
	wg.Wait()
	if err := m.err(); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if v := m.version[i].Load(); m.seen[i] != v {
			t.Fatalf("key %d lost: last added at version %d, last processed at version %d", i, v, m.seen[i])
		}
	}
}
