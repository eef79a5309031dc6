package app

import (
	"testing"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/workqueue"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A Watch's Changed keeps the updates it rejects out of the queue; a
// resync (the same object twice) and the updates it accepts still wake
// the key.
func TestWatchChangedFiltersUpdates(t *testing.T) {
	q := workqueue.New(workqueue.Config{Name: "changed"})
	defer q.ShutDown()
	r := &runner{queue: q}
	h := r.handlerFor(Watch{Kind: "ReplicaSet", Changed: controller.SpecOrMetadataChanged})

	rs := func(gen int64, ready int32) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.ReplicaSet{
			Metadata: &kplanev1.ObjectMeta{Name: "a", Namespace: "ns", Generation: gen},
			Status:   &kplanev1.ReplicaSetStatus{ReadyReplicas: ready},
		})
	}
	h.OnUpdate(rs(1, 0), rs(1, 5))
	if n := q.Len(); n != 0 {
		t.Fatalf("a status-only update queued %d keys; want none", n)
	}
	same := rs(1, 5)
	h.OnUpdate(same, same)
	if n := q.Len(); n != 1 {
		t.Fatalf("a resync queued %d keys; want 1", n)
	}
	key, _ := q.Get()
	q.Done(key)
	h.OnUpdate(rs(1, 5), rs(2, 5))
	if n := q.Len(); n != 1 {
		t.Fatalf("a spec change (new generation) queued %d keys; want 1", n)
	}
}
