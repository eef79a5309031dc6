// Package watchcache keeps, per kind, one etcd watch and fans it out to
// every client watcher: the current objects (for a watch's initial
// events) and a ring of recent events (for resuming from a revision). A
// watcher reads the ring at its own pace; one that falls a whole ring
// behind is cut off alone, never slowing the others.
package watchcache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
)

// Event is one change of one object, as the cache observed it in etcd.
// The ring of recent events keeps an ADDED or MODIFIED object as its
// state entry (wire form and attributes), not decoded: 10,000 decoded
// pods were a third of the apiserver's heap at 85,000 pods, all pointers
// the garbage collector walked on every cycle, for watchers that mostly
// send the bytes. A watcher that needs the object decodes its own copy.
type Event struct {
	Type kplanev1.EventType
	Rev  int64

	// cur is the state after an ADDED or MODIFIED change (nil for
	// DELETED): the entry the cache's state holds.
	cur *entry
	// obj is a DELETED event's object: the last state stamped with the
	// deletion's revision, and wire its wire form.
	obj  *kplanev1.Object
	wire *wireForm

	// prev is the state before the change; nil for ADDED. It is the
	// state's entry (bytes and attributes), decoded only when a watcher's
	// filter needs more than the attributes.
	prev     *entry
	prevOnce sync.Once
	prevObj  *kplanev1.Object
}

// Encoded is the object in protobuf wire form, marshalled once however
// many watchers (and Lists) send it.
func (e *Event) Encoded() []byte {
	if e.wire != nil {
		return e.wire.get()
	}
	return e.cur.b
}

// Object is the state after the change: for ADDED and MODIFIED a private
// copy decoded on each call, for DELETED the last state, shared by every
// watcher (do not modify).
func (e *Event) Object() (*kplanev1.Object, error) {
	if e.cur == nil {
		return e.obj, nil
	}
	return e.cur.decode()
}

// Prev is the state before the change (nil for ADDED), decoded on first
// use and then shared by every watcher: do not modify.
func (e *Event) Prev() *kplanev1.Object {
	if e.prev == nil {
		return nil
	}
	e.prevOnce.Do(func() { e.prevObj, _ = e.prev.decode() })
	return e.prevObj
}

// wireForm is an object version with its protobuf wire form, marshalled
// at most once, on first use: every watcher sends the same bytes, and an
// object nobody sends costs no encoding.
type wireForm struct {
	obj  *kplanev1.Object
	once sync.Once
	b    []byte
}

func newWireForm(obj *kplanev1.Object) *wireForm { return &wireForm{obj: obj} }

// get returns the wire form; nil if the object cannot be marshalled
// (senders then marshal it themselves and report the error).
func (w *wireForm) get() []byte {
	w.once.Do(func() {
		b, err := proto.Marshal(w.obj)
		if err == nil {
			w.b = b
		}
	})
	return w.b
}

// entry is one current object as the state keeps it: its wire form
// (resourceVersion set) and what selectors read, not the decoded object.
// A decoded object is several times the size of its bytes and full of
// pointers the garbage collector walks on every cycle; with 100,000 pods
// the decoded state was most of the apiserver's heap. Entries are never
// modified: a change replaces the entry.
type entry struct {
	key    string // the cache key: "namespace/name", or "name"
	rev    int64  // the object's resourceVersion
	b      []byte
	labels map[string]string
	// fields holds the values of table's paths, in its order.
	table  *fieldTable
	fields []string
}

// decodes counts entry decodes, for tests that a selection needing
// only attributes decodes nothing.
var decodes atomic.Int64

// decode returns a private copy of the object.
func (e *entry) decode() (*kplanev1.Object, error) {
	decodes.Add(1)
	obj := &kplanev1.Object{}
	if err := proto.Unmarshal(e.b, obj); err != nil {
		return nil, fmt.Errorf("decode cached %s: %w", e.key, err)
	}
	return obj, nil
}

// Namespace implements store.Attributes.
func (e *entry) Namespace() string {
	if ns, _, ok := strings.Cut(e.key, "/"); ok {
		return ns
	}
	return ""
}

// Labels implements store.Attributes.
func (e *entry) Labels() map[string]string { return e.labels }

// Field implements store.Attributes: metadata.name and
// metadata.namespace come from the key, the kind's precomputed fields
// from the entry; any other field needs the decoded object.
func (e *entry) Field(path string) (string, bool) {
	switch path {
	case "metadata.namespace":
		return e.Namespace(), true
	case "metadata.name":
		if _, name, ok := strings.Cut(e.key, "/"); ok {
			return name, true
		}
		return e.key, true
	}
	if e.table != nil {
		for i, p := range e.table.paths {
			if p == path {
				return e.fields[i], true
			}
		}
	}
	return "", false
}

// fieldTable is the field selector paths a kind's entries precompute:
// those its clients select on all the time, so such a selection decodes
// nothing. Each is a dotted path of JSON field names ending at a string
// field (wireKinds resolves them); its value is rendered as pkg/fields
// renders it (both are strings, so as stored).
type fieldTable struct {
	paths []string
}

// precomputed is the fields precomputed per kind. Every node agent
// watches its pods by spec.nodeName; status.phase is the other pod field
// clients (and Kubernetes' own) select on.
var precomputed = map[string]*fieldTable{
	"Pod": {paths: []string{"spec.nodeName", "status.phase"}},
}

// newEntry keeps obj (its resourceVersion set) under key as an entry;
// obj itself is not kept.
func newEntry(key string, obj *kplanev1.Object, rev int64) (*entry, error) {
	b, err := proto.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", key, err)
	}
	return entryFromWire(key, b, rev)
}

// matchEntry reports whether m selects e: from its attributes when m
// can decide from them, else from the decoded object (obj, which decodes
// it, or returns a copy already decoded).
func matchEntry(m Matcher, e *entry, obj func() *kplanev1.Object) bool {
	if am, ok := m.(AttrMatcher); ok {
		if match, decided := am.MatchesAttributes(e); decided {
			return match
		}
	}
	o := obj()
	return o != nil && m.Matches(o)
}

// Config configures one kind's cache.
type Config struct {
	Kind   *kplanev1.KindInfo
	Client *clientv3.Client
	// Capacity is how many events the ring keeps: the history a watcher
	// can resume from, and how far a watcher may lag before it is cut.
	Capacity int
	// ProgressInterval is how often the cache asks etcd for its current
	// revision, so bookmarks advance while the kind is quiet.
	ProgressInterval time.Duration
	// History is how many etcd revisions before the current one the cache
	// replays when it loads, if etcd still has them: a client that watched
	// another apiserver (or this one before a restart) then resumes here
	// from its last resourceVersion instead of having to list again.
	// 0 loads the current state only.
	History int64
	Logger  hclog.Logger
}

// Cache is one kind's watch cache. Run feeds it; Watch serves from it.
type Cache struct {
	cfg Config
	log hclog.Logger

	mu sync.RWMutex
	// state is every current object, as an entry (its wire form and
	// what selectors read), by cache key, as of rev.
	state map[string]*entry
	rev   int64
	// ring holds events by sequence number seq at ring[seq%len(ring)];
	// next is the sequence number the next event gets.
	ring []*Event
	next uint64
	// windowStart is the oldest revision a watch may resume from: every
	// event after it is in the ring.
	windowStart int64
	// epoch changes when the cache reloads from scratch; watchers of an
	// older epoch must relist.
	epoch  uint64
	notify chan struct{}
	ready  chan struct{}
	// progressNow asks the follow loop for an etcd progress notification
	// at once (a reader waits for the cache to reach a revision).
	progressNow chan struct{}
	loaded      bool
	// readyAt is the revision the first load must reach (after replaying
	// history) before Ready closes; readyClosed records that it has.
	readyAt     int64
	readyClosed bool
}

// New returns a cache; call Run to fill it.
func New(cfg Config) *Cache {
	if cfg.Capacity <= 0 {
		cfg.Capacity = 10000
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Cache{
		cfg:         cfg,
		log:         cfg.Logger.With("kind", cfg.Kind.Name),
		state:       map[string]*entry{},
		ring:        make([]*Event, cfg.Capacity),
		notify:      make(chan struct{}),
		ready:       make(chan struct{}),
		progressNow: make(chan struct{}, 1),
	}
}

// Ready is closed once the cache has loaded the kind for the first time.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Revision is the etcd revision the cache has caught up to.
func (c *Cache) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// WaitForRevision blocks until the cache has caught up to rev (every
// change up to rev applied), so a read from the cache shows every write
// etcd acknowledged before rev was read.
func (c *Cache) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		c.mu.RLock()
		at, notify := c.rev, c.notify
		c.mu.RUnlock()
		if at >= rev {
			return nil
		}
		select {
		case c.progressNow <- struct{}{}:
		default: // a request is already pending
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch cache at revision %d, waiting for %d: %w", at, rev, ctx.Err())
		case <-notify:
		}
	}
}

// Compacted tells the cache that etcd history up to rev is gone, so
// watches from older revisions must fail as they would against etcd.
func (c *Cache) Compacted(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.windowStart {
		c.windowStart = rev
	}
}

// Snapshot returns the current objects (private copies, decoded after
// the lock is released) and the revision they are at.
func (c *Cache) Snapshot() ([]*kplanev1.Object, int64) {
	c.mu.RLock()
	entries := make([]*entry, 0, len(c.state))
	for _, e := range c.state {
		entries = append(entries, e)
	}
	rev := c.rev
	c.mu.RUnlock()
	out := make([]*kplanev1.Object, 0, len(entries))
	for _, e := range entries {
		obj, err := e.decode()
		if err != nil {
			c.log.Error("skipping undecodable cached object", "key", e.key, "error", err)
			continue
		}
		out = append(out, obj)
	}
	return out, rev
}

// Get returns the current object under cache key ("namespace/name", or
// "name" for a cluster-scoped kind), a private copy. It is the cheap
// read for checks made on every request (token liveness).
func (c *Cache) Get(key string) (*kplanev1.Object, bool) { return c.getAt(key, anyRev) }

// GetAt is Get when the object under key is cached at exactly revision
// rev, and false otherwise; only a match is decoded (the conditional
// update's starting point, which needs that exact revision).
func (c *Cache) GetAt(key string, rev int64) (*kplanev1.Object, bool) { return c.getAt(key, rev) }

// anyRev asks getAt for the object at whatever revision it is cached.
const anyRev = -1

func (c *Cache) getAt(key string, rev int64) (*kplanev1.Object, bool) {
	c.mu.RLock()
	e, ok := c.state[key]
	c.mu.RUnlock()
	if !ok || (rev != anyRev && e.rev != rev) {
		return nil, false
	}
	obj, err := e.decode()
	if err != nil {
		c.log.Error("cached object undecodable", "key", key, "error", err)
		return nil, false
	}
	return obj, true
}

// Has reports whether an object is cached under key, without decoding
// it (an existence check).
func (c *Cache) Has(key string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.state[key]
	return ok
}

// Run loads the kind and follows etcd until ctx is cancelled. A broken
// etcd watch resumes from the last revision; a compacted one reloads.
func (c *Cache) Run(ctx context.Context) {
	pace := client.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second}
	failures := 0
	for ctx.Err() == nil {
		backoff := pace.Delay(failures)
		if !c.isLoaded() {
			if err := c.load(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				c.log.Warn("loading watch cache failed; retrying", "error", err, "backoff", backoff)
				if client.Sleep(ctx, backoff) != nil {
					return
				}
				failures++
				continue
			}
		}
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errCompacted) {
			c.log.Warn("etcd history compacted under the watch cache; reloading", "revision", c.Revision())
			c.mu.Lock()
			c.loaded = false
			c.mu.Unlock()
			continue
		}
		c.log.Warn("etcd watch broke; resuming", "error", err, "revision", c.Revision(), "backoff", backoff)
		if client.Sleep(ctx, backoff) != nil {
			return
		}
		failures++
	}
}

func (c *Cache) isLoaded() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.loaded
}

var errCompacted = errors.New("watch revision compacted")

// load replaces the state with a fresh read of etcd. Watchers of the old
// state are cut (the epoch changes) because events between the old and
// the new state are unknown.
func (c *Cache) load(ctx context.Context) error {
	prefix := store.KindPrefix(c.cfg.Kind)
	resp, err := c.cfg.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	target := resp.Header.Revision
	at := target
	if old, rev := c.historyStart(ctx, prefix, target); old != nil {
		resp, at = old, rev
	}
	state := make(map[string]*entry, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key := store.CacheKeyFromStorageKey(c.cfg.Kind, string(kv.Key))
		e, err := storedEntry(key, kv.Value, kv.ModRevision)
		if err != nil {
			c.log.Error("skipping undecodable object", "key", string(kv.Key), "error", err)
			continue
		}
		state[key] = e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = state
	c.rev = at
	c.windowStart = at
	clear(c.ring)
	c.next = 0
	c.epoch++
	c.loaded = true
	if c.readyAt == 0 {
		c.readyAt = target
	}
	c.markReady()
	c.broadcast()
	c.log.Debug("watch cache loaded", "objects", len(state), "revision", c.rev, "replaying_to", target)
	return nil
}

// markReady closes Ready once the first load has caught up to the
// revision it was made at. Callers hold mu.
func (c *Cache) markReady() {
	if !c.readyClosed && c.rev >= c.readyAt {
		c.readyClosed = true
		close(c.ready)
	}
}

// historyStart reads the kind as it was up to History revisions before
// target, so the watch that follows replays the changes since into the
// ring. When etcd compacted that far it tries nearer revisions; it
// returns nil when there is no history to replay.
func (c *Cache) historyStart(ctx context.Context, prefix string, target int64) (*clientv3.GetResponse, int64) {
	back := c.cfg.History
	if back > target-1 {
		back = target - 1
	}
	for tries := 0; tries < 4 && back > 0; tries++ {
		rev := target - back
		resp, err := c.cfg.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err == nil {
			return resp, rev
		}
		if !errors.Is(err, rpctypes.ErrCompacted) && !errors.Is(err, rpctypes.ErrGRPCCompacted) {
			c.log.Debug("reading history for the watch cache failed; loading the current state only", "error", err)
			return nil, 0
		}
		back /= 4
	}
	return nil, 0
}

// follow applies etcd's watch stream to the cache until it breaks.
func (c *Cache) follow(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	from := c.Revision() + 1
	wch := c.cfg.Client.Watch(wctx, store.KindPrefix(c.cfg.Kind),
		clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	requestProgress := func() {
		if err := c.cfg.Client.RequestProgress(wctx); err != nil && ctx.Err() == nil {
			c.log.Debug("progress request failed", "error", err)
		}
	}
	ticker := time.NewTicker(c.cfg.ProgressInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			// Quiet kinds still move their revision forward (bookmarks
			// depend on it).
			requestProgress()
		case <-c.progressNow:
			requestProgress()
		case resp, ok := <-wch:
			if !ok {
				return errors.New("etcd watch channel closed")
			}
			if resp.CompactRevision != 0 {
				return errCompacted
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("etcd watch: %w", err)
			}
			c.apply(resp)
		}
	}
}

// storedEntry is the entry under key for a stored value written at rev,
// made without decoding it: its wire form is the value with the revision
// spliced in (store.WithRevision), its attributes are read from those
// bytes (entryFromWire).
func storedEntry(key string, value []byte, rev int64) (*entry, error) {
	b, err := store.WithRevision(value, rev)
	if err != nil {
		return nil, err
	}
	return entryFromWire(key, b, rev)
}

func (c *Cache) apply(resp clientv3.WatchResponse) {
	events := make([]*Event, 0, len(resp.Events))
	keys := make([]string, len(resp.Events))
	entries := make([]*entry, len(resp.Events))
	// Decode and encode outside the lock; watchers keep reading meanwhile.
	for i, ev := range resp.Events {
		keys[i] = store.CacheKeyFromStorageKey(c.cfg.Kind, string(ev.Kv.Key))
		if ev.Type == mvccpb.PUT {
			e, err := storedEntry(keys[i], ev.Kv.Value, ev.Kv.ModRevision)
			if err != nil {
				c.log.Error("skipping undecodable object", "key", string(ev.Kv.Key), "error", err)
				continue
			}
			entries[i] = e
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ev := range resp.Events {
		key := keys[i]
		prev := c.state[key]
		var e *Event
		switch ev.Type {
		case mvccpb.PUT:
			if entries[i] == nil {
				continue
			}
			t := kplanev1.EventType_EVENT_TYPE_MODIFIED
			if prev == nil {
				t = kplanev1.EventType_EVENT_TYPE_ADDED
			}
			c.state[key] = entries[i]
			e = &Event{Type: t, cur: entries[i], prev: prev, Rev: ev.Kv.ModRevision}
		case mvccpb.DELETE:
			if prev == nil {
				continue // never seen (undecodable); nothing to report
			}
			delete(c.state, key)
			last, err := prev.decode()
			if err != nil {
				c.log.Error("deleted object's last state undecodable; not reported", "key", key, "error", err)
				continue
			}
			last.Meta().ResourceVersion = store.FormatRevision(ev.Kv.ModRevision)
			e = &Event{Type: kplanev1.EventType_EVENT_TYPE_DELETED, obj: last, prev: prev, Rev: ev.Kv.ModRevision, wire: newWireForm(last)}
		}
		events = append(events, e)
		c.append(e)
		c.rev = e.Rev
	}
	if resp.IsProgressNotify() && resp.Header.Revision > c.rev {
		c.rev = resp.Header.Revision
	}
	c.markReady()
	if len(events) > 0 || resp.IsProgressNotify() {
		c.broadcast()
	}
}

// append adds an event to the ring; overwriting the oldest event moves
// the window past it. Callers hold mu.
func (c *Cache) append(e *Event) {
	slot := c.next % uint64(len(c.ring))
	if old := c.ring[slot]; old != nil && old.Rev > c.windowStart {
		c.windowStart = old.Rev
	}
	c.ring[slot] = e
	c.next++
}

// broadcast wakes every waiting watcher. Callers hold mu.
func (c *Cache) broadcast() {
	close(c.notify)
	c.notify = make(chan struct{})
}

// oldest is the sequence number of the oldest event in the ring.
func (c *Cache) oldest() uint64 {
	if c.next > uint64(len(c.ring)) {
		return c.next - uint64(len(c.ring))
	}
	return 0
}

// seqAfter finds the first sequence number whose event is newer than rev.
// Callers hold mu.
func (c *Cache) seqAfter(rev int64) uint64 {
	lo := c.oldest()
	n := int(c.next - lo)
	i := sort.Search(n, func(i int) bool {
		return c.ring[(lo+uint64(i))%uint64(len(c.ring))].Rev > rev
	})
	return lo + uint64(i)
}

// errTooSlow and friends are the statuses a watch ends with.
func errTooOld(rev, window int64) error {
	return status.Errorf(codes.OutOfRange, "too old resource version: %d (the oldest available is %d); list again and watch from the list's resourceVersion", rev, window)
}
