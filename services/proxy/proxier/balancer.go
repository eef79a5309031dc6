package proxier

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Balancer picks the endpoint for each new connection to one service
// port: round robin over the ready endpoints or, with an affinity
// timeout, the endpoint a client IP used last unless it has been idle
// longer than the timeout (Kubernetes' ClientIP session affinity). Its
// endpoints change live (Update); connections already made are not its
// concern. It is safe for concurrent use.
type Balancer struct {
	mu        sync.Mutex
	endpoints []string
	next      int
	timeout   time.Duration
	sticky    map[netip.Addr]*stickyEntry
	lastSweep time.Time
}

type stickyEntry struct {
	endpoint string
	lastUsed time.Time
}

// sweepEvery bounds how often the affinity table is swept of expired
// entries (clients that never came back); it is also swept when its
// timeout passes, whichever is sooner.
const sweepEvery = time.Minute

// NewBalancer returns a balancer without endpoints.
func NewBalancer() *Balancer { return &Balancer{} }

// Update replaces the endpoints (sorted "ip:port") and the affinity
// timeout (0: none). Clients stuck to an endpoint that is gone pick
// afresh on their next connection; the round robin carries on from where
// it was.
func (b *Balancer) Update(endpoints []string, affinityTimeout time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endpoints = slices.Clone(endpoints)
	if len(b.endpoints) > 0 {
		b.next %= len(b.endpoints)
	} else {
		b.next = 0
	}
	b.timeout = affinityTimeout
	if affinityTimeout <= 0 {
		b.sticky = nil
		return
	}
	for ip, e := range b.sticky {
		if !slices.Contains(b.endpoints, e.endpoint) {
			delete(b.sticky, ip)
		}
	}
}

// Endpoints returns the current endpoints.
func (b *Balancer) Endpoints() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.endpoints)
}

// Next picks the endpoint for a new connection from client at now,
// skipping the endpoints in exclude (those a dial already failed on for
// this connection). ok is false when no endpoint is left.
func (b *Balancer) Next(client netip.Addr, now time.Time, exclude []string) (endpoint string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	affinity := b.timeout > 0 && client.IsValid()
	if affinity {
		b.sweepLocked(now)
		if e, found := b.sticky[client]; found && now.Sub(e.lastUsed) <= b.timeout &&
			!slices.Contains(exclude, e.endpoint) && slices.Contains(b.endpoints, e.endpoint) {
			e.lastUsed = now
			return e.endpoint, true
		}
	}
	for range b.endpoints {
		ep := b.endpoints[b.next]
		b.next = (b.next + 1) % len(b.endpoints)
		if slices.Contains(exclude, ep) {
			continue
		}
		if affinity {
			if b.sticky == nil {
				b.sticky = map[netip.Addr]*stickyEntry{}
			}
			b.sticky[client] = &stickyEntry{endpoint: ep, lastUsed: now}
		}
		return ep, true
	}
	return "", false
}

// sweepLocked drops expired affinity entries, at most once per
// min(timeout, sweepEvery).
func (b *Balancer) sweepLocked(now time.Time) {
	if now.Sub(b.lastSweep) < min(b.timeout, sweepEvery) {
		return
	}
	b.lastSweep = now
	for ip, e := range b.sticky {
		if now.Sub(e.lastUsed) > b.timeout {
			delete(b.sticky, ip)
		}
	}
}

// stickyClients is the size of the affinity table (for tests).
func (b *Balancer) stickyClients() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sticky)
}
