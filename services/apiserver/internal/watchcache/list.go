package watchcache

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Entry is one object of a List snapshot with its cache key.
type Entry struct {
	Key string
	e   *entry
	// obj is the object an entry made by NewEntry was made from.
	obj *kplanev1.Object
}

// Encoded is the object in protobuf wire form, marshalled once however
// many Lists and watchers send it (nil if it cannot be marshalled).
func (e Entry) Encoded() []byte {
	if e.e == nil {
		return nil
	}
	return e.e.b
}

// Object is the object, decoded from its wire form: a private copy for
// a caller that needs the message (an in-process List); a List sent
// over gRPC sends Encoded instead.
func (e Entry) Object() (*kplanev1.Object, error) {
	if e.obj != nil {
		return e.obj, nil
	}
	if e.e == nil {
		return nil, fmt.Errorf("list entry %s has no object", e.Key)
	}
	return e.e.decode()
}

// ListSnapshot is the objects a List selected, sorted by key (etcd's
// order), as of Rev.
type ListSnapshot struct {
	Rev     int64
	Entries []Entry
}

// Select returns the current objects that prefix (a cache key prefix:
// "namespace/" or "" for all) and m select, sorted by key, and the
// revision they are at. Only the walk over the entries holds the lock;
// the objects m cannot judge by their attributes are decoded and
// matched, and the result sorted, after it, so a List of 100,000
// objects delays the cache's feed by the walk alone.
func (c *Cache) Select(prefix string, m Matcher) *ListSnapshot {
	c.mu.RLock()
	out, undecided := c.selectLocked(prefix, m)
	rev := c.rev
	c.mu.RUnlock()
	for _, e := range undecided {
		if matchEntry(m, e, decodeOrNil(e)) {
			out = append(out, e)
		}
	}
	entries := make([]Entry, len(out))
	for i, e := range out {
		entries[i] = Entry{Key: e.key, e: e}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return &ListSnapshot{Rev: rev, Entries: entries}
}

// selectLocked walks the state for the entries under prefix that m
// selects by their attributes, and those it cannot judge without the
// decoded object. Callers hold mu.
func (c *Cache) selectLocked(prefix string, m Matcher) (selected, undecided []*entry) {
	am, byAttrs := m.(AttrMatcher)
	selected = make([]*entry, 0, len(c.state))
	for k, e := range c.state {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if byAttrs {
			if match, decided := am.MatchesAttributes(e); decided {
				if match {
					selected = append(selected, e)
				}
				continue
			}
		}
		undecided = append(undecided, e)
	}
	return selected, undecided
}

// decodeOrNil is e's decode for matchEntry: nil when it fails (the
// object then matches nothing; the cache made the bytes, so it does not).
func decodeOrNil(e *entry) func() *kplanev1.Object {
	return func() *kplanev1.Object {
		obj, err := e.decode()
		if err != nil {
			return nil
		}
		return obj
	}
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
	out := Entry{Key: key, obj: obj}
	if e, err := newEntry(key, obj, 0); err == nil {
		out.e = e
	}
	return out
}
