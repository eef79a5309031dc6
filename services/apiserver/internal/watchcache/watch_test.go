package watchcache

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
)

type everything struct{}

func (everything) Matches(*kplanev1.Object) bool { return true }

func podEvent(t *testing.T, name string, rev int64) clientv3.WatchResponse {
	t.Helper()
	obj := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"}})
	b, err := store.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	return clientv3.WatchResponse{Events: []*clientv3.Event{{
		Type: mvccpb.PUT,
		Kv:   &mvccpb.KeyValue{Key: []byte("/registry/pod/default/" + name), Value: b, ModRevision: rev, CreateRevision: rev},
	}}}
}

// A client may watch from a revision the cache has not reached yet (it
// read it from a write etcd acknowledged first). Events up to that
// revision must not be sent when they arrive late.
func TestWatchFromRevisionAheadOfCache(t *testing.T) {
	c := New(Config{Kind: kplanev1.LookupKind("Pod"), Capacity: 16})
	c.loaded = true
	c.readyClosed = true
	close(c.ready)
	c.apply(podEvent(t, "a", 5))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, WatchOptions{Filter: everything{}, FromRev: 7}, func(r *kplanev1.WatchResponse, _ []byte) error {
			got <- r.GetObject().Key()
			return nil
		})
	}()
	c.apply(podEvent(t, "b", 6)) // at or below the watch's revision: skipped
	c.apply(podEvent(t, "c", 7))
	c.apply(podEvent(t, "d", 8)) // the first change after it
	select {
	case k := <-got:
		if k != "default/d" {
			t.Fatalf("first event is %s, want default/d", k)
		}
	case <-ctx.Done():
		t.Fatal("no event arrived")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
}

func TestWatchTooOldAndSlowWatcher(t *testing.T) {
	c := New(Config{Kind: kplanev1.LookupKind("Pod"), Capacity: 2})
	c.loaded = true
	c.readyClosed = true
	close(c.ready)
	for i, n := range []string{"a", "b", "c", "d"} {
		c.apply(podEvent(t, n, int64(10+i)))
	}
	ctx := context.Background()
	err := c.Watch(ctx, WatchOptions{Filter: everything{}, FromRev: 10}, func(*kplanev1.WatchResponse, []byte) error { return nil })
	if err == nil || !isCode(err, "OutOfRange") {
		t.Fatalf("watch from an evicted revision: %v, want OutOfRange", err)
	}
	c.Compacted(12)
	err = c.Watch(ctx, WatchOptions{Filter: everything{}, FromRev: 11}, func(*kplanev1.WatchResponse, []byte) error { return nil })
	if err == nil || !isCode(err, "OutOfRange") {
		t.Fatalf("watch from a compacted revision: %v, want OutOfRange", err)
	}
	// A watcher that blocks in send while the ring wraps is cut alone.
	block, entered := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- c.Watch(ctx, WatchOptions{Filter: everything{}, FromRev: 12}, func(*kplanev1.WatchResponse, []byte) error {
			if first {
				first = false
				close(entered)
			}
			<-block
			return nil
		})
	}()
	<-entered // the watcher holds event 13 and reads no further
	for i, n := range []string{"e", "f", "g", "h"} {
		c.apply(podEvent(t, n, int64(20+i)))
	}
	close(block)
	if err := <-done; err == nil || !isCode(err, "ResourceExhausted") {
		t.Fatalf("slow watcher: %v, want ResourceExhausted", err)
	}
}

func isCode(err error, code string) bool {
	s, ok := statusOf(err)
	return ok && s == code
}

func statusOf(err error) (string, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return "", false
	}
	return st.Code().String(), true
}

func TestWaitForRevision(t *testing.T) {
	c := New(Config{Kind: kplanev1.LookupKind("Pod"), Capacity: 4})
	c.loaded = true
	c.readyClosed = true
	close(c.ready)
	c.apply(podEvent(t, "a", 5))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitForRevision(ctx, 5); err != nil {
		t.Fatalf("at the revision already: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.WaitForRevision(ctx, 7) }()
	c.apply(podEvent(t, "b", 6))
	select {
	case err := <-done:
		t.Fatalf("returned at revision 6 of 7: %v", err)
	default:
	}
	c.apply(podEvent(t, "c", 7))
	if err := <-done; err != nil {
		t.Fatalf("waiting for 7: %v", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := c.WaitForRevision(short, 100); err == nil {
		t.Fatal("a revision the cache never reaches did not time out")
	}
}
