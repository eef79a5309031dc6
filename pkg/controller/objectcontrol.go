package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/backoff"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ObjectControl creates and deletes the objects an owner controls (pods,
// for a ReplicaSet or a Job) and keeps the owner's Expectations in step
// with every call, as Kubernetes' PodControl does: expectations are raised
// before the calls (their watch events may arrive before the calls
// return), lowered for calls that fail or are never attempted, and every
// call's revision is recorded so that SatisfiedAt can release the owner
// once the cache has caught up. Its Observe* methods are the other half:
// call them from the owned kind's informer handler, before queueing the
// owner, so the reconcile the event triggers sees the expectation met.
type ObjectControl struct {
	// API is the apiserver client.
	API kplanev1.ResourcesClient
	// Expectations of the owners; required.
	Expectations *Expectations
	// OwnerKey maps an owned object to its owner's work queue key; false
	// when the object is not controlled by an owner of this controller.
	OwnerKey func(obj *kplanev1.Object) (string, bool)
	// InitialBatch is the first slow-start batch of Create (default 1).
	InitialBatch int
	// Counts counts the calls made (for metrics: serve them with
	// app.Context.RegisterCounters).
	Counts CallCounts
}

// CallCounts are the create and delete calls an ObjectControl made.
type CallCounts struct {
	// Creates and Deletes count every call, successful or not.
	Creates, Deletes atomic.Int64
	// CreateFailures and DeleteFailures count the calls that failed.
	CreateFailures, DeleteFailures atomic.Int64
}

// Create creates n objects for the owner with queue key key, each made by
// newObj, in slow-start batches (1, 2, 4, ...; see SlowStartBatch) so that
// a systematic failure costs a handful of calls. It returns how many were
// created and the first error. newObj and Calls run concurrently.
func (c *ObjectControl) Create(ctx context.Context, key string, n int, newObj func() (*kplanev1.Object, error)) (int, error) {
	exp := c.Expectations
	exp.ExpectCreations(key, n)
	var failed atomic.Int32
	ok, err := SlowStartBatch(n, max(c.InitialBatch, 1), func() error {
		obj, err := newObj()
		exp.WriteIssued(key)
		var resp *kplanev1.CreateResponse
		if err == nil {
			resp, err = c.API.Create(ctx, &kplanev1.CreateRequest{Object: obj})
		}
		c.called("create", err)
		if err != nil && obj != nil && client.MayHaveWritten(err) {
			// The create may have been committed (a timeout, the apiserver
			// gone mid-call): lowering the expectation now could create the
			// object twice. Keep it expected until the cache has caught up
			// with a revision read after the failure, which shows either way.
			// When none can be read now (the apiserver is gone, or a lost
			// lease cancelled ctx), SatisfiedAt reads one in a later
			// reconcile: without it the owner would wait out the TTL.
			if rev := c.revisionAfterFailure(ctx, obj); rev > 0 {
				exp.WriteAcknowledged(key, rev)
			} else {
				exp.WriteOutcomeUnknown(key, obj.KindName(), obj.Meta().GetNamespace())
			}
			failed.Add(1)
			return err
		}
		exp.WriteAcknowledged(key, revisionOf(resp.GetObject(), err))
		if err != nil {
			failed.Add(1)
			exp.CreationFailed(key)
			return err
		}
		return nil
	})
	for range n - ok - int(failed.Load()) {
		exp.CreationObserved(key) // never attempted: no event will come
	}
	return ok, err
}

// Delete deletes victims concurrently, each only if it is still the object
// with that uid (DeleteIfSameUID). A victim already gone or replaced counts
// as deleted by someone else: its expectation is met at once. It returns
// how many this call deleted and the joined errors.
func (c *ObjectControl) Delete(ctx context.Context, key string, victims []*kplanev1.Object, opts client.DeleteOptions) (int, error) {
	exp := c.Expectations
	keys := make([]string, len(victims))
	for i, v := range victims {
		keys[i] = v.Key()
	}
	exp.ExpectDeletions(key, keys)
	for range victims {
		exp.WriteIssued(key)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		done atomic.Int32
	)
	for i, v := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, deleted, err := DeleteIfSameUID(ctx, c.API, v, opts)
			exp.WriteAcknowledged(key, revisionOf(out, err))
			c.called("delete", err)
			switch {
			case deleted:
				done.Add(1)
			case err == nil:
				// Already gone or replaced; its deletion event may never
				// reach us as ours.
				exp.DeletionObserved(key, keys[i])
			default:
				exp.DeletionFailed(key, keys[i])
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(done.Load()), errors.Join(errs...)
}

func (c *ObjectControl) called(op string, err error) {
	calls, failures := &c.Counts.Creates, &c.Counts.CreateFailures
	if op == "delete" {
		calls, failures = &c.Counts.Deletes, &c.Counts.DeleteFailures
	}
	calls.Add(1)
	if err != nil {
		failures.Add(1)
	}
}

// ObserveAdd counts an owned object's appearance in the cache against its
// owner's expectations.
func (c *ObjectControl) ObserveAdd(obj *kplanev1.Object) {
	key, ok := c.OwnerKey(obj)
	if !ok {
		return
	}
	if obj.Meta().GetDeletionTimestamp() != nil {
		// Seen for the first time already being deleted (e.g. after a
		// relist): that is the deletion the owner may be waiting for.
		c.Expectations.DeletionObserved(key, obj.Key())
		return
	}
	c.Expectations.CreationObserved(key)
}

// ObserveUpdate counts the start of a graceful deletion (the object stays
// until, e.g., its node agent is done, but for the owner it is gone now).
func (c *ObjectControl) ObserveUpdate(oldObj, newObj *kplanev1.Object) {
	key, ok := c.OwnerKey(newObj)
	if ok && newObj.Meta().GetDeletionTimestamp() != nil && oldObj.Meta().GetDeletionTimestamp() == nil {
		c.Expectations.DeletionObserved(key, newObj.Key())
	}
}

// ObserveDelete counts an owned object's deletion; obj is the informer's
// OnDelete argument (an object or a tombstone).
func (c *ObjectControl) ObserveDelete(obj any) {
	o, ok := informer.ObjectOf(obj)
	if !ok {
		return
	}
	if key, ok := c.OwnerKey(o); ok {
		c.Expectations.DeletionObserved(key, o.Key())
	}
}

// Handler is the informer handler for the owned kind (a ReplicaSet's or
// a Job's pods): each event is counted against its owner's expectations
// first, then every key ownersOf maps the object to (for an update, the
// old object's too, so an object that changed owner wakes both) is passed
// to enqueue once. The reconcile an event wakes therefore already sees its
// expectation met.
//
// With enqueueUpdate (nil: everything goes to enqueue), a controller whose
// owned objects change by the thousand (a ReplicaSet of 100,000 pods
// going Ready) gathers them into one reconcile with a delayed enqueue:
// updates go there, and so do creations and deletions for an owner that
// still expects more of its own. Only the event that meets an owner's
// expectations, or one it did not cause (nothing expected), wakes it at
// once. A burst of 500 creations then costs the owner one immediate
// reconcile when the last of them shows, not one per event seen before
// it, each of which could only have waited (and, at 100,000 pods, walked
// them all to say so).
func (c *ObjectControl) Handler(ownersOf func(*kplanev1.Object) []string, enqueue, enqueueUpdate func(key string)) informer.Handler {
	gather := enqueueUpdate != nil
	if !gather {
		enqueueUpdate = enqueue
	}
	wake := func(to func(string), objs ...*kplanev1.Object) {
		var keys []string
		for _, o := range objs {
			keys = append(keys, ownersOf(o)...)
		}
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			to(k)
		}
	}
	// now wakes an owner at once when its expectations are met (or
	// there are none), else gathers the event with the updates.
	now := func(key string) {
		if gather && !c.Expectations.Satisfied(key) {
			enqueueUpdate(key)
			return
		}
		enqueue(key)
	}
	return informer.Handler{
		OnAdd: func(o *kplanev1.Object) {
			c.ObserveAdd(o)
			wake(now, o)
		},
		OnUpdate: func(oldObj, newObj *kplanev1.Object) {
			c.ObserveUpdate(oldObj, newObj)
			wake(enqueueUpdate, newObj, oldObj)
		},
		OnDelete: func(obj any) {
			c.ObserveDelete(obj)
			if o, ok := informer.ObjectOf(obj); ok {
				wake(now, o)
			}
		},
	}
}

// SatisfiedAt reports whether the owner with key may act, as
// Expectations.SatisfiedAt does with the revision of cache (the informer
// of the owned kind): sample it before reading the cache. When a write
// of unknown outcome left no revision to wait for (see Create), it first
// reads one from the apiserver: a fresh list of the object's kind in its
// namespace, whose newest item the cache must have applied. That write was
// issued before this call, so the list shows it if it was committed; the
// owner is then not stuck until the expectations' TTL, which matters most
// for a controller that lost its lease mid-create and won it back in the
// same process. An error means that revision could not be read: retry.
func (c *ObjectControl) SatisfiedAt(ctx context.Context, key string, cache *informer.Informer) (bool, error) {
	rev, err := CacheRevision(cache)
	if err != nil {
		return false, err
	}
	exp := c.Expectations
	if exp.SatisfiedAt(key, rev) {
		return true, nil
	}
	kind, namespace, ok := exp.unresolved(key)
	if !ok {
		return false, nil
	}
	var newest int64
	_, err = client.ListPages(ctx, c.API, &kplanev1.ListRequest{Kind: kind, Namespace: namespace, Limit: 5000}, func(items []*kplanev1.Object) error {
		for _, o := range items {
			if rv := revisionOf(o, nil); rv > newest {
				newest = rv
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("expectations of %s: read the revision after a write of unknown outcome: %w", key, err)
	}
	// Nothing of that kind is left at all: any revision will do, the
	// cache's own one included.
	exp.resolve(key, max(newest, 1))
	rev, err = CacheRevision(cache)
	if err != nil {
		return false, err
	}
	return exp.SatisfiedAt(key, rev), nil
}

// revisionOf is the revision a successful write returned, 0 otherwise (0
// keeps the revision rule from releasing the owner early).
// unknownOutcomeWait bounds how long revisionAfterFailure retries; past it
// the expectation stays until its TTL.
const unknownOutcomeWait = 30 * time.Second

// revisionAfterFailure reads the apiserver's current revision for obj's
// kind (a one-item List), retrying while the apiserver is unreachable. 0
// when it cannot be read: the expectation then waits for its TTL.
func (c *ObjectControl) revisionAfterFailure(ctx context.Context, obj *kplanev1.Object) int64 {
	ctx, cancel := context.WithTimeout(ctx, unknownOutcomeWait)
	defer cancel()
	b := backoff.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 2 * time.Second}
	for attempt := 0; ; attempt++ {
		list, err := c.API.List(ctx, &kplanev1.ListRequest{Kind: obj.KindName(), Namespace: obj.Meta().GetNamespace(), Limit: 1})
		if err == nil {
			rev, perr := apiutil.ParseResourceVersion(list.GetResourceVersion())
			if perr != nil {
				return 0
			}
			return rev
		}
		if backoff.Sleep(ctx, b.Delay(attempt)) != nil {
			return 0
		}
	}
}

func revisionOf(obj *kplanev1.Object, err error) int64 {
	if err != nil || obj == nil {
		return 0
	}
	rv, perr := apiutil.ParseResourceVersion(obj.Meta().GetResourceVersion())
	if perr != nil {
		return 0
	}
	return rv
}

// CacheRevision is the revision an informer's cache has caught up to, for
// Expectations.SatisfiedAt; an unparsable revision is an error.
func CacheRevision(inf *informer.Informer) (int64, error) {
	rv, err := apiutil.ParseResourceVersion(inf.LastSyncResourceVersion())
	if err != nil {
		return 0, fmt.Errorf("%s informer: %w", inf.Kind(), err)
	}
	return rv, nil
}
