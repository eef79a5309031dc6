package apiserver

import (
	"context"
	"errors"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// leaderlessGrace is how long the etcd member may be without a Raft
// leader before this apiserver reports NOT_SERVING and ends its watches:
// a little over etcd's election timeout (1s), so an ordinary election
// does not move every client.
const leaderlessGrace = 1500 * time.Millisecond

// memberHealth follows whether the embedded etcd member has a leader.
// Without one the member serves neither writes nor linearizable reads,
// and its watch streams go quiet without failing; so the apiserver turns
// its gRPC health NOT_SERVING (clients' health checks move new calls
// elsewhere), fails /readyz, and ends its watches with Unavailable so
// their clients resume on another apiserver.
type memberHealth struct {
	mu      sync.Mutex
	healthy bool
	// broken is closed when the member loses its leader; watches that
	// began before then end.
	broken chan struct{}
}

func newMemberHealth() *memberHealth {
	return &memberHealth{healthy: true, broken: make(chan struct{})}
}

// watchBreak is the channel the watches starting now end on.
func (m *memberHealth) watchBreak() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.broken
}

// err is nil while the member has a leader.
func (m *memberHealth) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.healthy {
		return errors.New("the embedded etcd member has no leader (partitioned from its cluster, or the cluster lost its quorum)")
	}
	return nil
}

// set records the member's state; it reports whether it changed.
func (m *memberHealth) set(healthy bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.healthy == healthy {
		return false
	}
	m.healthy = healthy
	if !healthy {
		close(m.broken)
	} else {
		m.broken = make(chan struct{})
	}
	return true
}

// memberLoop polls the member's leader until ctx ends.
func (a *APIServer) memberLoop(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var leaderlessSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		healthy := true
		if a.backend.HasLeader() {
			leaderlessSince = time.Time{}
		} else {
			if leaderlessSince.IsZero() {
				leaderlessSince = time.Now()
			}
			healthy = time.Since(leaderlessSince) < leaderlessGrace
		}
		if !a.member.set(healthy) {
			continue
		}
		st := healthpb.HealthCheckResponse_SERVING
		if !healthy {
			st = healthpb.HealthCheckResponse_NOT_SERVING
			a.log.Warn("etcd member has no leader; NOT_SERVING and ending watches until it has one")
		} else {
			a.log.Info("etcd member has a leader again; SERVING")
		}
		if !a.stopping.Load() {
			a.health.SetServingStatus("", st)
			a.health.SetServingStatus(kplanev1.Resources_ServiceDesc.ServiceName, st)
		}
	}
}

// ReadyErr is what /readyz reports: nil when ready.
func (a *APIServer) ReadyErr() error { return a.ready() }
