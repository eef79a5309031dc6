package controller

import (
	"sync"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// MutationCache remembers the objects a controller wrote until its
// informer's cache shows them, so a reconcile that runs before the watch
// event arrives reads its own writes instead of deciding on the state
// before them (client-go's tools/cache MutationCache plays the same role).
// A controller whose decision is not idempotent under a stale read (a
// CronJob's Forbid policy, which must see the Job it just started) passes
// each cached object through Newest and each written object to Wrote.
//
// Entries are dropped as soon as the cache is as new as the write, when
// the object was replaced by one of another uid, or by Forget.
type MutationCache struct {
	mu      sync.Mutex
	written map[string]*kplanev1.Object
}

// NewMutationCache returns an empty MutationCache.
func NewMutationCache() *MutationCache {
	return &MutationCache{written: map[string]*kplanev1.Object{}}
}

// Wrote records obj, the object an apiserver write returned.
func (m *MutationCache) Wrote(obj *kplanev1.Object) {
	if obj == nil || obj.Meta() == nil {
		return
	}
	key := obj.Key()
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.written[key]; ok && sameUID(prev, obj) && rv(prev) > rv(obj) {
		return // an older write's reply, returned late
	}
	m.written[key] = obj
}

// Newest returns cached, or the object this controller last wrote under
// cached's key when that is newer (same uid, higher resourceVersion).
func (m *MutationCache) Newest(cached *kplanev1.Object) *kplanev1.Object {
	if cached == nil || cached.Meta() == nil {
		return cached
	}
	key := cached.Key()
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.written[key]
	if !ok {
		return cached
	}
	if !sameUID(w, cached) || rv(cached) >= rv(w) {
		delete(m.written, key) // the cache has caught up, or it is another object now
		return cached
	}
	return w
}

// Forget drops what is remembered for key (the object left the cache).
func (m *MutationCache) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.written, key)
}

// Len is the number of writes not yet seen in the cache.
func (m *MutationCache) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.written)
}

func sameUID(a, b *kplanev1.Object) bool { return a.Meta().GetUid() == b.Meta().GetUid() }

// rv is the object's resourceVersion as a number; an unparsable one counts
// as oldest, so the cached object wins.
func rv(o *kplanev1.Object) int64 {
	n, err := apiutil.ParseResourceVersion(o.Meta().GetResourceVersion())
	if err != nil {
		return 0
	}
	return n
}
