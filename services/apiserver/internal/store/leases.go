package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseReuse is how long one etcd lease is shared by new objects with the
// same TTL. Granting a lease per Event would double the writes; sharing
// one for a minute makes an object live between ttl and ttl+leaseReuse,
// as in Kubernetes.
const leaseReuse = time.Minute

// leasePool hands out etcd leases for objects that expire
// (strategy.Expirer), one shared lease per TTL at a time.
type leasePool struct {
	cli *clientv3.Client
	now func() time.Time

	mu     sync.Mutex
	shared map[time.Duration]sharedLease
}

type sharedLease struct {
	id      clientv3.LeaseID
	granted time.Time
}

func newLeasePool(cli *clientv3.Client, now func() time.Time) *leasePool {
	return &leasePool{cli: cli, now: now, shared: map[time.Duration]sharedLease{}}
}

// get returns a lease that expires no earlier than ttl from now.
func (p *leasePool) get(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	// Short TTLs (tests) share a lease for a tenth of the TTL instead.
	reuse := min(leaseReuse, ttl/10)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if l, ok := p.shared[ttl]; ok && now.Sub(l.granted) < reuse {
		return l.id, nil
	}
	seconds := int64((ttl + reuse + time.Second - 1).Seconds())
	resp, err := p.cli.Grant(ctx, seconds)
	if err != nil {
		return 0, fmt.Errorf("grant %ds lease: %w", seconds, err)
	}
	p.shared[ttl] = sharedLease{id: resp.ID, granted: now}
	return resp.ID, nil
}
