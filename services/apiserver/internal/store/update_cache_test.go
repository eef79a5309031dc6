package store

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/internal/backend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openBackend starts an embedded etcd for one test and a context that
// ends with it.
func openBackend(t *testing.T) (context.Context, *backend.Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	be, err := backend.Open(ctx, backend.Config{DataDir: t.TempDir(), UnsafeNoFsync: true, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() }) // test teardown
	return ctx, be
}

// A conditional update starts from the cached copy when the cache holds
// the object at the caller's revision, and behaves exactly as one read
// from etcd when the cache is behind: a stale cache still gives a
// conflict, an object deleted from etcd is still not found, and the
// cached object is never modified.
func TestConditionalUpdateFromCache(t *testing.T) {
	ctx, be := openBackend(t)

	var cached atomic.Pointer[kplanev1.Object]
	var lookups atomic.Int32
	// A cache as the watch cache is: a private copy, at exactly rev.
	s := New(be.Client, Options{KV: be.KV, Cached: func(k *kplanev1.KindInfo, namespace, name string, rev int64) (*kplanev1.Object, bool) {
		lookups.Add(1)
		o := cached.Load()
		if o == nil || k.Name != o.KindName() || namespace != o.Meta().GetNamespace() || name != o.Meta().GetName() {
			return nil, false
		}
		if got, err := ParseRevision(o.Meta().GetResourceVersion()); err != nil || got != rev {
			return nil, false
		}
		return proto.Clone(o).(*kplanev1.Object), true
	}})
	if _, err := s.Create(ctx, kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "default"}})); err != nil {
		t.Fatal(err)
	}
	pod := kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	})
	v1, err := s.Create(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	relabel := func(from *kplanev1.Object, v string) *kplanev1.Object {
		o := proto.Clone(from).(*kplanev1.Object)
		o.Meta().Labels = map[string]string{"v": v}
		return o
	}

	// The cache is current: the update starts from it.
	cached.Store(v1)
	kept := proto.Clone(v1)
	v2, err := s.Update(ctx, relabel(v1, "2"))
	if err != nil {
		t.Fatalf("update from a current cache: %v", err)
	}
	if lookups.Load() == 0 {
		t.Fatal("the cache was not consulted for a conditional update")
	}
	if !proto.Equal(v1, kept) {
		t.Fatal("the update modified the cached object")
	}
	if got, err := s.Get(ctx, "Pod", "default", "web"); err != nil || got.Meta().GetLabels()["v"] != "2" || got.Meta().GetResourceVersion() != v2.Meta().GetResourceVersion() {
		t.Fatalf("after the update etcd holds %v (%v), want v=2 at %s", got.Meta(), err, v2.Meta().GetResourceVersion())
	}

	// The cache is behind (still v1) and so is the caller: a conflict.
	_, err = s.Update(ctx, relabel(v1, "3"))
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "has been modified") {
		t.Fatalf("stale caller with a stale cache: %v, want a conflict", err)
	}

	// The cache is behind (v1) but the caller is current (v2): the
	// update goes through from etcd's copy.
	v3, err := s.UpdateStatus(ctx, func() *kplanev1.Object {
		o := proto.Clone(v2).(*kplanev1.Object)
		o.GetPod().Status = &kplanev1.PodStatus{Phase: "Running"}
		return o
	}())
	if err != nil || v3.GetPod().GetStatus().GetPhase() != "Running" {
		t.Fatalf("current caller with a stale cache: %v, %v", v3, err)
	}

	// The cache still holds an object etcd no longer has: not found, as
	// from etcd.
	cached.Store(v3)
	if _, err := be.Client.Delete(ctx, ObjectKey(mustKind(t, "Pod"), "default", "web")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Update(ctx, relabel(v3, "4"))
	if status.Code(err) != codes.NotFound {
		t.Fatalf("update of an object deleted from etcd but cached: %v, want NotFound", err)
	}
}

func mustKind(t *testing.T, name string) *kplanev1.KindInfo {
	t.Helper()
	k, err := LookupKind(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
