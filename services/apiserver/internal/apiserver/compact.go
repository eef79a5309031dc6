package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactLoop compacts etcd every interval up to the revision seen one
// interval earlier, so watchers that reconnect within an interval can
// still resume, as Kubernetes' apiserver does.
func (a *APIServer) compactLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var previous int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := a.currentRevision(ctx)
		if err != nil {
			a.log.Warn("compaction: reading the current revision failed", "error", err)
			continue
		}
		if previous > 0 {
			if err := a.compactTo(ctx, previous); err != nil {
				a.log.Warn("compaction failed", "revision", previous, "error", err)
			}
		}
		previous = cur
	}
}

// Compact compacts etcd history up to the current revision at once and
// returns that revision (tests and operators use it).
func (a *APIServer) Compact(ctx context.Context) (int64, error) {
	cur, err := a.currentRevision(ctx)
	if err != nil {
		return 0, err
	}
	return cur, a.compactTo(ctx, cur)
}

func (a *APIServer) currentRevision(ctx context.Context) (int64, error) {
	return a.store.CurrentRevision(ctx)
}

func (a *APIServer) compactTo(ctx context.Context, rev int64) error {
	a.compactMu.Lock()
	defer a.compactMu.Unlock()
	if rev <= a.lastCompaction {
		return nil
	}
	if _, err := a.backend.Client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		// With several apiservers on one etcd cluster each compacts; one
		// that finds the revision already compacted has nothing to do
		// but tell its caches.
		if !errors.Is(err, rpctypes.ErrCompacted) && !errors.Is(err, rpctypes.ErrGRPCCompacted) {
			return fmt.Errorf("compact etcd to revision %d: %w", rev, err)
		}
		a.log.Debug("etcd already compacted past the revision by another apiserver", "revision", rev)
	}
	a.lastCompaction = rev
	for _, c := range a.caches {
		c.Compacted(rev)
	}
	a.log.Info("etcd compacted", "revision", rev)
	return nil
}
