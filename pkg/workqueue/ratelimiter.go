package workqueue

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/kplane/kplane/pkg/backoff"
)

// Defaults of the controller rate limiter, as in Kubernetes controllers.
const (
	// DefaultBaseDelay is the first per-key retry delay; it doubles on
	// every further failure of the key.
	DefaultBaseDelay = 5 * time.Millisecond
	// DefaultMaxDelay caps the per-key retry delay.
	DefaultMaxDelay = 1000 * time.Second
	// DefaultQPS is the sustained rate of retries over all keys.
	DefaultQPS = 10
	// DefaultBurst is the number of retries allowed at once over all keys.
	DefaultBurst = 100
)

// RateLimiter decides how long a key waits before it is retried.
// Implementations are safe for concurrent use.
type RateLimiter interface {
	// When records one more failure of key and returns how long to wait
	// before retrying it.
	When(key string) time.Duration
	// Forget clears the failure history of key (after a success).
	Forget(key string)
	// NumRequeues returns the number of failures recorded for key.
	NumRequeues(key string) int
}

// NewControllerRateLimiter returns the limiter controllers use: the larger
// of a per-key exponential backoff (base, doubling, capped at maxDelay) and an
// overall token bucket (qps, burst) that bounds the retry rate of the whole
// queue. A nil clock means RealClock.
func NewControllerRateLimiter(base, maxDelay time.Duration, qps float64, burst int, clock Clock) RateLimiter {
	return NewMaxOfRateLimiter(
		NewExponentialRateLimiter(base, maxDelay),
		NewBucketRateLimiter(qps, burst, clock),
	)
}

// DefaultRateLimiter returns NewControllerRateLimiter with the Default*
// constants and the real clock.
func DefaultRateLimiter() RateLimiter {
	return NewControllerRateLimiter(DefaultBaseDelay, DefaultMaxDelay, DefaultQPS, DefaultBurst, RealClock{})
}

// NewExponentialRateLimiter returns a per-key limiter whose n-th
// consecutive failure (counting from 0) waits base*2^n, at most maxDelay.
func NewExponentialRateLimiter(base, maxDelay time.Duration) RateLimiter {
	return &exponentialRateLimiter{base: base, max: maxDelay, failures: map[string]int{}}
}

type exponentialRateLimiter struct {
	base, max time.Duration
	mu        sync.Mutex
	failures  map[string]int
}

func (r *exponentialRateLimiter) When(key string) time.Duration {
	r.mu.Lock()
	n := r.failures[key]
	r.failures[key] = n + 1
	r.mu.Unlock()
	return backoff.Backoff{Duration: r.base, Factor: 2, Cap: r.max}.Delay(n)
}

func (r *exponentialRateLimiter) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failures, key)
}

func (r *exponentialRateLimiter) NumRequeues(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[key]
}

// NewBucketRateLimiter returns a limiter shared by all keys: a token bucket
// refilled at qps tokens per second holding at most burst tokens; each
// When takes a token and waits until it is available. qps <= 0 means no
// limit; burst < 1 is treated as 1. A nil clock means RealClock. It keeps
// no per-key state, so Forget is a no-op and NumRequeues is 0.
func NewBucketRateLimiter(qps float64, burst int, clock Clock) RateLimiter {
	if clock == nil {
		clock = RealClock{}
	}
	limit := rate.Limit(qps)
	if qps <= 0 {
		limit = rate.Inf
	}
	if burst < 1 {
		burst = 1
	}
	return &bucketRateLimiter{limiter: rate.NewLimiter(limit, burst), clock: clock}
}

type bucketRateLimiter struct {
	limiter *rate.Limiter
	clock   Clock
}

func (r *bucketRateLimiter) When(string) time.Duration {
	now := r.clock.Now()
	return r.limiter.ReserveN(now, 1).DelayFrom(now)
}

func (r *bucketRateLimiter) Forget(string) {}

func (r *bucketRateLimiter) NumRequeues(string) int { return 0 }

// NewMaxOfRateLimiter combines limiters: When asks every one (so each
// records the failure) and returns the longest delay, NumRequeues the
// largest count, and Forget forgets in all of them.
func NewMaxOfRateLimiter(limiters ...RateLimiter) RateLimiter {
	return maxOfRateLimiter(append([]RateLimiter(nil), limiters...))
}

type maxOfRateLimiter []RateLimiter

func (m maxOfRateLimiter) When(key string) time.Duration {
	var longest time.Duration
	for _, l := range m {
		longest = max(longest, l.When(key))
	}
	return longest
}

func (m maxOfRateLimiter) Forget(key string) {
	for _, l := range m {
		l.Forget(key)
	}
}

func (m maxOfRateLimiter) NumRequeues(key string) int {
	n := 0
	for _, l := range m {
		n = max(n, l.NumRequeues(key))
	}
	return n
}

// AddRateLimited adds key after the delay its rate limiter gives it, and
// counts a retry. Use it when processing key failed. Ignored after
// ShutDown.
func (q *Queue) AddRateLimited(key string) {
	if q.ShuttingDown() {
		return
	}
	q.metrics.IncRetries()
	q.AddAfter(key, q.limiter.When(key))
}

// Forget tells the rate limiter that key succeeded, so its next failure
// starts again from the shortest backoff. It does not remove key from the
// queue.
func (q *Queue) Forget(key string) { q.limiter.Forget(key) }

// NumRequeues returns how many times key has been rate-limited since it was
// last forgotten.
func (q *Queue) NumRequeues(key string) int { return q.limiter.NumRequeues(key) }
