package informer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestListWatchAndHandlers(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	pods := client.Pods(c)
	for i := 0; i < 5; i++ {
		if _, err := pods.Create(ctx, pod(fmt.Sprintf("pre-%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}

	inf, err := informer.New(c, informer.Options{Selection: informer.Selection{Kind: "Pod"}, PageSize: 2, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	inf.AddEventHandler(rec.handler())
	runInformer(t, inf)
	if n := inf.Store().Len(); n != 5 {
		t.Fatalf("cache holds %d pods after a paginated list, want 5", n)
	}

	p, err := pods.Create(ctx, pod("new", map[string]string{"app": "web"}))
	if err != nil {
		t.Fatal(err)
	}
	p = proto.Clone(p).(*kplanev1.Pod)
	p.Metadata.Labels["tier"] = "front"
	if _, err := pods.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Delete(ctx, "default", "pre-0", client.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 10*time.Second, "handler view to match the apiserver", func() bool {
		want, err := listView(t, c, "Pod")
		return err == nil && equalViews(rec.snapshot(), want) && equalViews(cacheView(inf), want)
	})
	rec.mu.Lock()
	order := strings.Join(rec.order, ",")
	rec.mu.Unlock()
	if !strings.Contains(order, "add default/new,update default/new") || !strings.Contains(order, "delete default/pre-0") {
		t.Fatalf("unexpected notification order %s", order)
	}

	// A handler added after sync first gets the current contents as adds.
	late := newRecorder()
	inf.AddEventHandler(late.handler())
	eventually(t, 10*time.Second, "late handler to receive synthetic adds", func() bool {
		return equalViews(late.snapshot(), cacheView(inf))
	})

	// Listers give typed access.
	l := informer.NewLister[*kplanev1.Pod](inf)
	if got, ok := l.Get("default", "new"); !ok || got.GetMetadata().GetLabels()["tier"] != "front" {
		t.Fatalf("lister get: %v %v", got, ok)
	}
	if n := len(l.List()); n != 5 {
		t.Fatalf("lister list: %d", n)
	}
	if inf.LastSyncResourceVersion() == "" {
		t.Fatal("no resourceVersion tracked")
	}
}

// TestTombstoneAfterCompaction holds the informer away while an object is
// deleted and history compacted: the relist must report the deletion with a
// DeletedFinalStateUnknown, and the other changes as update and add.
func TestTombstoneAfterCompaction(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	pods := client.Pods(c)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := pods.Create(ctx, pod(n, nil)); err != nil {
			t.Fatal(err)
		}
	}
	g := newGated(c)
	reg := prometheus.NewRegistry()
	m, err := informer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(g, informer.Options{Selection: informer.Selection{Kind: "Pod", Namespace: "default"}, Backoff: fastBackoff, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	inf.AddEventHandler(rec.handler())
	runInformer(t, inf)

	g.waitWatching(t) // the watch broken below is the restart counted
	g.hold()
	g.waitBlocked(t)
	bLast, _ := inf.Store().GetByName("default", "b")
	if _, err := pods.Delete(ctx, "default", "b", client.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	a, err := pods.Get(ctx, "default", "a")
	if err != nil {
		t.Fatal(err)
	}
	a.Metadata.Labels = map[string]string{"changed": "yes"}
	if _, err := pods.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("d", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	g.release()

	eventually(t, 10*time.Second, "relist to converge", func() bool {
		want, err := listView(t, c, "Pod")
		return err == nil && equalViews(rec.snapshot(), want) && equalViews(cacheView(inf), want)
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.tombstones) != 1 || rec.tombstones[0].Key != "default/b" {
		t.Fatalf("want one tombstone for default/b, got %+v", rec.tombstones)
	}
	if !proto.Equal(rec.tombstones[0].Obj, bLast) {
		t.Fatal("tombstone does not carry the last cached state")
	}
	if o, ok := informer.ObjectOf(rec.tombstones[0]); !ok || o.Key() != "default/b" {
		t.Fatal("ObjectOf does not unwrap the tombstone")
	}
	if rec.adds != 4 || rec.updates != 1 || rec.deletes != 1 {
		t.Fatalf("adds/updates/deletes = %d/%d/%d, want 4/1/1", rec.adds, rec.updates, rec.deletes)
	}
	if got := testutil.ToFloat64(m.Relists.WithLabelValues("Pod")); got < 1 {
		t.Fatalf("relists metric %v, want >= 1", got)
	}
	if got := testutil.ToFloat64(m.WatchRestarts.WithLabelValues("Pod")); got < 1 {
		t.Fatalf("watch restarts metric %v, want >= 1", got)
	}
}

// TestChaos writes from several goroutines while the apiserver is killed
// and restarted and history is compacted behind the informer's back. At
// the end the cache and a handler's replayed view both equal a fresh List.
func TestChaos(t *testing.T) {
	srv, c := startServer(t)
	g := newGated(c)
	reg := prometheus.NewRegistry()
	m, err := informer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(g, informer.Options{
		Selection: informer.Selection{Kind: "Pod"}, PageSize: 7, Backoff: fastBackoff, Metrics: m,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	inf.AddEventHandler(rec.handler())
	runInformer(t, inf)

	var writes atomic.Int64
	wctx, stopWriters := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			writer(wctx, c, rand.New(rand.NewPCG(seed, 7)), &writes)
		}(uint64(w))
	}
	defer func() {
		stopWriters()
		wg.Wait()
	}()
	waitWrites := func(n int64) {
		target := writes.Load() + n
		eventually(t, 30*time.Second, fmt.Sprintf("%d more writes", n), func() bool { return writes.Load() >= target })
	}

	waitWrites(40)
	// 1. The apiserver dies mid-stream and comes back: resume from the
	// last seen revision (or relist if the restart moved the window).
	srv.Kill()
	srv.Restart(t)
	waitWrites(40)

	// 2. The informer is away while writes happen and history is
	// compacted: it must relist and diff.
	g.hold()
	srv.Kill()
	g.waitBlocked(t)
	srv.Restart(t)
	waitWrites(40)
	if _, err := srv.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitWrites(10)
	g.release()
	waitWrites(40)

	stopWriters()
	wg.Wait()

	var want map[string]string
	eventually(t, 20*time.Second, "cache and handler view to equal a fresh List", func() bool {
		want, err = listView(t, c, "Pod")
		return err == nil && equalViews(cacheView(inf), want) && equalViews(rec.snapshot(), want)
	})
	if len(want) == 0 {
		t.Fatal("the writers left no pods; the comparison proves little")
	}
	if got := testutil.ToFloat64(m.Relists.WithLabelValues("Pod")); got < 1 {
		t.Fatalf("relists %v, want >= 1 after compaction", got)
	}
	if got := testutil.ToFloat64(m.WatchRestarts.WithLabelValues("Pod")); got < 2 {
		t.Fatalf("watch restarts %v, want >= 2", got)
	}
	t.Logf("writes=%d pods=%d relists=%v restarts=%v tombstones=%d", writes.Load(), len(want),
		testutil.ToFloat64(m.Relists.WithLabelValues("Pod")), testutil.ToFloat64(m.WatchRestarts.WithLabelValues("Pod")), len(rec.tombstones))
}

// writer makes random creates, updates and deletes on a small pool of
// names (so writers collide) until ctx ends, counting successful writes.
func writer(ctx context.Context, c *client.Client, r *rand.Rand, writes *atomic.Int64) {
	pods := client.Pods(c)
	for ctx.Err() == nil {
		name := fmt.Sprintf("p%d", r.IntN(25))
		var err error
		switch r.IntN(3) {
		case 0:
			_, err = pods.Create(ctx, pod(name, map[string]string{"gen": "0"}))
		case 1:
			var p *kplanev1.Pod
			if p, err = pods.Get(ctx, "default", name); err == nil {
				p.Metadata.Labels = map[string]string{"gen": fmt.Sprint(r.IntN(1000))}
				_, err = pods.Update(ctx, p)
			}
		case 2:
			_, err = pods.Delete(ctx, "default", name, client.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		switch {
		case err == nil:
			writes.Add(1)
		case client.IsUnavailable(err):
			// The apiserver is down: pace the retries instead of spinning.
			_ = client.Sleep(ctx, 20*time.Millisecond)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestResync(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	for _, n := range []string{"r1", "r2"} {
		if _, err := client.Pods(c).Create(ctx, pod(n, nil)); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := informer.New(c, informer.Options{Selection: informer.Selection{Kind: "Pod"}, ResyncPeriod: 20 * time.Millisecond, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	inf.AddEventHandler(rec.handler())
	runInformer(t, inf)
	eventually(t, 10*time.Second, "two resyncs of every pod", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.resyncs["default/r1"] >= 2 && rec.resyncs["default/r2"] >= 2
	})
}

func TestFactory(t *testing.T) {
	_, c := startServer(t)
	reg := prometheus.NewRegistry()
	f, err := informer.NewFactory(c, informer.FactoryOptions{Registerer: reg, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := f.ForKind("Pod"), f.ForKind("Pod")
	if p1 != p2 {
		t.Fatal("ForKind must share informers")
	}
	n1, err := f.For(informer.Selection{Kind: "Node", Namespace: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if n1 != f.ForKind("Node") {
		t.Fatal("a cluster-scoped kind ignores the namespace")
	}
	other, err := f.For(informer.Selection{Kind: "Pod", LabelSelector: "app=web"})
	if err != nil || other == p1 {
		t.Fatalf("a different selection needs its own informer: %v", err)
	}
	if _, err := f.For(informer.Selection{Kind: "Nope"}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	// A second factory on the same registry reuses the collectors.
	if _, err := informer.NewFactory(c, informer.FactoryOptions{Registerer: reg}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx)
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if !f.WaitForCacheSync(sctx) || !f.HasSynced() {
		t.Fatal("factory did not sync")
	}
	// Namespaces exist from the first start; the factory's Namespace
	// informer, started late, syncs on the second Start.
	ns := f.ForKind("Namespace")
	f.Start(ctx)
	if !informer.WaitForCacheSync(sctx, ns) || ns.Store().Len() < 3 {
		t.Fatalf("namespace informer: synced=%v len=%d", ns.HasSynced(), ns.Store().Len())
	}
	if _, err := client.Pods(c).Create(ctx, pod("x", map[string]string{"app": "web"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "both pod informers to see the pod", func() bool {
		_, a := p1.Store().GetByName("default", "x")
		_, b := other.Store().GetByName("default", "x")
		return a && b
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "kplane_informer_events_total" {
			found = true
		}
	}
	if !found {
		t.Fatal("informer events metric not registered")
	}
	cancel()
	f.Wait()
	if !informer.WaitForCacheSync(context.Background(), p1) {
		t.Fatal("synced informer reports unsynced")
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if informer.WaitForCacheSync(cctx, f.ForKind("Secret")) {
		t.Fatal("an informer never started cannot be synced")
	}
}

func TestForKindPanicsOnUnknownKind(t *testing.T) {
	f, err := informer.NewFactory(nil, informer.FactoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	f.ForKind("Nope")
}

// TestScopedFactory: views share the factory's informers (one Pod watch
// for every loop of a process) but each covers only what it asked for.
func TestScopedFactory(t *testing.T) {
	_, c := startServer(t)
	f, err := informer.NewFactory(c, informer.FactoryOptions{Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Scoped(), f.Scoped()
	podsA, podsB := a.ForKind("Pod"), b.ForKind("Pod")
	if podsA != podsB || podsA != f.ForKind("Pod") {
		t.Fatal("scoped views must share the factory's informer")
	}
	secrets := b.ForKind("Secret")
	if got := len(a.Informers()); got != 1 {
		t.Fatalf("view a has %d informers, want 1 (its Pod informer)", got)
	}
	if got := len(b.Informers()); got != 2 {
		t.Fatalf("view b has %d informers, want 2", got)
	}
	if got := len(f.Informers()); got != 2 {
		t.Fatalf("factory has %d informers, want 2 (one per selection)", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.Wait() }()
	a.Start(ctx) // starts only a's selections
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if !a.WaitForCacheSync(sctx) || !a.HasSynced() {
		t.Fatal("view a did not sync")
	}
	if secrets.HasSynced() {
		t.Fatal("view a's Start started view b's Secret informer")
	}
	f.Start(ctx)
	if !b.WaitForCacheSync(sctx) || !secrets.HasSynced() {
		t.Fatal("the factory's Start must run every view's informers")
	}
}
