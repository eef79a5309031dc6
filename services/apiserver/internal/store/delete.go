package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"
)

// DeleteOptions are the optional parts of a Delete.
type DeleteOptions struct {
	Preconditions *kplanev1.Preconditions
	// Propagation is "", Background, Foreground or Orphan.
	Propagation string
	// GracePeriodSeconds overrides the grace period of a kind deleted
	// gracefully (strategy.GracefulDeleter; a pod's
	// terminationGracePeriodSeconds).
	GracePeriodSeconds *int64
}

// Delete removes an object, or marks it with a deletionTimestamp while
// finalizers remain or it is shutting down gracefully (a bound pod). It
// returns the object as deleted or as marked.
func (s *Store) Delete(ctx context.Context, kind, namespace, name string, opts DeleteOptions) (*kplanev1.Object, error) {
	k, err := LookupKind(kind)
	if err != nil {
		return nil, err
	}
	if err := checkScope(k, namespace, name); err != nil {
		return nil, err
	}
	finalizer, err := strategy.PropagationFinalizer(opts.Propagation)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if g := opts.GracePeriodSeconds; g != nil && *g < 0 {
		return nil, invalid("gracePeriodSeconds: must be greater than or equal to 0")
	}
	guard, _ := strategy.For(k.Name).(strategy.DeleteGuard)
	pre := opts.Preconditions
	conditional := pre.GetResourceVersion() != "" || pre.GetUid() != ""
	for attempt := 0; ; attempt++ {
		cur, curRev, err := s.get(ctx, k, namespace, name)
		if err != nil {
			return nil, err
		}
		if guard != nil {
			if err := guard.BeforeDelete(cur); err != nil {
				return nil, status.Error(codes.FailedPrecondition, err.Error())
			}
		}
		if err := checkPreconditions(k, cur, pre); err != nil {
			return nil, err
		}
		out, err := s.deleteOnce(ctx, k, cur, curRev, finalizer, opts.GracePeriodSeconds)
		if status.Code(err) == codes.Aborted && !conditional && attempt < maxUpdateRetries {
			continue
		}
		return out, err
	}
}

func checkPreconditions(k *kplanev1.KindInfo, cur *kplanev1.Object, pre *kplanev1.Preconditions) error {
	meta := cur.Meta()
	if uid := pre.GetUid(); uid != "" && uid != meta.Uid {
		return conflict(k.Name, meta.Name, fmt.Sprintf("precondition failed: uid %s, stored object has %s", uid, meta.Uid))
	}
	if rv := pre.GetResourceVersion(); rv != "" && rv != meta.ResourceVersion {
		return conflict(k.Name, meta.Name, fmt.Sprintf("precondition failed: resourceVersion %s, stored object has %s", rv, meta.ResourceVersion))
	}
	return nil
}

// deleteOnce deletes cur, or marks it, adding the propagation's finalizer
// (if any) and giving a graceful kind its grace period.
func (s *Store) deleteOnce(ctx context.Context, k *kplanev1.KindInfo, cur *kplanev1.Object, curRev int64, finalizer string, requestedGrace *int64) (*kplanev1.Object, error) {
	next := proto.Clone(cur).(*kplanev1.Object)
	meta := next.Meta()
	now := s.opts.Now()

	if finalizer != "" {
		meta.Finalizers = addFinalizer(meta.Finalizers, finalizer)
	}
	if grace := gracePeriod(k, next, requestedGrace); grace > 0 {
		// The object is marked and left to whoever stops it (a pod's node
		// agent), which then deletes it with a zero grace period.
		if meta.DeletionGracePeriodSeconds == nil || grace < *meta.DeletionGracePeriodSeconds {
			meta.DeletionGracePeriodSeconds = proto.Int64(grace)
			meta.DeletionTimestamp = timestamppb.New(now.Add(time.Duration(grace) * time.Second))
		}
	} else if meta.DeletionGracePeriodSeconds != nil {
		meta.DeletionGracePeriodSeconds = proto.Int64(0)
	}
	if len(meta.Finalizers) == 0 && !awaitingGracefulDeletion(k, next) {
		return s.remove(ctx, k, cur, curRev, claimsOf(k, cur))
	}
	if meta.DeletionTimestamp == nil {
		meta.DeletionTimestamp = timestamppb.New(now)
		if meta.DeletionGracePeriodSeconds == nil {
			meta.DeletionGracePeriodSeconds = proto.Int64(0)
		}
	}
	if proto.Equal(next, cur) {
		return cur, nil // already marked; deleting again changes nothing
	}
	return s.commitUpdate(ctx, k, next, cur, curRev, nil)
}

// gracePeriod is the graceful-termination period a deletion gives obj:
// its kind's (strategy.GracefulDeleter), zero for kinds that go at once.
func gracePeriod(k *kplanev1.KindInfo, obj *kplanev1.Object, requested *int64) int64 {
	g, ok := strategy.For(k.Name).(strategy.GracefulDeleter)
	if !ok {
		return 0
	}
	return g.GracePeriod(obj, requested)
}

// awaitingGracefulDeletion is true for an object of a graceful kind marked
// for deletion whose stop (a pod's containers, by its node agent) has not
// been confirmed with a zero grace period yet.
func awaitingGracefulDeletion(k *kplanev1.KindInfo, obj *kplanev1.Object) bool {
	if _, ok := strategy.For(k.Name).(strategy.GracefulDeleter); !ok {
		return false
	}
	meta := obj.Meta()
	return meta.DeletionTimestamp != nil && meta.GetDeletionGracePeriodSeconds() > 0
}

// remove deletes obj if its key is still at rev; a namespace only when it
// is empty.
// held are the values the stored object holds, released with it.
func (s *Store) remove(ctx context.Context, k *kplanev1.KindInfo, obj *kplanev1.Object, rev int64, held []strategy.Claim) (*kplanev1.Object, error) {
	if _, ok := strategy.For(k.Name).(strategy.NamespaceHolder); ok {
		return s.deleteNamespace(ctx, k, obj, rev)
	}
	return s.deleteAt(ctx, k, obj, rev, held)
}

func addFinalizer(list []string, f string) []string {
	if contains(list, f) {
		return list
	}
	return append(list, f)
}

// deleteNamespace deletes an empty namespace. Emptiness is checked inside
// the transaction (a prefix compare per namespaced kind), so no object can
// slip in between the check and the delete. Objects of kinds deleted with
// their namespace (strategy.DeletedWithNamespace: Events) do not hold it;
// they go in the same transaction.
func (s *Store) deleteNamespace(ctx context.Context, nsKind *kplanev1.KindInfo, ns *kplanev1.Object, rev int64) (*kplanev1.Object, error) {
	name := ns.Meta().Name
	key := ObjectKey(nsKind, "", name)
	cmps := []*pb.Compare{modifiedAt(key, rev)}
	ops := []*pb.RequestOp{opDelete(key)}
	var holders []*kplanev1.KindInfo
	for _, k := range kplanev1.Kinds() {
		if !k.Namespaced {
			continue
		}
		prefix := ListPrefix(k, name)
		if _, ok := strategy.For(k.Name).(strategy.DeletedWithNamespace); ok {
			ops = append(ops, opDeleteUnder(prefix))
			continue
		}
		holders = append(holders, k)
		cmps = append(cmps, noneUnder(prefix))
	}
	resp, err := s.commit(ctx, cmps, ops, nil)
	if err != nil {
		return nil, backendError(ctx, "delete namespace", err)
	}
	if resp.Succeeded {
		// Report the deletion's revision, as the watch's DELETED event does.
		out := proto.Clone(ns).(*kplanev1.Object)
		if !isDryRun(ctx) {
			out.Meta().ResourceVersion = FormatRevision(resp.Header.Revision)
		}
		return out, nil
	}
	counts, err := s.countIn(ctx, holders, name)
	if err != nil {
		return nil, err
	}
	if len(counts) == 0 {
		return nil, conflict(nsKind.Name, name, "the namespace has been modified")
	}
	return nil, status.Errorf(codes.FailedPrecondition, "namespace %q is not empty: it still holds %s; delete them first", name, strings.Join(counts, ", "))
}

func (s *Store) countIn(ctx context.Context, kinds []*kplanev1.KindInfo, namespace string) ([]string, error) {
	var out []string
	for _, k := range kinds {
		resp, err := s.cli.Get(ctx, ListPrefix(k, namespace), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, backendError(ctx, "count namespace contents", err)
		}
		if resp.Count > 0 {
			out = append(out, fmt.Sprintf("%d %s", resp.Count, k.Name))
		}
	}
	sort.Strings(out)
	return out, nil
}
