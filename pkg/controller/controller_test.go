package controller_test

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExpectationsCreations(t *testing.T) {
	now := time.Unix(1000, 0)
	e := controller.NewExpectations(time.Minute)
	e.SetClock(func() time.Time { return now })

	if !e.Satisfied("ns/rs") {
		t.Fatal("no expectations must be satisfied")
	}
	e.ExpectCreations("ns/rs", 3)
	if e.Satisfied("ns/rs") {
		t.Fatal("3 pending creations reported satisfied")
	}
	e.CreationObserved("ns/rs")
	e.CreationFailed("ns/rs") // one create call failed: no event will come
	if a, d := e.Pending("ns/rs"); a != 1 || d != 0 {
		t.Fatalf("pending %d/%d, want 1/0", a, d)
	}
	if e.Satisfied("ns/rs") {
		t.Fatal("1 pending creation reported satisfied")
	}
	e.CreationObserved("ns/rs")
	if !e.Satisfied("ns/rs") {
		t.Fatal("all creations observed but not satisfied")
	}
	// Extra observations (e.g. pods adopted from elsewhere) do not go negative.
	e.CreationObserved("ns/rs")
	e.ExpectCreations("ns/rs", 1)
	if e.Satisfied("ns/rs") {
		t.Fatal("a fresh expectation must reset the count")
	}
	// Other keys are independent.
	if !e.Satisfied("ns/other") {
		t.Fatal("unrelated key blocked")
	}
}

func TestExpectationsDeletionsAndTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	e := controller.NewExpectations(time.Minute)
	e.SetClock(func() time.Time { return now })

	e.ExpectDeletions("ns/rs", []string{"ns/p1", "ns/p2"})
	e.DeletionObserved("ns/rs", "ns/p1")
	e.DeletionObserved("ns/rs", "ns/p1") // watch event and tombstone: counted once
	if e.Satisfied("ns/rs") {
		t.Fatal("p2's deletion is still pending")
	}
	if _, d := e.Pending("ns/rs"); d != 1 {
		t.Fatalf("pending deletions %d, want 1", d)
	}
	e.DeletionObserved("ns/rs", "ns/p2")
	if !e.Satisfied("ns/rs") {
		t.Fatal("all deletions observed but not satisfied")
	}

	// Expectations that never complete expire after the TTL.
	e.ExpectCreations("ns/stuck", 2)
	now = now.Add(59 * time.Second)
	if e.Satisfied("ns/stuck") {
		t.Fatal("expired too early")
	}
	now = now.Add(2 * time.Second)
	if !e.Satisfied("ns/stuck") {
		t.Fatal("not expired after the TTL")
	}
	e.Delete("ns/stuck")
	if a, d := e.Pending("ns/stuck"); a != 0 || d != 0 {
		t.Fatal("Delete kept the record")
	}
}

func TestExpectationsConcurrent(t *testing.T) {
	e := controller.NewExpectations(0)
	e.ExpectCreations("k", 100)
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.CreationObserved("k")
			_ = e.Satisfied("k")
		}()
	}
	wg.Wait()
	if !e.Satisfied("k") {
		t.Fatal("100 concurrent observations lost")
	}
}

func TestSlowStartBatch(t *testing.T) {
	var calls atomic.Int32
	n, err := controller.SlowStartBatch(10, 1, func() error { calls.Add(1); return nil })
	if n != 10 || err != nil || calls.Load() != 10 {
		t.Fatalf("all succeed: %d successes, %v, %d calls", n, err, calls.Load())
	}

	// Batches are 1, 2, 4, 8: failing from the 4th call on stops after the
	// batch of 4 (calls 4..7), never starting the batch of 8.
	calls.Store(0)
	boom := errors.New("quota exceeded")
	n, err = controller.SlowStartBatch(20, 1, func() error {
		if calls.Add(1) >= 4 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("want the failure, got %v", err)
	}
	if calls.Load() != 7 || n != 3 {
		t.Fatalf("want 7 calls and 3 successes, got %d calls and %d successes", calls.Load(), n)
	}

	calls.Store(0)
	if n, err := controller.SlowStartBatch(0, 1, func() error { calls.Add(1); return nil }); n != 0 || err != nil || calls.Load() != 0 {
		t.Fatal("count 0 must make no call")
	}
	calls.Store(0)
	if n, _ := controller.SlowStartBatch(5, 0, func() error { calls.Add(1); return nil }); n != 5 || calls.Load() != 5 {
		t.Fatal("initial batch size 0 must behave as 1")
	}
}

func ownedPod(owner *kplanev1.OwnerReference) *kplanev1.Object {
	p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "ns"}}
	if owner != nil {
		p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{
			{Kind: "Node", Name: "n1", Uid: "node-uid"}, // a non-controlling owner
			owner,
		}
	}
	return kplanev1.MustWrap(p)
}

func TestOwnerMapping(t *testing.T) {
	ctrl := &kplanev1.OwnerReference{Kind: "ReplicaSet", Name: "web", Uid: "rs-uid", Controller: true}
	p := ownedPod(ctrl)
	if k, ok := controller.OwnerKey(p, "ReplicaSet"); !ok || k != "ns/web" {
		t.Fatalf("OwnerKey = %q %v", k, ok)
	}
	if _, ok := controller.OwnerKey(p, "Job"); ok {
		t.Fatal("wrong owner kind matched")
	}
	if got := controller.OwnerKeys("ReplicaSet")(p); !slices.Equal(got, []string{"ns/web"}) {
		t.Fatalf("OwnerKeys = %v", got)
	}
	if got := controller.OwnerKeys("ReplicaSet")(ownedPod(nil)); len(got) != 0 {
		t.Fatalf("orphan mapped to %v", got)
	}
	if !controller.IsControlledBy(p, "rs-uid") || controller.IsControlledBy(p, "node-uid") {
		t.Fatal("IsControlledBy wrong")
	}
	if r := controller.ControllerRef(p.Meta()); r != ctrl {
		t.Fatal("ControllerRef wrong")
	}
	if o, ok := controller.DeletedObject(informer.DeletedFinalStateUnknown{Key: "ns/p", Obj: p}); !ok || o != p {
		t.Fatal("tombstone not unwrapped")
	}
	if o, ok := controller.DeletedObject(p); !ok || o != p {
		t.Fatal("object not passed through")
	}
}

func TestExpectationsSatisfiedByCacheRevision(t *testing.T) {
	e := controller.NewExpectations(time.Hour)
	e.ExpectCreations("ns/rs", 2)
	e.WriteIssued("ns/rs")
	e.WriteIssued("ns/rs")
	e.WriteAcknowledged("ns/rs", 40)
	if e.SatisfiedAt("ns/rs", 100) {
		t.Fatal("satisfied while a write is still in flight")
	}
	e.WriteAcknowledged("ns/rs", 42)
	if e.SatisfiedAt("ns/rs", 41) {
		t.Fatal("satisfied by a cache older than the last write")
	}
	// Neither creation was observed (created and deleted while the cache
	// was away), but the cache is past both writes.
	if !e.SatisfiedAt("ns/rs", 42) {
		t.Fatal("not satisfied by a cache at the last write's revision")
	}
	if adds, _ := e.Pending("ns/rs"); adds != 0 {
		t.Fatalf("expectations kept after the cache caught up: %d adds", adds)
	}
	// A failed call (revision 0) leaves nothing to wait for by revision;
	// the counts decide.
	e.ExpectCreations("ns/b", 1)
	e.WriteIssued("ns/b")
	e.WriteAcknowledged("ns/b", 0)
	if e.SatisfiedAt("ns/b", 1000) {
		t.Fatal("a key with no acknowledged write was satisfied by revision")
	}
}

func TestSpecOrMetadataChanged(t *testing.T) {
	base := func() *kplanev1.ReplicaSet {
		return &kplanev1.ReplicaSet{
			Metadata: &kplanev1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 1, ResourceVersion: "10",
				Labels: map[string]string{"app": "a"}, Annotations: map[string]string{"k": "v"}, Finalizers: []string{"f"},
				OwnerReferences: []*kplanev1.OwnerReference{{Kind: "Deployment", Name: "d", Uid: "u", Controller: true}}},
			Status: &kplanev1.ReplicaSetStatus{Replicas: 1},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*kplanev1.ReplicaSet)
		want   bool
	}{
		{"status and resourceVersion only", func(r *kplanev1.ReplicaSet) { r.Status.Replicas = 3; r.Metadata.ResourceVersion = "11" }, false},
		{"generation", func(r *kplanev1.ReplicaSet) { r.Metadata.Generation = 2 }, true},
		{"deletion mark", func(r *kplanev1.ReplicaSet) { r.Metadata.DeletionTimestamp = timestamppb.Now() }, true},
		{"labels", func(r *kplanev1.ReplicaSet) { r.Metadata.Labels["app"] = "b" }, true},
		{"annotations", func(r *kplanev1.ReplicaSet) { r.Metadata.Annotations = nil }, true},
		{"finalizers", func(r *kplanev1.ReplicaSet) { r.Metadata.Finalizers = nil }, true},
		{"owner references", func(r *kplanev1.ReplicaSet) { r.Metadata.OwnerReferences[0].Uid = "v" }, true},
	} {
		next := base()
		tc.change(next)
		if got := controller.SpecOrMetadataChanged(kplanev1.MustWrap(base()), kplanev1.MustWrap(next)); got != tc.want {
			t.Errorf("%s: SpecOrMetadataChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// StatusWrites: the controller's own last status write does not wake it,
// anyone else's status write does, and a cached object older than that
// write is Behind; Forget drops the record.
func TestStatusWrites(t *testing.T) {
	rs := func(rv string, replicas int32) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.ReplicaSet{
			Metadata: &kplanev1.ObjectMeta{Name: "a", Namespace: "ns", Uid: "u1", Generation: 1, ResourceVersion: rv},
			Status:   &kplanev1.ReplicaSetStatus{Replicas: replicas},
		})
	}
	var w controller.StatusWrites
	if w.Behind(rs("5", 1)) {
		t.Fatal("Behind with nothing recorded")
	}
	if !w.Changed(rs("5", 1), rs("6", 2)) {
		t.Fatal("a status write with nothing recorded did not wake: it may be another writer's")
	}
	w.Record(rs("10", 3))
	if w.Changed(rs("6", 2), rs("10", 3)) {
		t.Error("the controller's own last status write woke it")
	}
	if !w.Changed(rs("10", 3), rs("12", 4)) {
		t.Error("another writer's status write (a former leader's) did not wake")
	}
	spec := rs("10", 3)
	spec.Meta().Generation = 2
	if !w.Changed(rs("6", 2), spec) {
		t.Error("a spec change at the recorded revision did not wake")
	}
	if !w.Behind(rs("6", 2)) {
		t.Error("a cached object older than our last status write is not Behind")
	}
	if w.Behind(rs("10", 3)) || w.Behind(rs("11", 3)) {
		t.Error("a cached object at or past our last status write is Behind")
	}
	if !w.Behind(rs("not-a-revision", 3)) {
		t.Error("an uncomparable resourceVersion is not Behind: the cache cannot vouch for it")
	}
	w.Record(rs("not-a-revision", 3)) // ignored: nothing to compare with
	if !w.Behind(rs("9", 3)) {
		t.Error("an uncomparable write replaced the recorded revision")
	}
	w.Forget("u1")
	if w.Behind(rs("6", 2)) || !w.Changed(rs("6", 2), rs("10", 3)) {
		t.Error("Forget kept the record")
	}
}

// A Pacer waits Min for an owner it knows nothing of or whose walk is
// cheap, Factor times the last walk for a costly one, and Min again once
// the owner is forgotten.
func TestPacer(t *testing.T) {
	p := &controller.Pacer{Min: 250 * time.Millisecond, Factor: 10}
	if d := p.Delay("a"); d != 250*time.Millisecond {
		t.Fatalf("unknown owner: delay %v, want Min", d)
	}
	p.Observe("a", 5*time.Millisecond)
	if d := p.Delay("a"); d != 250*time.Millisecond {
		t.Errorf("cheap walk: delay %v, want Min", d)
	}
	p.Observe("a", 60*time.Millisecond)
	p.Observe("b", time.Millisecond)
	if d := p.Delay("a"); d != 600*time.Millisecond {
		t.Errorf("60 ms walk: delay %v, want 600ms", d)
	}
	if d := p.Delay("b"); d != 250*time.Millisecond {
		t.Errorf("another owner's walk changed b's delay to %v", d)
	}
	p.Forget("a")
	if d := p.Delay("a"); d != 250*time.Millisecond {
		t.Errorf("forgotten owner: delay %v, want Min", d)
	}
}
