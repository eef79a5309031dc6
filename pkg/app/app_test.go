package app_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// recorder is the tiny controller under test: it records reconciled keys,
// fails "default/flaky" once, and holds "default/slow" until released.
type recorder struct {
	mu       sync.Mutex
	counts   map[string]int
	slowIn   chan struct{}
	slowOut  chan struct{}
	slowCtx  error // ctx.Err() seen by the slow reconcile when released
	slowDone chan struct{}
}

func (r *recorder) Reconcile(ctx context.Context, key string) error {
	r.mu.Lock()
	r.counts[key]++
	n := r.counts[key]
	r.mu.Unlock()
	switch key {
	case "default/flaky":
		if n == 1 {
			return errors.New("transient failure")
		}
	case "default/slow":
		if n == 1 {
			close(r.slowIn)
			<-r.slowOut
			r.mu.Lock()
			r.slowCtx = ctx.Err()
			r.mu.Unlock()
			close(r.slowDone)
		}
	}
	return nil
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[key]
}

// cleanExit waits for the error of a Run whose context was cancelled and
// fails the test unless it is nil.
func cleanExit(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func secret(name string) *kplanev1.Secret {
	return &kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"}}
}

func TestControllerEndToEnd(t *testing.T) {
	srv := testserver.Start(t)
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	}()
	ctx := context.Background()

	rec := &recorder{counts: map[string]int{}, slowIn: make(chan struct{}), slowOut: make(chan struct{}), slowDone: make(chan struct{})}
	addrCh := make(chan string, 1)
	svc := app.Service{
		Name:          "testctl",
		LeaderElected: true,
		Workers:       2,
		Watches: []app.Watch{
			{Kind: "Secret"},
			{Kind: "Pod", MapToKey: app.OwnerKey("Secret")},
		},
		Setup: func(c *app.Context) (app.Reconciler, error) {
			if c.Client == nil || c.Informers == nil || c.Registry == nil || c.Identity != "test-1" {
				return nil, fmt.Errorf("incomplete context %+v", c)
			}
			addrCh <- c.HealthAddr()
			return rec, nil
		},
	}
	args := []string{
		"--apiserver", srv.Addr(), "--health-addr", "127.0.0.1:0", "--log-level", "warn",
		"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
		"--leader-elect-retry-period", "200ms", "--id", "test-1", "--resync-period", "0",
		"--shutdown-grace-period", "2s",
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, svc, args) }()
	var base string
	select {
	case a := <-addrCh:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}

	if code, body := httpGet(t, base+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	eventually(t, 20*time.Second, "/readyz to turn ready", func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == 200
	})

	secrets := client.Secrets(c)
	if _, err := secrets.Create(ctx, secret("a")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "reconcile of default/a", func() bool { return rec.count("default/a") >= 1 })

	// A pod owned by the secret wakes the owner's key, not its own.
	before := rec.count("default/a")
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "a-1", Namespace: "default", OwnerReferences: []*kplanev1.OwnerReference{
			{Kind: "Secret", Name: "a", Uid: "uid-a", Controller: true},
		}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := client.Pods(c).Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "owner reconcile after a pod event", func() bool { return rec.count("default/a") > before })
	if n := rec.count("default/a-1"); n != 0 {
		t.Fatalf("the pod's own key was reconciled %d times", n)
	}

	// A failing reconcile is retried.
	if _, err := secrets.Create(ctx, secret("flaky")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "retry of default/flaky", func() bool { return rec.count("default/flaky") >= 2 })

	_, metrics := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`kplane_controller_reconciles_total{controller="testctl"}`,
		`kplane_controller_reconcile_errors_total{controller="testctl"} 1`,
		`kplane_controller_reconcile_duration_seconds_bucket{controller="testctl"`,
		`kplane_leader_is_leader{name="testctl"} 1`,
		`kplane_workqueue_adds_total{name="testctl"}`,
		`kplane_informer_events_total{kind="Secret",type="added"}`,
		"go_goroutines",
		"process_cpu_seconds_total",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// SIGTERM-equivalent while a reconcile is in flight: the reconcile
	// finishes with a live context, then the lease is released and Run
	// returns nil.
	if _, err := secrets.Create(ctx, secret("slow")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.slowIn:
	case <-time.After(20 * time.Second):
		t.Fatal("slow reconcile never started")
	}
	stop()
	eventually(t, 10*time.Second, "/readyz to report shutting down", func() bool {
		code, body := httpGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "shutting down")
	})
	close(rec.slowOut)
	cleanExit(t, done)
	<-rec.slowDone
	if rec.slowCtx != nil {
		t.Fatalf("in-flight reconcile was cancelled (%v) instead of finishing", rec.slowCtx)
	}
	lease, err := client.Leases(c).Get(ctx, "kplane-system", "testctl")
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.GetSpec().GetHolderIdentity(); h != "" {
		t.Fatalf("lease still held by %q after shutdown", h)
	}
}

func TestUnelectedServiceRun(t *testing.T) {
	srv := testserver.Start(t)
	started := make(chan *app.Context, 1)
	svc := app.Service{
		Name: "agent",
		Run: func(ctx context.Context, c *app.Context) error {
			started <- c
			<-ctx.Done()
			return nil
		},
		Setup: func(c *app.Context) (app.Reconciler, error) {
			c.Informers.ForKind("Node") // a service may add informers of its own
			return nil, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, svc, []string{"--apiserver", srv.Addr(), "--health-addr", "", "--log-format", "json", "--log-level", "error"})
	}()
	var c *app.Context
	select {
	case c = <-started:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	if !c.IsLeader() || c.HealthAddr() != "" || c.Identity != "" {
		t.Fatalf("unelected service: leader=%v health=%q identity=%q", c.IsLeader(), c.HealthAddr(), c.Identity)
	}
	if !c.Informers.ForKind("Node").HasSynced() {
		t.Fatal("Run started before the caches synced")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestFlagErrors(t *testing.T) {
	ctx := context.Background()
	noop := func(context.Context, string) error { return nil }
	svc := app.Service{Name: "x", Reconcile: noop}
	for _, args := range [][]string{
		{"--log-format", "xml"},
		{"--log-level", "loud"},
		{"--workers", "0"},
		{"--no-such-flag"},
		{"extra-arg"},
		{"--leader-elect=false"}, // not a leader-elected service: no such flag
	} {
		if err := app.Run(ctx, svc, args); err == nil {
			t.Errorf("args %v accepted", args)
		}
	}
	if err := app.Run(ctx, svc, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	elected := app.Service{Name: "x", Reconcile: noop, LeaderElected: true}
	if err := app.Run(ctx, elected, []string{"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
		"--leader-elect-retry-period", "1s", "--shutdown-grace-period", "2s"}); err == nil {
		t.Error("a shutdown grace period longer than the lease allows accepted")
	}
	if err := app.Run(ctx, app.Service{Name: "x"}, nil); err == nil {
		t.Error("a service with nothing to do accepted")
	}
	if err := app.Run(ctx, app.Service{Name: "x", Run: func(context.Context, *app.Context) error { return nil }, Watches: []app.Watch{{Kind: "Pod"}}}, nil); err == nil {
		t.Error("watches without a reconciler accepted")
	}
	if err := app.Run(ctx, app.Service{Name: "x", Reconcile: noop, Watches: []app.Watch{{Kind: "Nope"}}}, nil); err == nil {
		t.Error("unknown kind accepted")
	}
	if err := app.Run(ctx, app.Service{Reconcile: noop}, nil); err == nil {
		t.Error("nameless service accepted")
	}
	// A port in use fails the start.
	taken := app.Service{Name: "x", Reconcile: noop}
	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(srvCtx, app.Service{Name: "holder", Run: func(ctx context.Context, c *app.Context) error {
			<-ctx.Done()
			return nil
		}, Setup: func(c *app.Context) (app.Reconciler, error) {
			addrCh <- c.HealthAddr()
			return nil, nil
		}}, []string{"--health-addr", "127.0.0.1:0", "--apiserver", "127.0.0.1:1"})
	}()
	addr := <-addrCh
	if err := app.Run(ctx, taken, []string{"--health-addr", addr}); err == nil {
		t.Error("a health address in use accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFailingRunStopsTheService(t *testing.T) {
	boom := errors.New("boom")
	err := app.Run(context.Background(), app.Service{
		Name: "failer",
		Run:  func(context.Context, *app.Context) error { return boom },
	}, []string{"--apiserver", "127.0.0.1:1", "--log-level", "error"})
	if !errors.Is(err, boom) {
		t.Fatalf("want the loop's error, got %v", err)
	}
}
