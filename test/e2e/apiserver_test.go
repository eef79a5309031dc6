package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// startAPIServer runs a secured bin/apiserver (apiConfig) on a free
// loopback port with its data in dataDir and waits until it is healthy;
// the client is the admin. The ServiceAccount default/default, which the
// apiserver's admission wants before it takes a pod, is created here
// rather than by tokenctl: these tests are of the apiserver alone, and a
// controller writing in the background (its Lease) would change what
// the restart tests compare. The process is killed when the test ends if
// the test left it running.
func startAPIServer(t *testing.T, dataDir string) (*launcher.Process, kplanev1.ResourcesClient, apiConfig) {
	t.Helper()
	a := newAPIConfig(t)
	p := launch(t, a.config(t.TempDir(), dataDir, "--log-level", "debug"))
	waitHealthy(t, p)
	api := a.dial(t)
	ctx, wait := call(t)
	_, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ServiceAccount{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "default"}})}, wait)
	if err != nil {
		t.Fatalf("create ServiceAccount default/default: %v", err)
	}
	return p, api, a
}

func waitHealthy(t testing.TB, p *launcher.Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// call bounds one request; WaitForReady rides over the client's
// reconnect after a restart instead of failing fast.
func call(t *testing.T) (context.Context, grpc.CallOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, grpc.WaitForReady(true)
}

func pod(name string, i int) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"i": strconv.Itoa(i)}},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25"}}},
	})
}

// listAll returns every object of the kinds the test writes, by kind/key.
func listAll(t *testing.T, c kplanev1.ResourcesClient) (map[string]*kplanev1.Object, int64) {
	t.Helper()
	out := map[string]*kplanev1.Object{}
	var rev int64
	for _, kind := range kplanev1.KindNames() {
		ctx, wait := call(t)
		resp, err := c.List(ctx, &kplanev1.ListRequest{Kind: kind}, wait)
		if err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		for _, o := range resp.GetItems() {
			out[kind+"/"+o.Key()] = o
		}
		r, err := strconv.ParseInt(resp.GetResourceVersion(), 10, 64)
		if err != nil {
			t.Fatalf("list %s: resourceVersion %q: %v", kind, resp.GetResourceVersion(), err)
		}
		rev = max(rev, r)
	}
	return out, rev
}

// TestAPIServerSurvivesSIGKILL writes objects concurrently, kills the
// apiserver with SIGKILL in the middle of the writes, starts it again on
// the same data directory and checks that every acknowledged write is
// there exactly as acknowledged, and that revisions keep growing.
func TestAPIServerSurvivesSIGKILL(t *testing.T) {
	dataDir := t.TempDir()
	p, c, _ := startAPIServer(t, dataDir)

	// Some writes complete before the crash...
	acked := map[string]*kplanev1.Object{}
	for i := range 50 {
		ctx, _ := call(t)
		resp, err := c.Create(ctx, &kplanev1.CreateRequest{Object: pod(fmt.Sprintf("before-%02d", i), i)})
		if err != nil {
			t.Fatalf("create before-%02d: %v", i, err)
		}
		acked["Pod/"+resp.GetObject().Key()] = resp.GetObject()
	}
	// ...and more are in flight when it happens. A write that fails may or
	// may not have been applied; one that was acknowledged must survive.
	var mu sync.Mutex
	var wg sync.WaitGroup
	writeCtx, stopWriting := context.WithCancel(t.Context())
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; writeCtx.Err() == nil; i++ {
				resp, err := c.Create(writeCtx, &kplanev1.CreateRequest{Object: pod(fmt.Sprintf("during-%d-%04d", w, i), i)})
				if err != nil {
					return // the server is gone
				}
				mu.Lock()
				acked["Pod/"+resp.GetObject().Key()] = resp.GetObject()
				mu.Unlock()
			}
		}()
	}
	// Kill once the in-flight writers have made progress.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 150 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged within a minute", n)
		}
		ctx, _ := call(t)
		// A read paces this loop on the server instead of a fixed sleep.
		if _, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Namespace", Name: "default"}); err != nil {
			t.Fatalf("get while writing: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	stopWriting()
	wg.Wait()
	var maxAcked int64
	for _, o := range acked {
		r, _ := strconv.ParseInt(o.Meta().GetResourceVersion(), 10, 64)
		maxAcked = max(maxAcked, r)
	}
	t.Logf("%d writes acknowledged before SIGKILL (highest revision %d)", len(acked), maxAcked)

	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, p)

	stored, rev := listAll(t, c)
	for key, want := range acked {
		got, ok := stored[key]
		if !ok {
			t.Errorf("acknowledged %s is missing after SIGKILL and restart", key)
			continue
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s differs after restart:\n got %v\nwant %v", key, got, want)
		}
	}
	if rev < maxAcked {
		t.Errorf("store revision %d after restart is below the highest acknowledged %d", rev, maxAcked)
	}
	ctx2, wait := call(t)
	resp, err := c.Create(ctx2, &kplanev1.CreateRequest{Object: pod("after", 0)}, wait)
	if err != nil {
		t.Fatalf("create after restart: %v", err)
	}
	if r, _ := strconv.ParseInt(resp.GetObject().Meta().GetResourceVersion(), 10, 64); r <= rev {
		t.Errorf("write after restart got revision %d, not above %d", r, rev)
	}
}

// TestAPIServerSIGTERM checks a graceful shutdown: exit status 0 within
// the deadline, a watch ended by the server (not left hanging), and
// everything intact on the next start.
func TestAPIServerSIGTERM(t *testing.T) {
	dataDir := t.TempDir()
	p, c, _ := startAPIServer(t, dataDir)
	ctx, wait := call(t)
	created, err := c.Create(ctx, &kplanev1.CreateRequest{Object: pod("web", 1)}, wait)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	before, _ := listAll(t, c)

	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Watch(wctx, &kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetObject().Key() != created.GetObject().Key() {
		t.Fatalf("initial watch event %v, %v", ev, err)
	}

	termCtx, termCancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer termCancel()
	if err := p.Term(termCtx); err != nil {
		t.Fatalf("SIGTERM: %v (log %s)", err, p.LogPath())
	}
	// The open watch was ended by the server, not left to hang.
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}

	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, p)
	after, _ := listAll(t, c)
	if len(after) != len(before) {
		t.Fatalf("%d objects after SIGTERM and restart, want %d", len(after), len(before))
	}
	for key, want := range before {
		if got := after[key]; !proto.Equal(got, want) {
			t.Errorf("%s differs after restart:\n got %v\nwant %v", key, got, want)
		}
	}
}
