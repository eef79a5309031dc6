package watchcache

import (
	"slices"
	"strings"
	"sync"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Entry is one object of a List snapshot with its cache key.
type Entry struct {
	Key    string
	Object *kplanev1.Object
	wire   *wireForm
}

// Encoded is Object in protobuf wire form, marshalled once however many
// Lists and watchers send it (nil if it cannot be marshalled).
func (e Entry) Encoded() []byte {
	if e.wire == nil {
		return nil
	}
	return e.wire.get()
}

// ListSnapshot is the objects a List selected, sorted by key (etcd's
// order), as of Rev. Objects are shared: do not modify.
type ListSnapshot struct {
	Rev     int64
	Entries []Entry
}

// Select returns the current objects that prefix (a cache key prefix:
// "namespace/" or "" for all) and m select, sorted by key, and the
// revision they are at. Only the walk over the objects holds the lock;
// the sort runs after it, so a List of 100,000 objects delays the
// cache's feed by the walk alone.
func (c *Cache) Select(prefix string, m Matcher) *ListSnapshot {
	c.mu.RLock()
	out := make([]Entry, 0, len(c.state))
	for k, w := range c.state {
		if strings.HasPrefix(k, prefix) && m.Matches(w.obj) {
			out = append(out, Entry{Key: k, Object: w.obj, wire: w})
		}
	}
	rev := c.rev
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return &ListSnapshot{Rev: rev, Entries: out}
}

// Page returns up to limit entries (all when limit is 0) from the first
// key at or after start, and how many are left after them.
func (s *ListSnapshot) Page(start string, limit int64) (page []Entry, remaining int) {
	i, _ := slices.BinarySearchFunc(s.Entries, start, func(e Entry, k string) int { return strings.Compare(e.Key, k) })
	end := len(s.Entries)
	if limit > 0 && int64(end-i) > limit {
		end = i + int(limit)
	}
	return s.Entries[i:end], len(s.Entries) - end
}

// Snapshots keeps the snapshots of paginated Lists for their next pages,
// so every page of one List reads the same snapshot without going back
// to etcd. A snapshot is kept for ttl after its last page was served, at
// most max at once (the oldest used goes first): a snapshot pins the
// objects it holds, so it must not outlive the pagination that needs it.
// A continuation whose snapshot is gone is served from etcd at the
// snapshot's revision, as before.
type Snapshots struct {
	ttl time.Duration
	max int

	mu   sync.Mutex
	byID map[string]*keptSnapshot
}

type keptSnapshot struct {
	snap     *ListSnapshot
	lastUsed time.Time
}

// NewSnapshots keeps at most max snapshots, each for ttl after its last use.
func NewSnapshots(ttl time.Duration, max int) *Snapshots {
	return &Snapshots{ttl: ttl, max: max, byID: map[string]*keptSnapshot{}}
}

// Put keeps snap under id (the List's kind, namespace and selectors and
// the snapshot's revision).
func (s *Snapshots) Put(id string, snap *ListSnapshot, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	for len(s.byID) >= s.max {
		var oldest string
		var at time.Time
		for k, v := range s.byID {
			if oldest == "" || v.lastUsed.Before(at) {
				oldest, at = k, v.lastUsed
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[id] = &keptSnapshot{snap: snap, lastUsed: now}
}

// Get returns the snapshot kept under id, if any, and marks it used.
func (s *Snapshots) Get(id string, now time.Time) (*ListSnapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	k, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	k.lastUsed = now
	return k.snap, true
}

// Drop forgets the snapshot under id (its last page was served).
func (s *Snapshots) Drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// Len is how many snapshots are kept.
func (s *Snapshots) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func (s *Snapshots) expire(now time.Time) {
	for k, v := range s.byID {
		if now.Sub(v.lastUsed) > s.ttl {
			delete(s.byID, k)
		}
	}
}

// NewEntry is an entry for obj under key, as Select makes them (for
// snapshots built outside the cache: tests of their senders).
func NewEntry(key string, obj *kplanev1.Object) Entry {
	return Entry{Key: key, Object: obj, wire: newWireForm(obj)}
}
