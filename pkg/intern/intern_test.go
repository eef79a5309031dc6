package intern

import (
	"fmt"
	"maps"
	"reflect"
	"sync"
	"testing"
	"unsafe"
)

func TestString(t *testing.T) {
	a, b := String(string([]byte("default"))), String(string([]byte("default")))
	if a != "default" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("two interned copies of one string do not share their bytes")
	}
	if String("") != "" {
		t.Fatal("the empty string changed")
	}
}

// Equal contents share one map, different ones do not, whatever the
// order of insertion; keys and values that would run together in a plain
// concatenation ("ab"+"c" against "a"+"bc") stay apart.
func TestMap(t *testing.T) {
	if Map(nil) != nil || Map(map[string]string{}) != nil {
		t.Fatal("an empty map did not intern to nil")
	}
	a := Map(map[string]string{"app": "web", "tier": "front"})
	b := Map(map[string]string{"tier": "front", "app": "web"})
	if reflect.ValueOf(a).UnsafePointer() != reflect.ValueOf(b).UnsafePointer() {
		t.Fatal("equal label sets got different maps")
	}
	if !maps.Equal(a, map[string]string{"app": "web", "tier": "front"}) {
		t.Fatalf("interned map %v differs from its content", a)
	}
	for _, pair := range [][2]map[string]string{
		{{"ab": "c"}, {"a": "bc"}},
		{{"a": "b", "c": "d"}, {"a": "b"}},
		{{"a": ""}, {"a": "x"}},
	} {
		x, y := Map(pair[0]), Map(pair[1])
		if !maps.Equal(x, pair[0]) || !maps.Equal(y, pair[1]) {
			t.Errorf("%v and %v interned as %v and %v", pair[0], pair[1], x, y)
		}
	}
}

// Past maxSets distinct contents the table starts over, so it stays
// bounded; what it hands out is still right.
func TestMapBounded(t *testing.T) {
	for i := range maxSets + 10 {
		m := map[string]string{"i": fmt.Sprint(i)}
		if got := Map(m); !maps.Equal(got, m) {
			t.Fatalf("set %d interned as %v", i, got)
		}
	}
	mapTable.sets.mu.Lock()
	n := len(mapTable.sets.m)
	mapTable.sets.mu.Unlock()
	if n > maxSets {
		t.Fatalf("the table holds %d sets, more than %d", n, maxSets)
	}
}

// Informers of several kinds intern at once.
func TestMapConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				m := map[string]string{"app": fmt.Sprint(i % 7), "g": fmt.Sprint(g % 2)}
				if got := Map(m); !maps.Equal(got, m) {
					t.Errorf("interned %v as %v", m, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A Table builds a value once per key and hands out that value after,
// and stays bounded.
func TestTable(t *testing.T) {
	var tab Table[string, *int]
	built := 0
	build := func() *int { built++; v := built; return &v }
	a, b := tab.Get("k", build), tab.Get("k", build)
	if a != b || built != 1 {
		t.Fatalf("two Gets of one key built %d values (same pointer: %v)", built, a == b)
	}
	if c := tab.Get("other", build); c == a || built != 2 {
		t.Fatal("another key shared the first key's value")
	}
	for i := range maxSets + 5 {
		tab.Get(fmt.Sprint(i), build)
	}
	if len(tab.m) > maxSets {
		t.Fatalf("the table holds %d keys, more than %d", len(tab.m), maxSets)
	}
}

// Two maps share a key exactly when they hold the same pairs, whatever
// their order or size; appending reuses the buffer without allocating.
func TestAppendSetKey(t *testing.T) {
	key := func(m map[string]string) string { return string(AppendSetKey(nil, m)) }
	big, bigToo := map[string]string{}, map[string]string{}
	for i := range 20 { // more keys than AppendSetKey sorts in place
		big[fmt.Sprint("k", i)] = "v"
		bigToo[fmt.Sprint("k", 19-i)] = "v"
	}
	if key(map[string]string{"app": "web", "tier": "front"}) != key(map[string]string{"tier": "front", "app": "web"}) || key(big) != key(bigToo) {
		t.Error("equal sets got different keys")
	}
	sets := []map[string]string{nil, {"": ""}, {"ab": "c"}, {"a": "bc"}, {"a": "b=c"}, {"a=b": "c"}, {"a": "b", "c": "d"}, {"a": "b"}, big}
	seen := map[string]int{}
	for i, m := range sets {
		if j, dup := seen[key(m)]; dup {
			t.Errorf("%v and %v share the key %q", sets[j], m, key(m))
		}
		seen[key(m)] = i
	}
	if key(nil) != "" {
		t.Errorf("an empty map's key is %q", key(nil))
	}
	if got := string(AppendSetKey([]byte("x"), map[string]string{"a": "b"})); got != "x"+key(map[string]string{"a": "b"}) {
		t.Errorf("appending to a prefix gave %q", got)
	}
	buf := make([]byte, 0, 64)
	m := map[string]string{"app": "web", "tier": "front", "team": "a"}
	if n := testing.AllocsPerRun(100, func() { buf = AppendSetKey(buf[:0], m) }); n != 0 {
		t.Errorf("a reused buffer allocated %v times per key", n)
	}
}
