package controller_test

import (
	"testing"

	"github.com/kplane/kplane/pkg/controller"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func podAt(uid, rv, ip string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "p", Uid: uid, ResourceVersion: rv},
		Status:   &kplanev1.PodStatus{PodIp: ip},
	})
}

func TestMutationCacheReadsOwnWrites(t *testing.T) {
	m := controller.NewMutationCache()
	stale := podAt("u1", "5", "")
	if got := m.Newest(stale); got != stale {
		t.Fatal("nothing written: Newest must return the cached object")
	}
	written := podAt("u1", "7", "10.0.0.1")
	m.Wrote(written)
	if got := m.Newest(stale); got != written {
		t.Fatalf("cache at 5, wrote 7: got rv %s", got.Meta().GetResourceVersion())
	}
	if m.Len() != 1 {
		t.Fatalf("Len = %d, want 1 until the cache catches up", m.Len())
	}
	// An older reply returned late does not replace the newer write.
	m.Wrote(podAt("u1", "6", "late"))
	if got := m.Newest(stale); got != written {
		t.Fatalf("a late older write replaced the newer one: rv %s", got.Meta().GetResourceVersion())
	}
	caughtUp := podAt("u1", "7", "10.0.0.1")
	if got := m.Newest(caughtUp); got != caughtUp {
		t.Fatal("cache caught up: Newest must return the cached object")
	}
	if m.Len() != 0 {
		t.Fatalf("Len = %d after the cache caught up, want 0", m.Len())
	}
}

func TestMutationCacheDropsReplacedAndForgotten(t *testing.T) {
	m := controller.NewMutationCache()
	m.Wrote(podAt("u1", "9", "x"))
	other := podAt("u2", "3", "") // deleted and recreated under the same name
	if got := m.Newest(other); got != other {
		t.Fatal("another uid: the cached object must win")
	}
	if m.Len() != 0 {
		t.Fatal("the write about the old uid must be dropped")
	}
	m.Wrote(podAt("u1", "9", "x"))
	m.Forget("default/p")
	if m.Len() != 0 {
		t.Fatal("Forget must drop the entry")
	}
	m.Wrote(nil)
	if m.Newest(nil) != nil || m.Len() != 0 {
		t.Fatal("nil objects are ignored")
	}
}
