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

// table holds one map per distinct content, keyed by its sorted pairs.
type table struct {
	sets Table[string, map[string]string]
	buf  []byte
	keys []string
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
	t.keys = t.keys[:0]
	for k := range m {
		t.keys = append(t.keys, k)
	}
	slices.Sort(t.keys)
	// Lengths first, so that no two contents share a key whatever
	// bytes the strings hold.
	t.buf = t.buf[:0]
	for _, k := range t.keys {
		v := m[k]
		t.buf = appendLen(t.buf, len(k))
		t.buf = append(t.buf, k...)
		t.buf = appendLen(t.buf, len(v))
		t.buf = append(t.buf, v...)
	}
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

func appendLen(b []byte, n int) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}
