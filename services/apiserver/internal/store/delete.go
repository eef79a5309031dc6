package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Propagation policies and the finalizers that carry them, as in
// Kubernetes: the garbage collector finishes what the finalizer names.
const (
	PropagationBackground = "Background"
	PropagationForeground = "Foreground"
	PropagationOrphan     = "Orphan"

	FinalizerOrphan     = "orphan"
	FinalizerForeground = "foregroundDeletion"
)

// SystemNamespaces exist from the first start and cannot be deleted.
var SystemNamespaces = []string{"default", "kplane-system", "kplane-node-lease"}

// DeleteOptions are the optional parts of a Delete.
type DeleteOptions struct {
	Preconditions *kplanev1.Preconditions
	// Propagation is "", Background, Foreground or Orphan.
	Propagation string
	// GracePeriodSeconds overrides a pod's terminationGracePeriodSeconds.
	GracePeriodSeconds *int64
}

// Delete removes an object, or marks it with a deletionTimestamp while
// finalizers remain or a bound pod is shutting down gracefully. It
// returns the object as deleted or as marked.
func (s *Store) Delete(ctx context.Context, kind, namespace, name string, opts DeleteOptions) (*kplanev1.Object, error) {
	k, err := LookupKind(kind)
	if err != nil {
		return nil, err
	}
	if err := checkScope(k, namespace, name); err != nil {
		return nil, err
	}
	switch opts.Propagation {
	case "", PropagationBackground, PropagationForeground, PropagationOrphan:
	default:
		return nil, invalid("propagationPolicy: unsupported value %q: supported values: %q, %q, %q",
			opts.Propagation, PropagationBackground, PropagationForeground, PropagationOrphan)
	}
	if g := opts.GracePeriodSeconds; g != nil && *g < 0 {
		return nil, invalid("gracePeriodSeconds: must be greater than or equal to 0")
	}
	if k.Name == "Namespace" {
		for _, sys := range SystemNamespaces {
			if name == sys {
				return nil, status.Errorf(codes.FailedPrecondition, "namespace %q is a system namespace and cannot be deleted", name)
			}
		}
	}
	pre := opts.Preconditions
	conditional := pre.GetResourceVersion() != "" || pre.GetUid() != ""
	for attempt := 0; ; attempt++ {
		cur, curRev, err := s.get(ctx, k, namespace, name)
		if err != nil {
			return nil, err
		}
		if err := checkPreconditions(k, cur, pre); err != nil {
			return nil, err
		}
		out, err := s.deleteOnce(ctx, k, cur, curRev, opts)
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

func (s *Store) deleteOnce(ctx context.Context, k *kplanev1.KindInfo, cur *kplanev1.Object, curRev int64, opts DeleteOptions) (*kplanev1.Object, error) {
	next := proto.Clone(cur).(*kplanev1.Object)
	meta := next.Meta()
	now := s.opts.Now()

	switch opts.Propagation {
	case PropagationOrphan:
		meta.Finalizers = addFinalizer(meta.Finalizers, FinalizerOrphan)
	case PropagationForeground:
		meta.Finalizers = addFinalizer(meta.Finalizers, FinalizerForeground)
	}
	if grace := podGracePeriod(k, next, opts.GracePeriodSeconds); grace > 0 {
		// A bound pod is marked and left to its node agent, which stops the
		// containers and then deletes it with a zero grace period.
		if meta.DeletionGracePeriodSeconds == nil || grace < *meta.DeletionGracePeriodSeconds {
			meta.DeletionGracePeriodSeconds = proto.Int64(grace)
			meta.DeletionTimestamp = timestamppb.New(now.Add(time.Duration(grace) * time.Second))
		}
	} else if meta.DeletionGracePeriodSeconds != nil {
		meta.DeletionGracePeriodSeconds = proto.Int64(0)
	}
	if len(meta.Finalizers) == 0 && !awaitingGracefulDeletion(k, next) {
		if k.Name == "Namespace" {
			return s.deleteNamespace(ctx, cur, curRev)
		}
		return s.deleteAt(ctx, k, cur, curRev)
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
	return s.commitUpdate(ctx, k, next, curRev)
}

// podGracePeriod is the graceful-termination period a deletion gives a
// pod: the request's, else the pod's own; zero for other kinds and for
// pods that are not running anywhere (unbound or finished).
func podGracePeriod(k *kplanev1.KindInfo, obj *kplanev1.Object, requested *int64) int64 {
	if k.Name != "Pod" {
		return 0
	}
	pod := obj.GetPod()
	if pod.GetSpec().GetNodeName() == "" {
		return 0
	}
	switch pod.GetStatus().GetPhase() {
	case "Succeeded", "Failed":
		return 0
	}
	if requested != nil {
		return *requested
	}
	if g := pod.GetSpec().TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return 30
}

// awaitingGracefulDeletion is true for a pod marked for deletion whose
// node agent has not yet confirmed its containers stopped.
func awaitingGracefulDeletion(k *kplanev1.KindInfo, obj *kplanev1.Object) bool {
	meta := obj.Meta()
	return k.Name == "Pod" && meta.DeletionTimestamp != nil &&
		meta.GetDeletionGracePeriodSeconds() > 0
}

func addFinalizer(list []string, f string) []string {
	if contains(list, f) {
		return list
	}
	return append(list, f)
}

// deleteNamespace deletes an empty namespace. Emptiness is checked inside
// the transaction (a prefix compare per namespaced kind), so no object can
// slip in between the check and the delete. Events do not hold a
// namespace; they go with it.
func (s *Store) deleteNamespace(ctx context.Context, ns *kplanev1.Object, rev int64) (*kplanev1.Object, error) {
	name := ns.Meta().Name
	key := ObjectKey(kplanev1.LookupKind("Namespace"), "", name)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	var holders []*kplanev1.KindInfo
	for _, k := range kplanev1.Kinds() {
		if !k.Namespaced {
			continue
		}
		prefix := ListPrefix(k, name)
		if k.Name == "Event" {
			ops = append(ops, clientv3.OpDelete(prefix, clientv3.WithPrefix()))
			continue
		}
		holders = append(holders, k)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(prefix), "=", 0).WithPrefix())
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, backendError(ctx, "delete namespace", err)
	}
	if resp.Succeeded {
		return ns, nil
	}
	counts, err := s.countIn(ctx, holders, name)
	if err != nil {
		return nil, err
	}
	if len(counts) == 0 {
		return nil, conflict("Namespace", name, "the namespace has been modified")
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
