package controller

import (
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ControllerRef returns the owner reference with controller=true, or nil.
func ControllerRef(meta *kplanev1.ObjectMeta) *kplanev1.OwnerReference {
	for _, r := range meta.GetOwnerReferences() {
		if r.GetController() {
			return r
		}
	}
	return nil
}

// OwnerKey returns the cache key ("ns/name") of obj's controlling owner
// when that owner is of kind ownerKind. Owners live in the dependent's
// namespace, as in Kubernetes.
func OwnerKey(obj *kplanev1.Object, ownerKind string) (string, bool) {
	ref := ControllerRef(obj.Meta())
	if ref == nil || ref.GetKind() != ownerKind || ref.GetName() == "" {
		return "", false
	}
	return kplanev1.MetaKey(obj.Meta().GetNamespace(), ref.GetName()), true
}

// OwnerKeys returns a mapping from a dependent (e.g. a Pod) to the key of
// its controlling owner of ownerKind (e.g. "ReplicaSet"), for feeding an
// owner's work queue from its dependents' events. Objects without such an
// owner map to no key.
func OwnerKeys(ownerKind string) func(obj *kplanev1.Object) []string {
	return func(obj *kplanev1.Object) []string {
		if k, ok := OwnerKey(obj, ownerKind); ok {
			return []string{k}
		}
		return nil
	}
}

// IsControlledBy reports whether obj's controller reference points at the
// owner with uid.
func IsControlledBy(obj *kplanev1.Object, uid string) bool {
	ref := ControllerRef(obj.Meta())
	return ref != nil && uid != "" && ref.GetUid() == uid
}

// DeletedObject unwraps an informer OnDelete argument, which is either the
// deleted object or a DeletedFinalStateUnknown tombstone holding the last
// state the cache knew.
func DeletedObject(obj any) (*kplanev1.Object, bool) { return informer.ObjectOf(obj) }

// SlowStartBatch calls fn count times, in batches that start at
// initialBatchSize and double while every call succeeds; the calls of one
// batch run concurrently. It stops after the first batch with a failure, so
// a systematic error (quota, invalid template) costs a handful of calls
// instead of count. It returns the number of successful calls and the first
// error.
func SlowStartBatch(count, initialBatchSize int, fn func() error) (int, error) {
	if initialBatchSize < 1 {
		initialBatchSize = 1
	}
	remaining := count
	successes := 0
	for batch := min(remaining, initialBatchSize); batch > 0; batch = min(2*batch, remaining) {
		errs := make(chan error, batch)
		var wg sync.WaitGroup
		for i := 0; i < batch; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		failed := len(errs)
		successes += batch - failed
		if failed > 0 {
			return successes, <-errs
		}
		remaining -= batch
	}
	return successes, nil
}

// SpecOrMetadataChanged reports whether an update changed more than the
// object's status: its generation (which the apiserver raises on every
// spec change), its deletion mark, labels, annotations, finalizers or
// owner references. Alone, as app.Watch.Changed, it is only safe for a
// controller that never skips a status write because its cache already
// shows that status: a status-only update would not wake it to correct
// a write skipped on a stale cache. StatusWrites.Changed is the safe use.
func SpecOrMetadataChanged(oldObj, newObj *kplanev1.Object) bool {
	o, n := oldObj.Meta(), newObj.Meta()
	return o.GetGeneration() != n.GetGeneration() ||
		(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
		!maps.Equal(o.GetLabels(), n.GetLabels()) ||
		!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
		!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
		!slices.EqualFunc(o.GetOwnerReferences(), n.GetOwnerReferences(), func(a, b *kplanev1.OwnerReference) bool { return proto.Equal(a, b) })
}
