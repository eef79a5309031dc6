package informer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastBackoff keeps retries quick so tests converge in seconds.
var fastBackoff = client.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 300 * time.Millisecond}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

func startServer(t *testing.T) (*testserver.Server, *client.Client) {
	t.Helper()
	srv := testserver.Start(t)
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

func pod(name string, labels map[string]string) *kplanev1.Pod {
	return &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

// gatedClient lets a test hold the informer's (re-)watches and break the
// current ones, to make "the informer was away while history was
// compacted" deterministic.
type gatedClient struct {
	kplanev1.ResourcesClient

	mu      sync.Mutex
	gate    chan struct{} // non-nil: List and Watch wait until it is closed
	cancels []context.CancelFunc
	blocked chan struct{} // receives when a call waits at the gate
}

func newGated(c kplanev1.ResourcesClient) *gatedClient {
	return &gatedClient{ResourcesClient: c, blocked: make(chan struct{}, 100)}
}

// wait holds a call while the gate is shut.
func (g *gatedClient) wait(ctx context.Context) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate == nil {
		return nil
	}
	g.blocked <- struct{}{}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// List waits at the gate too: an informer that was relisting when the
// gate shut (its watch had failed) is away as well, and must show it.
func (g *gatedClient) List(ctx context.Context, req *kplanev1.ListRequest, opts ...grpc.CallOption) (*kplanev1.ListResponse, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.ResourcesClient.List(ctx, req, opts...)
}

func (g *gatedClient) Watch(ctx context.Context, req *kplanev1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[kplanev1.WatchResponse], error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	g.cancels = append(g.cancels, cancel)
	g.mu.Unlock()
	return g.ResourcesClient.Watch(ctx, req, opts...)
}

// hold makes future lists and watches wait and breaks the open watches.
func (g *gatedClient) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	cancels := g.cancels
	g.cancels = nil
	g.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// release lets watches through again.
func (g *gatedClient) release() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

// waitWatching waits until a watch is open through g, so that hold
// breaks it: an informer just synced may not have opened it yet, and a
// hold then only delays the first open.
func (g *gatedClient) waitWatching(t *testing.T) {
	t.Helper()
	eventually(t, 20*time.Second, "the informer to open its watch", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.cancels) > 0
	})
}

func (g *gatedClient) waitBlocked(t *testing.T) {
	t.Helper()
	select {
	case <-g.blocked:
	case <-time.After(20 * time.Second):
		t.Fatal("the informer never tried to list or watch again")
	}
}

// recorder applies the notifications it receives to its own map: if the
// informer delivered every final state, the map equals the apiserver's.
type recorder struct {
	mu         sync.Mutex
	view       map[string]string // key -> resourceVersion
	adds       int
	updates    int
	deletes    int
	tombstones []informer.DeletedFinalStateUnknown
	resyncs    map[string]int
	order      []string // "add key", "update key", "delete key"
}

func newRecorder() *recorder {
	return &recorder{view: map[string]string{}, resyncs: map[string]int{}}
}

func (r *recorder) handler() informer.Handler {
	return informer.Handler{
		OnAdd: func(o *kplanev1.Object) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.adds++
			r.view[o.Key()] = o.Meta().GetResourceVersion()
			r.order = append(r.order, "add "+o.Key())
		},
		OnUpdate: func(old, o *kplanev1.Object) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if old == o {
				r.resyncs[o.Key()]++
			} else {
				r.updates++
				r.order = append(r.order, "update "+o.Key())
			}
			r.view[o.Key()] = o.Meta().GetResourceVersion()
		},
		OnDelete: func(obj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.deletes++
			var key string
			switch d := obj.(type) {
			case informer.DeletedFinalStateUnknown:
				r.tombstones = append(r.tombstones, d)
				key = d.Key
			case *kplanev1.Object:
				key = d.Key()
			default:
				panic(fmt.Sprintf("OnDelete got %T", obj))
			}
			delete(r.view, key)
			r.order = append(r.order, "delete "+key)
		},
	}
}

func (r *recorder) snapshot() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.view))
	for k, v := range r.view {
		out[k] = v
	}
	return out
}

// cacheView is an informer's cache as key -> resourceVersion.
func cacheView(inf *informer.Informer) map[string]string {
	out := map[string]string{}
	for _, o := range inf.Store().List() {
		out[o.Key()] = o.Meta().GetResourceVersion()
	}
	return out
}

// listView is a fresh List from the apiserver as key -> resourceVersion.
func listView(t *testing.T, c *client.Client, kind string) (map[string]string, error) {
	t.Helper()
	out := map[string]string{}
	_, err := client.ListPages(context.Background(), c, &kplanev1.ListRequest{Kind: kind, Limit: 100}, func(items []*kplanev1.Object) error {
		for _, o := range items {
			out[o.Key()] = o.Meta().GetResourceVersion()
		}
		return nil
	})
	return out, err
}

func equalViews(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// runInformer runs inf until the test ends and waits for it to stop.
func runInformer(t *testing.T, inf *informer.Informer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := inf.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if !informer.WaitForCacheSync(sctx, inf) {
		t.Fatal("informer did not sync")
	}
}
