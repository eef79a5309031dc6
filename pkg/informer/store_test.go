package informer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func testPod(ns, name, node string, labels map[string]string, owners ...string) *kplanev1.Object {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, ResourceVersion: "1"},
		Spec:     &kplanev1.PodSpec{NodeName: node},
	}
	for _, uid := range owners {
		p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, &kplanev1.OwnerReference{Kind: "ReplicaSet", Name: "rs-" + uid, Uid: uid, Controller: true})
	}
	return kplanev1.MustWrap(p)
}

func keys(objs []*kplanev1.Object) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Key())
	}
	return out
}

func TestStoreIndexes(t *testing.T) {
	s := NewStore(Indexers{PodNodeNameIndex: IndexPodsByNodeName, OwnerUIDIndex: IndexByOwnerUID})
	for _, o := range []*kplanev1.Object{
		testPod("a", "p1", "n1", map[string]string{"app": "web"}, "u1"),
		testPod("a", "p2", "n2", map[string]string{"app": "db"}, "u1", "u2"),
		testPod("b", "p3", "n1", map[string]string{"app": "web"}),
		testPod("b", "p4", "", nil, "u2"),
	} {
		s.put(o.Key(), o)
	}
	check := func(index, value string, want ...string) {
		t.Helper()
		got, err := s.ByIndex(index, value)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = []string{}
		}
		if !slices.Equal(keys(got), want) {
			t.Fatalf("ByIndex(%s, %s) = %v, want %v", index, value, keys(got), want)
		}
		anyOrder, err := s.ByIndexAnyOrder(index, value)
		if err != nil {
			t.Fatal(err)
		}
		if k := keys(anyOrder); !slices.Equal(slices.Sorted(slices.Values(k)), want) {
			t.Fatalf("ByIndexAnyOrder(%s, %s) = %v, want %v in any order", index, value, k, want)
		}
	}
	check(NamespaceIndex, "a", "a/p1", "a/p2")
	check(PodNodeNameIndex, "n1", "a/p1", "b/p3")
	check(PodNodeNameIndex, "", nil...) // unscheduled pods are not indexed
	check(OwnerUIDIndex, "u1", "a/p1", "a/p2")
	check(OwnerUIDIndex, "u2", "a/p2", "b/p4")

	// Re-binding and orphaning move the entries.
	s.put("a/p1", testPod("a", "p1", "n2", map[string]string{"app": "web"}))
	check(PodNodeNameIndex, "n1", "b/p3")
	check(PodNodeNameIndex, "n2", "a/p1", "a/p2")
	check(OwnerUIDIndex, "u1", "a/p2")

	s.remove("a/p2")
	check(OwnerUIDIndex, "u1", nil...)
	check(NamespaceIndex, "a", "a/p1")
	if _, ok := s.Get("a/p2"); ok {
		t.Fatal("removed object still there")
	}
	if _, err := s.ByIndex("nope", "x"); err == nil {
		t.Fatal("unknown index accepted")
	}
	if ks, err := s.IndexKeys(NamespaceIndex, "b"); err != nil || !slices.Equal(ks, []string{"b/p3", "b/p4"}) {
		t.Fatalf("IndexKeys: %v %v", ks, err)
	}

	// Custom indexes added later cover existing objects.
	if err := s.AddIndexers(Indexers{"app": func(o *kplanev1.Object) []string {
		if v, ok := o.Meta().GetLabels()["app"]; ok {
			return []string{v}
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	check("app", "web", "a/p1", "b/p3")
	if err := s.AddIndexers(Indexers{"app": IndexByNamespace}); err == nil {
		t.Fatal("duplicate index accepted")
	}

	sel, err := labels.Parse("app=web")
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(s.ListBySelector("", sel)); !slices.Equal(got, []string{"a/p1", "b/p3"}) {
		t.Fatalf("ListBySelector all: %v", got)
	}
	if got := keys(s.ListBySelector("b", sel)); !slices.Equal(got, []string{"b/p3"}) {
		t.Fatalf("ListBySelector b: %v", got)
	}
	if got := keys(s.ListBySelector("b", labels.Everything())); !slices.Equal(got, []string{"b/p3", "b/p4"}) {
		t.Fatalf("ListBySelector everything: %v", got)
	}
	if got := s.ListKeys(); !slices.Equal(got, []string{"a/p1", "b/p3", "b/p4"}) || s.Len() != 3 {
		t.Fatalf("ListKeys: %v", got)
	}
}

// TestApplyIgnoresStaleEvents feeds events straight into apply: replays of
// an already applied revision and stale deletions must not change the cache
// nor reach handlers.
func TestApplyIgnoresStaleEvents(t *testing.T) {
	inf, err := New(nil, Options{Selection: Selection{Kind: "Pod"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	l := newListener(Handler{
		OnAdd:    func(o *kplanev1.Object) { got = append(got, "add "+o.Meta().GetResourceVersion()) },
		OnUpdate: func(_, o *kplanev1.Object) { got = append(got, "update "+o.Meta().GetResourceVersion()) },
		OnDelete: func(o any) { got = append(got, "delete") },
	})
	inf.listeners = append(inf.listeners, l)

	at := func(rv string) *kplanev1.Object {
		o := testPod("d", "p", "", nil)
		o.Meta().ResourceVersion = rv
		return o
	}
	ev := func(typ kplanev1.EventType, o *kplanev1.Object, rv string) {
		inf.apply(&kplanev1.WatchResponse{Type: typ, Object: o, ResourceVersion: rv})
	}
	ev(kplanev1.EventType_EVENT_TYPE_ADDED, at("5"), "5")
	ev(kplanev1.EventType_EVENT_TYPE_ADDED, at("5"), "5")    // replay
	ev(kplanev1.EventType_EVENT_TYPE_MODIFIED, at("4"), "4") // older
	ev(kplanev1.EventType_EVENT_TYPE_MODIFIED, at("9"), "9")
	ev(kplanev1.EventType_EVENT_TYPE_DELETED, at("5"), "7") // deletion older than the cached state
	ev(kplanev1.EventType_EVENT_TYPE_BOOKMARK, nil, "12")
	if inf.LastSyncResourceVersion() != "12" {
		t.Fatalf("bookmark not tracked: %q", inf.LastSyncResourceVersion())
	}
	ev(kplanev1.EventType_EVENT_TYPE_DELETED, at("9"), "13")
	ev(kplanev1.EventType_EVENT_TYPE_DELETED, at("9"), "13")   // replay of the delete
	ev(kplanev1.EventType_EVENT_TYPE_MODIFIED, at("10"), "10") // replay from before the delete
	ev(kplanev1.EventType_EVENT_TYPE_ADDED, at("14"), "14")    // re-created

	for _, n := range l.pending {
		l.deliver(n)
	}
	want := []string{"add 5", "update 9", "delete", "add 14"}
	if !slices.Equal(got, want) {
		t.Fatalf("notifications %v, want %v", got, want)
	}
	if inf.LastSyncResourceVersion() != "14" {
		t.Fatalf("last resourceVersion %q, want 14", inf.LastSyncResourceVersion())
	}
	if o, ok := inf.Store().GetByName("d", "p"); !ok || o.Meta().GetResourceVersion() != "14" {
		t.Fatal("re-created object not cached")
	}
}

func TestObjectOf(t *testing.T) {
	o := testPod("a", "p", "", nil)
	for _, v := range []any{o, DeletedFinalStateUnknown{Key: "a/p", Obj: o}, &DeletedFinalStateUnknown{Key: "a/p", Obj: o}} {
		if got, ok := ObjectOf(v); !ok || got != o {
			t.Fatalf("ObjectOf(%T) failed", v)
		}
	}
	if _, ok := ObjectOf("x"); ok {
		t.Fatal("ObjectOf accepted a string")
	}
}

// The AnyOrder variants hold the same objects as the sorted ones.
func TestStoreAnyOrderMatchesSorted(t *testing.T) {
	s := NewStore(Indexers{OwnerUIDIndex: IndexByOwnerUID})
	for i := range 300 {
		ns := []string{"a", "b", "c"}[i%3]
		app := []string{"web", "db"}[i%2]
		o := testPod(ns, fmt.Sprintf("p%03d", i), "", map[string]string{"app": app}, fmt.Sprintf("u%d", i%7))
		s.put(o.Key(), o)
	}
	web := labels.SelectorFromSet(map[string]string{"app": "web"})
	for _, ns := range []string{"", "a", "b", "none"} {
		for _, sel := range []Matcher{nil, web} {
			want := keys(s.ListBySelector(ns, sel))
			got := keys(s.ListBySelectorAnyOrder(ns, sel))
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("ListBySelectorAnyOrder(%q, %v) = %v, want %v", ns, sel, got, want)
			}
		}
	}
	if _, err := s.ByIndexAnyOrder("no-such-index", "x"); err == nil {
		t.Fatal("ByIndexAnyOrder of a missing index: want an error")
	}
}

// ClaimCandidates is what the owner index and the orphans of the
// namespace that the selector matches give, each object once, with or
// without the orphan index (the fallback walks the namespace), and it
// follows objects as they are adopted and released.
func TestClaimCandidates(t *testing.T) {
	web, err := labels.Parse("app=web")
	if err != nil {
		t.Fatal(err)
	}
	objs := []*kplanev1.Object{
		testPod("a", "mine", "", map[string]string{"app": "web"}, "u1"),
		testPod("a", "mine-unmatched", "", map[string]string{"app": "db"}, "u1"),
		testPod("a", "orphan", "", map[string]string{"app": "web"}),
		testPod("a", "orphan-unmatched", "", map[string]string{"app": "db"}),
		testPod("a", "theirs", "", map[string]string{"app": "web"}, "u2"),
		testPod("b", "orphan-elsewhere", "", map[string]string{"app": "web"}),
	}
	// An owner that is not the controller leaves the pod an orphan.
	shared := testPod("a", "shared", "", map[string]string{"app": "web"})
	shared.Meta().OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs-u1", Uid: "u1"}}
	objs = append(objs, shared)
	for _, ix := range []Indexers{
		{OwnerUIDIndex: IndexByOwnerUID, OrphanIndex: IndexOrphansByNamespace},
		{OwnerUIDIndex: IndexByOwnerUID},
	} {
		s := NewStore(ix)
		for _, o := range objs {
			s.put(o.Key(), o)
		}
		_, orphanIndex := ix[OrphanIndex]
		check := func(what string, got []*kplanev1.Object, want ...string) {
			t.Helper()
			if k := slices.Sorted(slices.Values(keys(got))); !slices.Equal(k, want) {
				t.Errorf("orphan index %v, %s: ClaimCandidates = %v, want %v", orphanIndex, what, k, want)
			}
		}
		check("u1, app=web", s.ClaimCandidates("a", "u1", web), "a/mine", "a/mine-unmatched", "a/orphan", "a/shared")
		check("u1, every label", s.ClaimCandidates("a", "u1", nil), "a/mine", "a/mine-unmatched", "a/orphan", "a/orphan-unmatched", "a/shared")
		check("u3 in b", s.ClaimCandidates("b", "u3", web), "b/orphan-elsewhere")
		check("u1 in an empty namespace", s.ClaimCandidates("c", "u1", web), "a/mine", "a/mine-unmatched", "a/shared")

		// u1 adopts the orphan; u2 releases theirs.
		adopted := testPod("a", "orphan", "", map[string]string{"app": "web"}, "u1")
		released := testPod("a", "theirs", "", map[string]string{"app": "web"})
		s.put(adopted.Key(), adopted)
		s.put(released.Key(), released)
		check("after adopt and release", s.ClaimCandidates("a", "u1", web), "a/mine", "a/mine-unmatched", "a/orphan", "a/shared", "a/theirs")
		check("u2 after release", s.ClaimCandidates("a", "u2", web), "a/shared", "a/theirs")
		s.remove("a/theirs")
		check("after delete", s.ClaimCandidates("a", "u2", web), "a/shared")
	}
}

func TestSortByKey(t *testing.T) {
	objs := []*kplanev1.Object{testPod("b", "x", "", nil), testPod("a", "y", "", nil), testPod("a", "x", "", nil)}
	SortByKey(objs)
	if got := keys(objs); !slices.Equal(got, []string{"a/x", "a/y", "b/x"}) {
		t.Fatalf("SortByKey: %v", got)
	}
}
