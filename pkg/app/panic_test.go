package app_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// panicky panics on the first two reconciles of "default" and records
// every other call.
type panicky struct {
	mu    sync.Mutex
	calls map[string]int
}

func (p *panicky) Reconcile(_ context.Context, key string) error {
	p.mu.Lock()
	p.calls[key]++
	n := p.calls[key]
	p.mu.Unlock()
	if key == "default" && n <= 2 {
		var m map[string]int
		m["nil map write"] = 1 //nolint:staticcheck // SA5000 is the point: a real runtime panic, not a hand-made one
	}
	return nil
}

func (p *panicky) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// runService runs svc until the test ends and returns its Context.
func runService(t *testing.T, svc app.Service, args ...string) *app.Context {
	t.Helper()
	started := make(chan *app.Context, 1)
	setup := svc.Setup
	svc.Setup = func(c *app.Context) (app.Reconciler, error) {
		started <- c
		if setup != nil {
			return setup(c)
		}
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, svc, args) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case c := <-started:
		return c
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
		return nil
	}
}

// TestReconcilePanicIsRecovered: a reconcile that panics does not kill the
// process; the panic is counted and the key retried with backoff until it
// succeeds, while other keys carry on.
func TestReconcilePanicIsRecovered(t *testing.T) {
	srv := testserver.Start(t)
	rec := &panicky{calls: map[string]int{}}
	c := runService(t, app.Service{
		Name:    "paniccheck",
		Watches: []app.Watch{{Kind: "Namespace"}},
		Setup:   func(*app.Context) (app.Reconciler, error) { return rec, nil },
	}, "--apiserver", srv.Addr(), "--health-addr", "127.0.0.1:0", "--log-level", "error")
	eventually(t, 20*time.Second, "the panicking key is retried until it succeeds", func() bool {
		return rec.count("default") >= 3
	})
	if rec.count("kplane-system") == 0 {
		t.Fatal("other keys were not reconciled")
	}
	_, body := httpGet(t, "http://"+c.HealthAddr()+"/metrics")
	if !strings.Contains(body, `kplane_controller_reconcile_panics_total{controller="paniccheck"} 2`) {
		t.Fatalf("panic counter missing or wrong:\n%s", grep(body, "panics"))
	}
	if !strings.Contains(body, `kplane_controller_reconcile_errors_total{controller="paniccheck"} 2`) {
		t.Fatalf("panics not counted as failed reconciles:\n%s", grep(body, "errors_total"))
	}
}

// TestProfilingOnLoopbackOnly: /debug/pprof/ is served on a loopback
// health address by default, and --enable-profiling=false turns it off.
func TestProfilingOnLoopbackOnly(t *testing.T) {
	srv := testserver.Start(t)
	for _, tc := range []struct {
		flag string
		want int
	}{{"", http.StatusOK}, {"--enable-profiling=false", http.StatusNotFound}} {
		args := []string{"--apiserver", srv.Addr(), "--health-addr", "127.0.0.1:0", "--log-level", "error"}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		c := runService(t, app.Service{Name: "profiled", Run: func(ctx context.Context, _ *app.Context) error {
			<-ctx.Done()
			return nil
		}}, args...)
		if code, _ := httpGet(t, "http://"+c.HealthAddr()+"/debug/pprof/"); code != tc.want {
			t.Errorf("%q: /debug/pprof/ answered %d, want %d", tc.flag, code, tc.want)
		}
	}
}

func grep(body, word string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
