package authz

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

// scriptedSource is a Source whose snapshot the test sets and whose
// watch delivers the events, or ends with the error, the test sends.
type scriptedSource struct {
	mu      sync.Mutex
	objs    []*kplanev1.Object
	rev     int64
	events  chan *kplanev1.WatchResponse
	fail    chan error
	watches chan int64 // the FromRev of each watch started
}

func newScripted(rev int64, objs ...*kplanev1.Object) *scriptedSource {
	return &scriptedSource{objs: objs, rev: rev, events: make(chan *kplanev1.WatchResponse),
		fail: make(chan error), watches: make(chan int64, 4)}
}

func (s *scriptedSource) Snapshot() ([]*kplanev1.Object, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objs, s.rev
}

func (s *scriptedSource) set(rev int64, objs ...*kplanev1.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs, s.rev = objs, rev
}

func (s *scriptedSource) Watch(ctx context.Context, opts watchcache.WatchOptions, send watchcache.Sender) error {
	s.watches <- opts.FromRev
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.fail:
			return err
		case ev := <-s.events:
			if err := send(ev, nil); err != nil {
				return err
			}
		}
	}
}

func TestFeedFollowsAndRestarts(t *testing.T) {
	a := crb("a", "pod-reader", userSubject("alice"))
	b := crb("b", "pod-reader", userSubject("bob"))
	roles := newScripted(5, clusterRole("pod-reader", pr(ss(""), ss("pods"), ss("get"))))
	bindings := newScripted(5, a)
	r := NewRBAC()
	ctx, cancel := context.WithCancel(context.Background())
	sources := map[string]Source{"ClusterRole": roles, "ClusterRoleBinding": bindings}
	feed, err := NewFeed(ctx, sources, map[string]Sink{"ClusterRole": r, "ClusterRoleBinding": r}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		feed.Wait()
	}()
	may := func(name string) bool {
		d, _ := r.Authorize(ctx, &Attributes{User: &user.Info{Name: name}, Verb: "get", Resource: "pods", Namespace: "n", Name: "p"})
		return d == Allow
	}
	// The snapshot is in place when NewFeed returns.
	if !may("alice") || may("bob") {
		t.Fatal("initial snapshot not applied")
	}
	if got := <-bindings.watches; got != 5 {
		t.Fatalf("watch from %d, want the snapshot's revision 5", got)
	}
	<-roles.watches
	bindings.events <- &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_DELETED, Object: a, ResourceVersion: "6"}
	bindings.events <- &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: "7"}
	roles.events <- &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: "7"}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := feed.WaitForRevision(wctx, 7); err != nil {
		t.Fatal(err)
	}
	if may("alice") {
		t.Fatal("deleted binding still grants")
	}
	// The watch breaks; meanwhile b was created and nothing said so. The
	// feed reloads the snapshot and watches again from its revision.
	bindings.set(9, b)
	bindings.fail <- errors.New("too old resource version")
	if got := <-bindings.watches; got != 9 {
		t.Fatalf("rewatch from %d, want 9", got)
	}
	if !may("bob") || may("alice") {
		t.Fatal("reload after a broken watch not applied")
	}
	short, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if err := feed.WaitForRevision(short, 100); err == nil {
		t.Fatal("WaitForRevision returned for a revision never reached")
	}
	if _, err := NewFeed(ctx, map[string]Source{}, map[string]Sink{"Role": r}, nil); err == nil {
		t.Fatal("a sink without a source accepted")
	}
}
