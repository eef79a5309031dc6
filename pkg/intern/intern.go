// Package intern shares equal strings and string maps among the objects
// a large cache holds. The 100,000 pods of one ReplicaSet carry the same
// namespace, labels, owner and phase; decoded, each carries its own copy
// of every one of them, and the label map alone (a map of one entry is
// over 300 bytes) is a tenth of a trimmed pod. An informer's transform
// interns them, so that the cache holds one copy.
//
// Interned maps are shared by every object with the same content and must
// never be modified, which cached objects never are.
package intern

import (
	"slices"
	"sync"
	"unique"
)

// String returns the canonical copy of s: equal strings interned share
// one backing array (unique.Make), which the runtime frees once no
// interned copy is left.
func String(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// maxSets bounds every table: past it, a table starts over (values
// already handed out stay shared by the objects holding them), so a churn
// of distinct label sets cannot grow it without end.
const maxSets = 1 << 16

var mapTable = &table{}

// Table interns values that cannot be interned by content alone (a
// message built from a few fields, say), keyed by what makes them equal.
// Like Map's table it is bounded: past 65,536 keys it starts over. The
// zero value is ready to use; values are shared and must not be modified.
type Table[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

// Get returns the value interned under k, built by build the first time.
func (t *Table[K, V]) Get(k K, build func() V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.getLocked(k, build)
}

func (t *Table[K, V]) getLocked(k K, build func() V) V {
	if v, ok := t.m[k]; ok {
		return v
	}
	if t.m == nil {
		t.m = map[K]V{}
	}
	if len(t.m) >= maxSets {
		clear(t.m)
	}
	v := build()
	t.m[k] = v
	return v
}

// table holds one map per distinct content, keyed by AppendSetKey.
type table struct {
	sets Table[string, map[string]string]
	buf  []byte
}

// Map returns a map equal to m shared with every other interned map of the
// same content (keys and values interned too); nil for an empty m.
func Map(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return mapTable.get(m)
}

func (t *table) get(m map[string]string) map[string]string {
	t.sets.mu.Lock()
	defer t.sets.mu.Unlock()
	t.buf = AppendSetKey(t.buf[:0], m)
	if shared, ok := t.sets.m[string(t.buf)]; ok { // no allocation for the key
		return shared
	}
	return t.sets.getLocked(string(t.buf), func() map[string]string {
		shared := make(map[string]string, len(m))
		for k, v := range m {
			shared[String(k)] = String(v)
		}
		return shared
	})
}

// AppendSetKey appends to b the canonical key of the string map m: its
// pairs sorted by key, every string preceded by its length, so that two
// maps get the same key exactly when they hold the same pairs, whatever
// bytes the strings hold ("ab"+"c" and "a"+"bc" stay apart). An empty
// map's key is empty. A caller that reuses b and looks a map up by
// string(b) allocates nothing (the map interning here; the informer's
// tallies, which group objects by label set).
func AppendSetKey(b []byte, m map[string]string) []byte {
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		b = appendLen(b, len(k))
		b = append(b, k...)
		b = appendLen(b, len(v))
		b = append(b, v...)
	}
	return b
}

func appendLen(b []byte, n int) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}
