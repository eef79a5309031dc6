package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

const (
	added    = kplanev1.EventType_EVENT_TYPE_ADDED
	modified = kplanev1.EventType_EVENT_TYPE_MODIFIED
	deleted  = kplanev1.EventType_EVENT_TYPE_DELETED
	bookmark = kplanev1.EventType_EVENT_TYPE_BOOKMARK
)

func TestWatchInitialEvents(t *testing.T) { transports(t, testWatchInitialEvents) }

func testWatchInitialEvents(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	create(t, c, newNamespace("other"))
	var created []*kplanev1.Object
	for _, k := range [][2]string{{"default", "c"}, {"default", "a"}, {"other", "b"}} {
		created = append(created, create(t, c, newPod(k[0], k[1], nil)))
	}
	for i, rv := range []string{"", "0"} {
		t.Run("rv="+strconv.Quote(rv), func(t *testing.T) {
			w := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: rv})
			// Initial events come sorted by key, each with its object's rv.
			want := []*kplanev1.Object{created[1], created[0]}
			if i == 1 {
				want = append(want, created[3])
			}
			want = append(want, created[2])
			for _, want := range want {
				ev := w.expect(added, want.Key())
				if !proto.Equal(ev.GetObject(), want) || ev.GetResourceVersion() != want.Meta().GetResourceVersion() {
					t.Fatalf("initial event %v, want ADDED %v", ev, want)
				}
			}
			// Then changes.
			p := create(t, c, newPod("default", "new-"+strconv.Itoa(i), nil))
			created = append(created, p)
			ev := w.expect(added, p.Key())
			if ev.GetResourceVersion() != p.Meta().GetResourceVersion() {
				t.Fatalf("event rv %s, want the create's %s", ev.GetResourceVersion(), p.Meta().GetResourceVersion())
			}
		})
	}
	// Namespace-scoped initial events.
	w := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "other"})
	w.expect(added, "other/b")
	create(t, c, newPod("default", "not-seen", nil))
	p := create(t, c, newPod("other", "seen", nil))
	w.expect(added, p.Key())
}

func TestWatchFromRevisionAndEventTypes(t *testing.T) {
	transports(t, testWatchFromRevisionAndEventTypes)
}

func testWatchFromRevisionAndEventTypes(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	a := create(t, c, newPod("default", "a", nil))
	from := a.Meta().GetResourceVersion()
	b := create(t, c, newPod("default", "b", nil))
	a.Meta().Labels = map[string]string{"x": "1"}
	a2 := update(t, c, a)
	_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "b"})
	must(t, err, "delete b")

	w := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: from})
	if ev := w.expect(added, "default/b"); !proto.Equal(ev.GetObject(), b) {
		t.Fatalf("ADDED object %v, want %v", ev.GetObject(), b)
	}
	if ev := w.expect(modified, "default/a"); !proto.Equal(ev.GetObject(), a2) {
		t.Fatalf("MODIFIED object %v, want %v", ev.GetObject(), a2)
	}
	ev := w.expect(deleted, "default/b")
	// DELETED carries the last state, at the deletion's revision.
	if ev.GetObject().Meta().GetUid() != b.Meta().GetUid() || rev(t, ev.GetResourceVersion()) <= rev(t, a2.Meta().GetResourceVersion()) {
		t.Fatalf("DELETED event %v", ev)
	}
	if ev.GetObject().Meta().GetResourceVersion() != ev.GetResourceVersion() {
		t.Fatalf("DELETED object rv %s, event rv %s", ev.GetObject().Meta().GetResourceVersion(), ev.GetResourceVersion())
	}
	// Other kinds do not show.
	create(t, c, newSecret("default", "s", nil))
	c2 := create(t, c, newPod("default", "c", nil))
	w.expect(added, c2.Key())
}

func TestWatchSelectorsTransitions(t *testing.T) { transports(t, testWatchSelectorsTransitions) }

func testWatchSelectorsTransitions(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	rv := list(t, c, &kplanev1.ListRequest{Kind: "Pod"}).GetResourceVersion()
	lw := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: rv, LabelSelector: "app=web"})
	fw := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: rv, FieldSelector: "spec.nodeName=n1"})

	create(t, c, newPod("default", "never", map[string]string{"app": "db"}))
	p := create(t, c, newPod("default", "p", map[string]string{"app": "web"}))
	lw.expect(added, "default/p")

	p.Meta().Labels = map[string]string{"app": "db"} // stops matching
	p = update(t, c, p)
	if ev := lw.expect(deleted, "default/p"); ev.GetObject().Meta().GetLabels()["app"] != "db" {
		t.Fatalf("stop-matching DELETED carries %v, want the new state", ev.GetObject().Meta().GetLabels())
	}
	p.Meta().Labels = map[string]string{"app": "web"} // starts matching again
	p = update(t, c, p)
	lw.expect(added, "default/p")
	p.Meta().Annotations = map[string]string{"n": "1"}
	p = update(t, c, p)
	lw.expect(modified, "default/p")

	// Binding makes the pod match spec.nodeName=n1: ADDED there.
	p.GetPod().Spec.NodeName = "n1"
	update(t, c, p)
	lw.expect(modified, "default/p")
	fw.expect(added, "default/p")

	_, err := c.Delete(testCtx(t), &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "p", GracePeriodSeconds: proto.Int64(0)})
	must(t, err, "delete")
	lw.expect(deleted, "default/p")
	fw.expect(deleted, "default/p")

	// The field watcher saw nothing of "never" and nothing before binding.
	q := create(t, c, newBoundPod("default", "q", "n1"))
	fw.expect(added, q.Key())
}

func TestWatchBookmarks(t *testing.T) {
	_, c := start(t, testserver.WithBookmarkInterval(200*time.Millisecond))
	rv := list(t, c, &kplanev1.ListRequest{Kind: "Pod"}).GetResourceVersion()
	bw := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: rv, AllowBookmarks: true})
	plain := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: rv})

	// Writes to another kind move the revision; a quiet Pod watcher still
	// learns of it through bookmarks.
	s := create(t, c, newSecret("default", "s", nil))
	want := rev(t, s.Meta().GetResourceVersion())
	deadline := time.Now().Add(30 * time.Second)
	for {
		ev := bw.next()
		if ev.GetType() != bookmark {
			t.Fatalf("got %v before any bookmark", ev.GetType())
		}
		if ev.GetObject() != nil {
			t.Fatalf("bookmark carries an object: %v", ev.GetObject())
		}
		if rev(t, ev.GetResourceVersion()) >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bookmark reached revision %d", want)
		}
	}
	// A watch started from the bookmark misses nothing after it.
	p := create(t, c, newPod("default", "p", nil))
	bw.expect(added, p.Key())
	// The watcher that did not ask for bookmarks gets none.
	if ev := plain.next(); ev.GetType() != added || ev.GetObject().Key() != p.Key() {
		t.Fatalf("watch without bookmarks got %v %s first, want ADDED %s", ev.GetType(), ev.GetObject().Key(), p.Key())
	}
}

func TestWatchErrors(t *testing.T) {
	_, c := start(t)
	w := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: "abc"})
	requireCode(t, w.recvErr(), codes.InvalidArgument, `resourceVersion "abc": must be a non-negative integer`)
	w = watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", LabelSelector: "a in (b"})
	requireCode(t, w.recvErr(), codes.InvalidArgument, "labelSelector: unable to parse requirement")
	w = watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", FieldSelector: "spec.nope=1"})
	requireCode(t, w.recvErr(), codes.InvalidArgument, "fieldSelector:", "Pod has no field spec.nope")
}

func TestWatchEndsWithUnavailableOnShutdown(t *testing.T) {
	srv, c := start(t)
	rv := list(t, c, &kplanev1.ListRequest{Kind: "Pod"}).GetResourceVersion()
	w := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: rv})
	p := create(t, c, newPod("default", "p", nil))
	w.expect(added, p.Key()) // the stream is established
	srv.Stop()
	requireCode(t, w.recvErr(), codes.Unavailable)
	// A request to a stopped apiserver is Unavailable too: retryable.
	_, err := c.Get(testCtx(t), &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "p"})
	requireCode(t, err, codes.Unavailable)
}

// TestWatchResumeExactlyOnce is DESIGN.md's resume promise under load:
// 1000 writes while the stream is broken and resumed several times from
// the last resourceVersion received; every write arrives exactly once, in
// order. Compaction then makes the old revision OutOfRange.
func TestWatchResumeExactlyOnce(t *testing.T) { transports(t, testWatchResumeExactlyOnce) }

func testWatchResumeExactlyOnce(t *testing.T, srv *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	const total = 1000
	const objects = 100
	startRV := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"}).GetResourceVersion()

	// The writer records the revision each acknowledged write got.
	var (
		mu      sync.Mutex
		written []int64
		count   atomic.Int64
	)
	writerErr := make(chan error, 1)
	go func() {
		writerErr <- func() error {
			for i := range total {
				name := fmt.Sprintf("s-%03d", i%objects)
				data := map[string][]byte{"seq": []byte(strconv.Itoa(i))}
				var out *kplanev1.Object
				if i < objects {
					resp, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newSecret("default", name, data)})
					if err != nil {
						return fmt.Errorf("create %s: %w", name, err)
					}
					out = resp.GetObject()
				} else {
					// Unconditional updates: the writer is the only one.
					resp, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: newSecret("default", name, data)})
					if err != nil {
						return fmt.Errorf("update %s: %w", name, err)
					}
					out = resp.GetObject()
				}
				r, err := strconv.ParseInt(out.Meta().GetResourceVersion(), 10, 64)
				if err != nil {
					return fmt.Errorf("write %d: bad resourceVersion: %w", i, err)
				}
				mu.Lock()
				written = append(written, r)
				mu.Unlock()
				count.Add(1)
			}
			return nil
		}()
	}()

	type got struct {
		rev  int64
		typ  kplanev1.EventType
		name string
		seq  string
	}
	var events []got
	from := startRV
	breaks := map[int]bool{150: true, 400: true, 650: true, 900: true}
	streams := 0
	for len(events) < total {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := c.Watch(sctx, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: from})
		if err != nil {
			cancel()
			t.Fatalf("watch from %s: %v", from, err)
		}
		streams++
		for len(events) < total {
			ev, err := stream.Recv()
			if err != nil {
				cancel()
				t.Fatalf("watch from %s after %d events: %v", from, len(events), err)
			}
			events = append(events, got{rev(t, ev.GetResourceVersion()), ev.GetType(), ev.GetObject().Meta().GetName(),
				string(ev.GetObject().GetSecret().GetData()["seq"])})
			from = ev.GetResourceVersion()
			if breaks[len(events)] {
				break
			}
		}
		cancel() // break the stream
		if len(events) < total {
			// Let writes happen while no stream is open.
			seen := int64(len(events))
			waitFor(t, 30*time.Second, "writes during the break", func() bool {
				return count.Load() >= min(seen+25, total)
			})
		}
	}
	must(t, <-writerErr, "writer")
	if streams != 5 {
		t.Fatalf("used %d streams, want 5 (4 breaks)", streams)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(written) != total {
		t.Fatalf("writer acknowledged %d writes, want %d", len(written), total)
	}
	for i, e := range events {
		if e.rev != written[i] {
			t.Fatalf("event %d has revision %d, want write %d's revision %d", i, e.rev, i, written[i])
		}
		wantType := modified
		if i < objects {
			wantType = added
		}
		if e.typ != wantType || e.name != fmt.Sprintf("s-%03d", i%objects) || e.seq != strconv.Itoa(i) {
			t.Fatalf("event %d = %v %s seq %s, want %v s-%03d seq %d", i, e.typ, e.name, e.seq, wantType, i%objects, i)
		}
	}

	// Compaction removes the history before now: resuming from the start
	// is OutOfRange, resuming from the present still works.
	compacted, err := srv.Compact(ctx)
	must(t, err, "compact")
	old := watch(t, c, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: startRV})
	requireCode(t, old.recvErr(), codes.OutOfRange, "too old resource version: "+startRV)
	mid := watch(t, c, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: strconv.FormatInt(written[total/2], 10)})
	requireCode(t, mid.recvErr(), codes.OutOfRange, "too old resource version")
	cur := watch(t, c, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: strconv.FormatInt(compacted, 10)})
	s := create(t, c, newSecret("default", "after-compaction", nil))
	cur.expect(added, s.Key())
}

// TestWatchSlowWatcherIsCutOffAlone checks that a watcher that does not
// read is closed with ResourceExhausted once it falls a whole watch cache
// behind, and that a watcher reading at the same time misses nothing.
func TestWatchSlowWatcherIsCutOffAlone(t *testing.T) {
	const cacheSize = 32
	const writes = 300
	srv, c := start(t, testserver.WithWatchCacheSize(cacheSize))
	ctx := testCtx(t)
	rv := list(t, c, &kplanev1.ListRequest{Kind: "Secret"}).GetResourceVersion()

	// A small fixed flow-control window (no dynamic growth) makes the
	// server's sends block as soon as the slow client stops reading.
	slowConn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	must(t, err, "dial")
	t.Cleanup(func() {
		if err := slowConn.Close(); err != nil {
			t.Errorf("close the slow connection: %v", err)
		}
	})
	slow := watch(t, kplanev1.NewResourcesClient(slowConn), &kplanev1.WatchRequest{Kind: "Secret", ResourceVersion: rv})
	fast := watch(t, c, &kplanev1.WatchRequest{Kind: "Secret", ResourceVersion: rv})

	// One event proves both streams are live on the server.
	first := create(t, c, newSecret("default", "first", nil))
	slow.expect(added, first.Key())
	fast.expect(added, first.Key())

	// The fast watcher reads concurrently while the slow one does not.
	// The writer never runs more than half a cache ahead of the fast
	// watcher (a semaphore the watcher releases per event), so only the
	// slow one can fall a whole cache behind.
	ahead := make(chan struct{}, cacheSize/2)
	var fastGot atomic.Int64
	fastErr := make(chan error, 1)
	go func() {
		for fastGot.Load() < writes {
			ev, err := fast.stream.Recv()
			if err != nil {
				fastErr <- err
				return
			}
			if ev.GetType() != added || ev.GetObject().Meta().GetName() != fmt.Sprintf("s-%03d", fastGot.Load()) {
				fastErr <- fmt.Errorf("fast watcher event %d: %v %s", fastGot.Load(), ev.GetType(), ev.GetObject().Key())
				return
			}
			fastGot.Add(1)
			<-ahead
		}
		fastErr <- nil
	}()
	payload := make([]byte, 8<<10)
	for i := range writes {
		select {
		case ahead <- struct{}{}:
		case err := <-fastErr:
			t.Fatalf("fast watcher failed after %d events: %v", fastGot.Load(), err)
		}
		_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newSecret("default", fmt.Sprintf("s-%03d", i), map[string][]byte{"p": payload})})
		must(t, err, "create")
	}
	must(t, <-fastErr, "fast watcher")

	// The slow watcher drains what was in flight, then learns it was cut.
	n := 0
	for {
		_, err := slow.stream.Recv()
		if err != nil {
			requireCode(t, err, codes.ResourceExhausted, "watcher too slow")
			break
		}
		n++
	}
	if n >= writes {
		t.Fatalf("slow watcher received all %d events; it was never cut off", n)
	}
	t.Logf("slow watcher received %d of %d events before ResourceExhausted", n, writes)
	// The server keeps serving new watchers after cutting one off.
	again := watch(t, c, &kplanev1.WatchRequest{Kind: "Secret", ResourceVersion: list(t, c, &kplanev1.ListRequest{Kind: "Secret"}).GetResourceVersion()})
	last := create(t, c, newSecret("default", "last", nil))
	again.expect(added, last.Key())
}
