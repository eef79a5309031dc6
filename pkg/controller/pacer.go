package controller

import (
	"sync"
	"time"
)

// Pacer spaces out the gathered (delayed) wakes of owners whose
// reconcile grows with their size, such as a ReplicaSet of 100,000 pods
// that counts its ready pods on every reconcile. The delay before an
// owner's gathered wake is the larger of Min and Factor times the owner's
// last measured walk, so however large an owner grows, the reconciles its
// status-only events cause take about 1/Factor of a worker, not all of
// it; a small owner keeps Min. Wakes that must not wait (an owner's
// expectations met, a change of its spec) do not go through a Pacer.
// The zero value waits Min = 0; set Min and Factor before use.
type Pacer struct {
	Min    time.Duration
	Factor float64

	mu   sync.Mutex
	last map[string]time.Duration
}

// Observe records how long the size-bound part of key's reconcile took.
func (p *Pacer) Observe(key string, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]time.Duration{}
	}
	p.last[key] = took
}

// Delay is how long a gathered wake of key waits.
func (p *Pacer) Delay(key string) time.Duration {
	p.mu.Lock()
	took := p.last[key]
	p.mu.Unlock()
	return max(p.Min, time.Duration(p.Factor*float64(took)))
}

// Forget drops what was observed of key (its owner is gone).
func (p *Pacer) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}
