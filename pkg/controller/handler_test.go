package controller_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestObjectControlHandler: every event is counted against the owner's
// expectations before the owner is queued, an update wakes the old and the
// new owner once each, and a tombstone is unwrapped.
func TestObjectControlHandler(t *testing.T) {
	exp := controller.NewExpectations(time.Minute)
	ctl := &controller.ObjectControl{Expectations: exp, OwnerKey: func(o *kplanev1.Object) (string, bool) {
		return controller.OwnerKey(o, "ReplicaSet")
	}}
	ownedBy := func(name, owner string) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{
			Namespace: "ns", Name: name, Uid: "uid-" + name,
			OwnerReferences: []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: owner, Uid: "uid-" + owner, Controller: true}},
		}})
	}
	var queued []string
	var satisfiedWhenQueued []bool
	h := ctl.Handler(controller.OwnerKeys("ReplicaSet"), func(key string) {
		queued = append(queued, key)
		satisfiedWhenQueued = append(satisfiedWhenQueued, exp.Satisfied(key))
	}, nil)

	key := "ns/a"
	if k, ok := controller.OwnerKey(ownedBy("p", "a"), "ReplicaSet"); !ok || k != key {
		t.Fatalf("owner key %q %v, want %q", k, ok, key)
	}
	exp.ExpectCreations(key, 1)
	h.OnAdd(ownedBy("p", "a"))
	if !slices.Equal(queued, []string{key}) || !satisfiedWhenQueued[0] {
		t.Fatalf("after add: queued %v, satisfied when queued %v", queued, satisfiedWhenQueued)
	}

	queued = nil
	h.OnUpdate(ownedBy("p", "a"), ownedBy("p", "b"))
	slices.Sort(queued)
	if !slices.Equal(queued, []string{"ns/a", "ns/b"}) {
		t.Fatalf("an owner change queued %v, want both owners", queued)
	}
	queued = nil
	h.OnUpdate(ownedBy("p", "a"), ownedBy("p", "a"))
	if !slices.Equal(queued, []string{key}) {
		t.Fatalf("an update within one owner queued %v, want it once", queued)
	}

	queued, satisfiedWhenQueued = nil, nil
	exp.ExpectDeletions(key, []string{"ns/p"})
	h.OnDelete(informer.DeletedFinalStateUnknown{Key: "ns/p", Obj: ownedBy("p", "a")})
	if !slices.Equal(queued, []string{key}) || !satisfiedWhenQueued[0] {
		t.Fatalf("after a tombstone: queued %v, satisfied when queued %v", queued, satisfiedWhenQueued)
	}
}

// With enqueueUpdate, updates go there (a controller delays them to
// gather status churn) while adds and deletes for an owner that expects
// nothing still go to enqueue.
func TestObjectControlHandlerRoutesUpdates(t *testing.T) {
	ctl := &controller.ObjectControl{Expectations: controller.NewExpectations(time.Minute), OwnerKey: func(o *kplanev1.Object) (string, bool) {
		return controller.OwnerKey(o, "ReplicaSet")
	}}
	pod := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{
		Namespace: "ns", Name: "p", Uid: "uid-p",
		OwnerReferences: []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "a", Uid: "uid-a", Controller: true}},
	}})
	var now, later []string
	h := ctl.Handler(controller.OwnerKeys("ReplicaSet"), func(key string) { now = append(now, key) }, func(key string) { later = append(later, key) })
	h.OnAdd(pod)
	h.OnUpdate(pod, pod)
	h.OnDelete(pod)
	if !slices.Equal(now, []string{"ns/a", "ns/a"}) || !slices.Equal(later, []string{"ns/a"}) {
		t.Fatalf("add, update, delete: enqueued %v at once and %v as updates; want the add and delete at once, the update apart", now, later)
	}
}

// With enqueueUpdate, the creations and deletions an owner still expects
// more of are gathered with the updates; the one that meets its
// expectations wakes it at once.
func TestObjectControlHandlerWakesWhenExpectationsAreMet(t *testing.T) {
	exp := controller.NewExpectations(time.Minute)
	ctl := &controller.ObjectControl{Expectations: exp, OwnerKey: func(o *kplanev1.Object) (string, bool) {
		return controller.OwnerKey(o, "ReplicaSet")
	}}
	pod := func(name string) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{
			Namespace: "ns", Name: name, Uid: "uid-" + name,
			OwnerReferences: []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "a", Uid: "uid-a", Controller: true}},
		}})
	}
	var now, later []string
	h := ctl.Handler(controller.OwnerKeys("ReplicaSet"), func(key string) { now = append(now, key) }, func(key string) { later = append(later, key) })

	exp.ExpectCreations("ns/a", 3)
	h.OnAdd(pod("p1"))
	h.OnAdd(pod("p2"))
	if len(now) != 0 || !slices.Equal(later, []string{"ns/a", "ns/a"}) {
		t.Fatalf("two of three expected creations: enqueued %v at once and %v gathered; want both gathered", now, later)
	}
	h.OnAdd(pod("p3"))
	if !slices.Equal(now, []string{"ns/a"}) || len(later) != 2 {
		t.Fatalf("the third expected creation: enqueued %v at once and %v gathered; want it at once", now, later)
	}

	now, later = nil, nil
	exp.ExpectDeletions("ns/a", []string{"ns/p1", "ns/p2"})
	h.OnDelete(pod("p1"))
	if len(now) != 0 || !slices.Equal(later, []string{"ns/a"}) {
		t.Fatalf("one of two expected deletions: enqueued %v at once and %v gathered; want it gathered", now, later)
	}
	h.OnDelete(pod("p2"))
	if !slices.Equal(now, []string{"ns/a"}) {
		t.Fatalf("the last expected deletion: enqueued %v at once; want ns/a", now)
	}

	// Without enqueueUpdate nothing is gathered, expectations or not.
	now = nil
	exp.ExpectCreations("ns/a", 2)
	plain := ctl.Handler(controller.OwnerKeys("ReplicaSet"), func(key string) { now = append(now, key) }, nil)
	plain.OnAdd(pod("p4"))
	if !slices.Equal(now, []string{"ns/a"}) {
		t.Fatalf("without enqueueUpdate an expected creation was enqueued as %v; want at once", now)
	}
}
