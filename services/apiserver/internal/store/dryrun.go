package store

import (
	"bytes"
	"context"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

type dryRunKey struct{}

// WithDryRun marks the writes made with ctx as dry runs (Kubernetes'
// dryRun=All, the write requests' dry_run): defaulting, validation,
// admission, allocation and the transaction's conditions all run as for
// the real write, but nothing is stored.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

func isDryRun(ctx context.Context) bool {
	dry, _ := ctx.Value(dryRunKey{}).(bool)
	return dry
}

// commit runs a write transaction. In a dry run the Then operations (the
// writes) are dropped: etcd still evaluates the comparisons (the object's
// existence or revision, the namespace, the claimed values), so the
// answer is the real write's, while the transaction is a read that
// writes nothing and does not move the revision.
func (s *Store) commit(ctx context.Context, cmps []*pb.Compare, then, els []*pb.RequestOp) (*clientv3.TxnResponse, error) {
	if isDryRun(ctx) {
		then = nil
	}
	resp, err := s.kv.Txn(ctx, &pb.TxnRequest{Compare: cmps, Success: then, Failure: els})
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	if resp.Succeeded && writesUnder(then, priorityClassPrefix) {
		raiseTo(&s.pcWritten, resp.Header.Revision)
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// raiseTo sets v to rev unless it already holds a later revision.
func raiseTo(v *atomic.Int64, rev int64) {
	for {
		cur := v.Load()
		if cur >= rev || v.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// priorityClassPrefix is where PriorityClasses are stored.
var priorityClassPrefix = ListPrefix(kplanev1.LookupKind("PriorityClass"), "")

// writesUnder reports whether any of ops puts or deletes a key under prefix.
func writesUnder(ops []*pb.RequestOp, prefix string) bool {
	for _, op := range ops {
		if k := keyWritten(op); k != nil && bytes.HasPrefix(k, []byte(prefix)) {
			return true
		}
	}
	return false
}
