package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseReuse is how long one etcd lease is shared by new Events. Granting
// a lease per event would double the writes; sharing one for a minute
// makes an event live between ttl and ttl+leaseReuse, as in Kubernetes.
const leaseReuse = time.Minute

// leasePool hands out etcd leases for objects that expire (Events).
type leasePool struct {
	cli *clientv3.Client
	ttl time.Duration
	now func() time.Time

	reuse time.Duration

	mu      sync.Mutex
	id      clientv3.LeaseID
	granted time.Time
}

func newLeasePool(cli *clientv3.Client, ttl time.Duration, now func() time.Time) *leasePool {
	// Short TTLs (tests) share a lease for a tenth of the TTL instead.
	reuse := min(leaseReuse, ttl/10)
	return &leasePool{cli: cli, ttl: ttl, now: now, reuse: reuse}
}

func (p *leasePool) get(ctx context.Context) (clientv3.LeaseID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.id != 0 && now.Sub(p.granted) < p.reuse {
		return p.id, nil
	}
	seconds := int64((p.ttl + p.reuse + time.Second - 1).Seconds())
	resp, err := p.cli.Grant(ctx, seconds)
	if err != nil {
		return 0, fmt.Errorf("grant %ds lease: %w", seconds, err)
	}
	p.id, p.granted = resp.ID, now
	return p.id, nil
}
