package store

import (
	"sync"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// classCache stands in for the watch cache of PriorityClasses: a list
// at a revision, which answers only when it has caught up to atLeast.
type classCache struct {
	mu      sync.Mutex
	rev     int64
	classes []*kplanev1.PriorityClass
	asked   []int64 // the atLeast of every call
}

func (c *classCache) get(atLeast int64) ([]*kplanev1.PriorityClass, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, atLeast)
	return c.classes, c.rev >= atLeast
}

// Pod admission looks for the global default class in the cache, but
// only once the cache shows this store's latest class write: before
// that it reads etcd, so a class just created through this apiserver is
// seen by the next pod. A dry-run class write raises nothing.
func TestPodAdmissionReadsClassesFromCache(t *testing.T) {
	ctx, be := openBackend(t)
	cache := &classCache{}
	s := New(be.Client, Options{KV: be.KV, PriorityClasses: cache.get})
	if _, err := s.Create(ctx, kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "default"}})); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *kplanev1.Pod {
		t.Helper()
		o, err := s.Create(ctx, kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}}))
		if err != nil {
			t.Fatal(err)
		}
		return o.GetPod()
	}
	class, err := s.Create(ctx, kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "standard"}, Value: 100, GlobalDefault: true}))
	if err != nil {
		t.Fatal(err)
	}
	written, err := ParseRevision(class.Meta().GetResourceVersion())
	if err != nil {
		t.Fatal(err)
	}
	// The cache has not seen the class: etcd answers.
	if p := pod("first"); p.GetSpec().GetPriority() != 100 || p.GetSpec().GetPriorityClassName() != "standard" {
		t.Fatalf("with the cache behind, pod got class %q priority %d; want standard 100 from etcd", p.GetSpec().GetPriorityClassName(), p.GetSpec().GetPriority())
	}
	if got := cache.asked[len(cache.asked)-1]; got != written {
		t.Fatalf("admission asked the cache for revision %d, want the class write's %d", got, written)
	}
	// Caught up, the cache answers (its list differs from etcd's here,
	// to show which was read).
	cache.mu.Lock()
	cache.rev = written
	cache.classes = []*kplanev1.PriorityClass{{Metadata: &kplanev1.ObjectMeta{Name: "cached"}, Value: 7, GlobalDefault: true}}
	cache.mu.Unlock()
	if p := pod("second"); p.GetSpec().GetPriority() != 7 || p.GetSpec().GetPriorityClassName() != "cached" {
		t.Fatalf("with the cache caught up, pod got class %q priority %d; want the cache's cached 7", p.GetSpec().GetPriorityClassName(), p.GetSpec().GetPriority())
	}
	// A dry run of a class write stores nothing, so it raises nothing.
	if _, err := s.Create(WithDryRun(ctx), kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "trial"}, Value: 5})); err != nil {
		t.Fatal(err)
	}
	pod("third")
	if got := cache.asked[len(cache.asked)-1]; got != written {
		t.Fatalf("after a dry run admission asked for revision %d, want still %d", got, written)
	}
}
