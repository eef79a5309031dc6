// Package informer keeps a local, indexed cache of one kind of object in
// step with the apiserver and tells handlers about every change.
//
// An Informer lists the kind (page by page; the continue token keeps the
// first page's snapshot), then watches from the list's resourceVersion with
// bookmarks. It tracks the last resourceVersion seen in events and
// bookmarks; when the stream breaks (apiserver restart, network) it watches
// again from there, with capped, jittered exponential backoff, so no event
// is lost. When that revision was compacted (OutOfRange) it lists again and
// diffs the result against the cache, delivering synthetic adds, updates and
// deletes (a DeletedFinalStateUnknown for objects that vanished meanwhile),
// so that handlers see every final state. Events that are not newer than the
// cached object are ignored, so nothing is applied twice.
//
// A Factory shares one informer per kind and selection among the
// controllers of a process.
//
// A transform (Options.Transform, or SetTransform before Run) rewrites
// each object before it is stored, so a large cache can hold only the
// fields its users read.
package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Defaults for Options.
const (
	DefaultPageSize = 500
)

// DefaultBackoff paces re-watches and re-lists after failures.
var DefaultBackoff = client.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 15 * time.Second}

// Selection names what an informer caches: a kind, optionally narrowed to
// a namespace and by selectors in Kubernetes syntax.
type Selection struct {
	Kind          string
	Namespace     string
	LabelSelector string
	FieldSelector string
}

// String renders the selection for logs and map keys.
func (s Selection) String() string {
	out := s.Kind
	if s.Namespace != "" {
		out += " ns=" + s.Namespace
	}
	if s.LabelSelector != "" {
		out += " labels=" + s.LabelSelector
	}
	if s.FieldSelector != "" {
		out += " fields=" + s.FieldSelector
	}
	return out
}

// Options configure an Informer.
type Options struct {
	Selection
	// ResyncPeriod re-delivers every cached object as OnUpdate(obj, obj) this
	// often, the safety net of level-triggered controllers (0 = off).
	ResyncPeriod time.Duration
	// PageSize is the List page size (default 500).
	PageSize int64
	// Indexers are added to the store besides the namespace index.
	Indexers Indexers
	// Backoff paces retries after broken watches and failed lists
	// (default DefaultBackoff).
	Backoff client.Backoff
	// Logger (default: null logger).
	Logger hclog.Logger
	// Metrics (default: unregistered counters).
	Metrics *Metrics
	// Transform, when set, rewrites every object the informer receives
	// before it is stored and handed to handlers (see TransformFunc).
	Transform TransformFunc
}

// TransformFunc rewrites an object before an informer stores it, the
// model being client-go's SetTransform: typically it clears fields the
// cache's users never read (managedFields, say), so that a cache of
// 100,000 objects holds only what is needed. It is applied to list items
// and to the objects of ADDED, MODIFIED and DELETED events, on the
// informer's goroutine, so it should be cheap.
//
// It receives an object freshly decoded from the apiserver that nothing
// else holds yet, so it may change it in place and return it (or return
// another object). It must keep the kind, metadata.name, namespace, uid
// and resourceVersion, and return an object of the same kind; an object
// it returns nil for is stored as received. Every user of the informer
// sees the transformed objects, which, like all cached objects, are
// shared and must not be modified afterwards.
type TransformFunc func(*kplanev1.Object) *kplanev1.Object

// Informer caches one kind (and selection) and notifies handlers. Create
// it with New or a Factory, add handlers and indexers, then Run it.
type Informer struct {
	api   kplanev1.ResourcesClient
	opts  Options
	log   hclog.Logger
	store *Store
	m     *Metrics

	synced     chan struct{} // closed after the first list was applied
	syncedFlag atomic.Bool
	lastRV     atomic.Value // string

	// mu serialises cache changes with handler registration and resyncs, so
	// a new handler's synthetic adds and later notifications never overlap.
	mu        sync.Mutex
	listeners []*listener
	runCtx    context.Context
	started   bool
	stopped   bool
	wg        sync.WaitGroup
}

// New returns an informer for opts.Kind that reads through api (a
// *client.Client or any kplanev1.ResourcesClient).
func New(api kplanev1.ResourcesClient, opts Options) (*Informer, error) {
	if kplanev1.LookupKind(opts.Kind) == nil {
		return nil, fmt.Errorf("informer: %s", kplanev1.UnknownKindError(opts.Kind))
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Backoff.Duration <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Metrics == nil {
		m, err := NewMetrics(nil)
		if err != nil {
			return nil, err
		}
		opts.Metrics = m
	}
	inf := &Informer{
		api:    api,
		opts:   opts,
		log:    opts.Logger.Named("informer").With("kind", opts.Kind),
		store:  NewStore(opts.Indexers),
		m:      opts.Metrics,
		synced: make(chan struct{}),
	}
	inf.lastRV.Store("")
	return inf, nil
}

// Kind returns the kind the informer caches.
func (i *Informer) Kind() string { return i.opts.Kind }

// Selection returns what the informer caches.
func (i *Informer) Selection() Selection { return i.opts.Selection }

// Store returns the informer's cache. It is filled once HasSynced is true.
func (i *Informer) Store() *Store { return i.store }

// AddIndexers adds indexes to the cache (also after start).
func (i *Informer) AddIndexers(ix Indexers) error { return i.store.AddIndexers(ix) }

// SetTransform sets the informer's Transform. Like client-go's, it must
// be called before Run, so that every cached object went through it: it
// fails once the informer has started, and when it already has one (an
// informer shared through a Factory serves all its users one view, so
// two users with different needs must not silently overwrite each other).
func (i *Informer) SetTransform(fn TransformFunc) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return fmt.Errorf("informer %s: set a transform before it starts", i.opts.Selection)
	}
	if i.opts.Transform != nil {
		return fmt.Errorf("informer %s: already has a transform", i.opts.Selection)
	}
	i.opts.Transform = fn
	return nil
}

// transform applies opts.Transform to o, a freshly decoded object.
func (i *Informer) transform(o *kplanev1.Object) *kplanev1.Object {
	if i.opts.Transform == nil || o.Meta() == nil {
		return o
	}
	if out := i.opts.Transform(o); out != nil {
		return out
	}
	return o
}

// HasSynced reports whether the first list has been applied to the cache.
func (i *Informer) HasSynced() bool { return i.syncedFlag.Load() }

// Synced returns a channel closed once HasSynced is true.
func (i *Informer) Synced() <-chan struct{} { return i.synced }

// LastSyncResourceVersion returns the last resourceVersion the informer
// has seen (list, event or bookmark).
func (i *Informer) LastSyncResourceVersion() string { return i.lastRV.Load().(string) }

// AddEventHandler registers h. If the cache already holds objects, h first
// receives an OnAdd for each of them, then every later change. Handlers
// added after the informer stopped are never called.
func (i *Informer) AddEventHandler(h Handler) {
	i.mu.Lock()
	defer i.mu.Unlock()
	l := newListener(h)
	for _, o := range i.store.List() {
		l.push(notification{typ: notifyAdd, obj: o})
	}
	i.listeners = append(i.listeners, l)
	if i.started && !i.stopped {
		i.startListenerLocked(l)
	}
}

func (i *Informer) startListenerLocked(l *listener) {
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		l.run(i.runCtx)
	}()
}

// notifyLocked pushes n to every handler; callers hold i.mu.
func (i *Informer) notifyLocked(n notification) {
	for _, l := range i.listeners {
		l.push(n)
	}
}

// Run fills the cache and keeps it in step until ctx ends, then waits for
// its handler goroutines to exit. Run may be called once.
func (i *Informer) Run(ctx context.Context) error {
	i.mu.Lock()
	if i.started {
		i.mu.Unlock()
		return fmt.Errorf("informer %s: already started", i.opts.Selection)
	}
	i.started = true
	i.runCtx = ctx
	for _, l := range i.listeners {
		i.startListenerLocked(l)
	}
	if i.opts.ResyncPeriod > 0 {
		i.wg.Add(1)
		go func() {
			defer i.wg.Done()
			i.resyncLoop(ctx)
		}()
	}
	i.mu.Unlock()

	i.log.Debug("informer starting", "selection", i.opts.Selection.String())
	i.reflect(ctx)

	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	i.wg.Wait()
	i.log.Debug("informer stopped")
	return nil
}

// reflect is the list-and-watch loop.
func (i *Informer) reflect(ctx context.Context) {
	needList := true
	lists := 0
	failures := 0
	for ctx.Err() == nil {
		if needList {
			if lists > 0 {
				i.m.Relists.WithLabelValues(i.opts.Kind).Inc()
			}
			lists++
			if err := i.listAndReplace(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				d := i.opts.Backoff.Delay(failures)
				failures++
				i.log.Warn("list failed; retrying", "error", err, "retry_in", d)
				_ = client.Sleep(ctx, d)
				continue
			}
			needList = false
		}

		progressed, err := i.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			failures = 0
		}
		if client.IsOutOfRange(err) {
			// The revision we would resume from is gone: only a fresh list
			// can tell what changed meanwhile. The first relist is
			// immediate; repeated ones back off.
			i.log.Info("watch revision compacted; relisting", "resource_version", i.LastSyncResourceVersion(), "error", err)
			needList = true
			if failures > 0 {
				_ = client.Sleep(ctx, i.opts.Backoff.Delay(failures-1))
			}
			failures++
			continue
		}
		d := i.opts.Backoff.Delay(failures)
		failures++
		if err == nil || errors.Is(err, io.EOF) {
			i.log.Debug("watch closed by the server; resuming", "resource_version", i.LastSyncResourceVersion(), "retry_in", d)
		} else {
			i.log.Warn("watch broken; resuming", "resource_version", i.LastSyncResourceVersion(), "error", err, "retry_in", d)
		}
		i.m.WatchRestarts.WithLabelValues(i.opts.Kind).Inc()
		_ = client.Sleep(ctx, d)
	}
}

// listAndReplace lists the selection and makes the cache equal to the
// result, notifying handlers of the differences.
func (i *Informer) listAndReplace(ctx context.Context) error {
	listed := map[string]*kplanev1.Object{}
	var order []string
	rv, err := client.ListPages(ctx, i.api, &kplanev1.ListRequest{
		Kind: i.opts.Kind, Namespace: i.opts.Namespace,
		LabelSelector: i.opts.LabelSelector, FieldSelector: i.opts.FieldSelector,
		Limit: i.opts.PageSize,
	}, func(items []*kplanev1.Object) error {
		for _, o := range items {
			o = i.transform(o)
			k := o.Key()
			if _, dup := listed[k]; !dup {
				order = append(order, k)
			}
			listed[k] = o
		}
		return nil
	})
	if err != nil {
		return err
	}

	i.mu.Lock()
	defer i.mu.Unlock()
	adds, updates, deletes := 0, 0, 0
	for _, k := range order {
		o := listed[k]
		old, ok := i.store.Get(k)
		switch {
		case !ok:
			i.store.put(k, o)
			i.notifyLocked(notification{typ: notifyAdd, obj: o})
			adds++
		case old.Meta().GetResourceVersion() != o.Meta().GetResourceVersion():
			i.store.put(k, o)
			i.notifyLocked(notification{typ: notifyUpdate, old: old, obj: o})
			updates++
		}
	}
	for _, k := range i.store.ListKeys() {
		if _, ok := listed[k]; ok {
			continue
		}
		old, _ := i.store.Get(k)
		i.store.remove(k)
		i.notifyLocked(notification{typ: notifyDelete, deleted: DeletedFinalStateUnknown{Key: k, Obj: old}})
		deletes++
	}
	i.lastRV.Store(rv)
	if !i.syncedFlag.Load() {
		i.syncedFlag.Store(true)
		close(i.synced)
	}
	i.log.Debug("listed", "resource_version", rv, "objects", len(listed), "adds", adds, "updates", updates, "deletes", deletes)
	return nil
}

// watch streams changes from the last seen revision until the stream ends.
// progressed reports whether any event arrived, which resets the backoff.
func (i *Informer) watch(ctx context.Context) (progressed bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := i.api.Watch(wctx, &kplanev1.WatchRequest{
		Kind: i.opts.Kind, Namespace: i.opts.Namespace,
		LabelSelector: i.opts.LabelSelector, FieldSelector: i.opts.FieldSelector,
		ResourceVersion: i.LastSyncResourceVersion(), AllowBookmarks: true,
	})
	if err != nil {
		return false, fmt.Errorf("watch %s: %w", i.opts.Kind, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return progressed, err
		}
		progressed = true
		i.m.Events.WithLabelValues(i.opts.Kind, eventTypeLabel(resp.GetType())).Inc()
		if resp.GetType() == kplanev1.EventType_EVENT_TYPE_ERROR {
			return progressed, client.WatchEventError(resp)
		}
		i.apply(resp)
	}
}

func eventTypeLabel(t kplanev1.EventType) string {
	switch t {
	case kplanev1.EventType_EVENT_TYPE_ADDED:
		return "added"
	case kplanev1.EventType_EVENT_TYPE_MODIFIED:
		return "modified"
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		return "deleted"
	case kplanev1.EventType_EVENT_TYPE_BOOKMARK:
		return "bookmark"
	case kplanev1.EventType_EVENT_TYPE_ERROR:
		return "error"
	}
	return "unknown"
}

// apply applies one watch event to the cache and notifies handlers.
func (i *Informer) apply(resp *kplanev1.WatchResponse) {
	eventRV := resp.GetResourceVersion()
	i.mu.Lock()
	defer i.mu.Unlock()
	if resp.GetType() != kplanev1.EventType_EVENT_TYPE_BOOKMARK && olderThan(eventRV, i.LastSyncResourceVersion()) {
		// A replay from before what we have already seen; its effect (or a
		// later one) is in the cache. This matters for objects no longer in
		// the cache, which the per-object check below cannot protect.
		return
	}
	switch resp.GetType() {
	case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
		o := i.transform(resp.GetObject())
		if o.Meta() == nil {
			i.log.Warn("watch event without an object; ignored", "type", resp.GetType())
			break
		}
		if eventRV == "" {
			eventRV = o.Meta().GetResourceVersion()
		}
		k := o.Key()
		old, ok := i.store.Get(k)
		if ok && !newer(o.Meta().GetResourceVersion(), old.Meta().GetResourceVersion()) {
			// Already applied (e.g. replayed after a re-watch): skip.
			break
		}
		i.store.put(k, o)
		i.advanceLocked(eventRV)
		if ok {
			i.notifyLocked(notification{typ: notifyUpdate, old: old, obj: o})
		} else {
			i.notifyLocked(notification{typ: notifyAdd, obj: o})
		}
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		o := i.transform(resp.GetObject())
		if o.Meta() == nil {
			i.log.Warn("delete event without an object; ignored")
			break
		}
		k := o.Key()
		old, ok := i.store.Get(k)
		if !ok {
			break
		}
		// The deleted object carries its last write's revision; the event
		// carries the deletion's. A deletion older than what we cached (the
		// object was re-created since) must not remove the new object.
		delRV := eventRV
		if delRV == "" {
			delRV = o.Meta().GetResourceVersion()
		}
		if newer(old.Meta().GetResourceVersion(), delRV) {
			break
		}
		i.store.remove(k)
		i.advanceLocked(eventRV)
		i.notifyLocked(notification{typ: notifyDelete, deleted: o})
	case kplanev1.EventType_EVENT_TYPE_BOOKMARK:
		// Only the revision moves.
	}
	i.advanceLocked(eventRV)
}

// advanceLocked moves LastSyncResourceVersion forward to rv. apply calls it
// before notifying handlers, so a handler (or the reconcile it wakes) that
// asks how far the cache has caught up already sees this event counted:
// otherwise a controller waiting for its own write to reach the cache could
// read the store with the write in it and still be told it is not there.
func (i *Informer) advanceLocked(rv string) {
	if rv != "" && newer(rv, i.LastSyncResourceVersion()) {
		i.lastRV.Store(rv)
	}
}

// newer reports whether resourceVersion a is after b. Versions are etcd
// revisions in decimal; anything unparsable counts as newer when different,
// so that a surprising server never freezes the cache.
func newer(a, b string) bool {
	ai, errA := strconv.ParseInt(a, 10, 64)
	bi, errB := strconv.ParseInt(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return ai > bi
}

// olderThan reports whether a and b are both revisions and a < b.
func olderThan(a, b string) bool {
	ai, errA := strconv.ParseInt(a, 10, 64)
	bi, errB := strconv.ParseInt(b, 10, 64)
	return errA == nil && errB == nil && ai < bi
}

// resyncLoop re-delivers the cache every ResyncPeriod.
func (i *Informer) resyncLoop(ctx context.Context) {
	t := time.NewTicker(i.opts.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !i.HasSynced() {
			continue
		}
		i.mu.Lock()
		for _, o := range i.store.List() {
			i.notifyLocked(notification{typ: notifyUpdate, old: o, obj: o})
		}
		i.mu.Unlock()
	}
}

// WaitForCacheSync waits until every informer has synced, returning false
// if ctx ends first.
func WaitForCacheSync(ctx context.Context, informers ...*Informer) bool {
	for _, inf := range informers {
		select {
		case <-inf.Synced():
		case <-ctx.Done():
			return false
		}
	}
	return true
}
