package app_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestSelectControllers(t *testing.T) {
	known := []string{"a", "b", "c"}
	for _, tc := range []struct {
		spec, want, err string
	}{
		{spec: "*", want: "a,b,c"},
		{spec: "*,-b", want: "a,c"},
		{spec: "-b,*", want: "a,c"},
		{spec: "c,a", want: "a,c"},
		{spec: "a, b", want: "a,b"},
		{spec: "*,a", want: "a,b,c"},
		{spec: "a,d", err: `unknown controller "d" (known: a, b, c)`},
		{spec: "*,-d", err: `unknown controller "d"`},
		{spec: "a,,b", err: "empty controller name"},
		{spec: "", err: "empty controller name"},
		{spec: "a,-a", err: `controller "a" is both enabled and disabled`},
		{spec: "-a", err: "selects no controller"},
		{spec: "*,-a,-b,-c", err: "selects no controller"},
	} {
		got, err := app.SelectControllers(tc.spec, known)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.spec, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.spec, err)
		case tc.err == "" && strings.Join(got, ",") != tc.want:
			t.Errorf("%q: %v, want %s", tc.spec, got, tc.want)
		}
	}
}

// hosted is a leader-elected loop reconciling Secrets that also asks for
// the Pod informer, as every owner-of-pods controller does.
func hosted(name string, rec *recorder, ctxs chan<- *app.Context) app.Service {
	return app.Service{
		Name: name, LeaderElected: true, Workers: 2,
		Watches: []app.Watch{{Kind: "Secret"}},
		Setup: func(c *app.Context) (app.Reconciler, error) {
			c.Informers.ForKind("Pod")
			ctxs <- c
			return rec, nil
		},
	}
}

func newRecorder() *recorder { return &recorder{counts: map[string]int{}} }

// fastElection keeps failovers short.
var fastElection = []string{"--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms",
	"--leader-elect-retry-period", "200ms", "--resync-period", "0", "--log-level", "error"}

// startHost runs h until the test ends (or stop is called) and returns the
// Contexts of its services by name and RunHost's result channel.
func startHost(t *testing.T, h app.Host, want int, ctxs chan *app.Context, args ...string) (map[string]*app.Context, context.CancelFunc, *hostRun) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	run := &hostRun{done: make(chan struct{})}
	go func() {
		defer close(run.done)
		run.err = app.RunHost(ctx, h, args)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-run.done:
		case <-time.After(30 * time.Second):
			t.Error("RunHost did not return after cancel")
		}
	})
	got := map[string]*app.Context{}
	for len(got) < want {
		select {
		case c := <-ctxs:
			got[c.Name] = c
		case <-run.done:
			t.Fatalf("RunHost returned early: %v", run.err)
		case <-time.After(30 * time.Second):
			t.Fatal("hosted services did not start")
		}
	}
	return got, cancel, run
}

// hostRun is RunHost's result once done is closed.
type hostRun struct {
	done chan struct{}
	err  error
}

func holder(t *testing.T, c *client.Client, name string) string {
	t.Helper()
	l, err := client.Leases(c).Get(context.Background(), "kplane-system", name)
	if err != nil {
		if client.IsNotFound(err) {
			return ""
		}
		t.Fatal(err)
	}
	return l.GetSpec().GetHolderIdentity()
}

// TestHostSharesOneProcess: two loops in one process share one informer
// per selection and one health server, yet each holds its own lease,
// has its own readiness and its own metric labels.
func TestHostSharesOneProcess(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv)
	recA, recB := newRecorder(), newRecorder()
	ctxs := make(chan *app.Context, 4)
	h := app.Host{Name: "testkcm", Services: []app.Service{
		hosted("actl", recA, ctxs), hosted("bctl", recB, ctxs),
		{Name: "unused", Reconcile: func(context.Context, string) error { return errors.New("never selected") }},
	}}
	got, _, _ := startHost(t, h, 2, ctxs, append([]string{"--controllers=*,-unused", "--apiserver", srv.Addr(), "--health-addr", "127.0.0.1:0", "--id", "kcm-1"}, fastElection...)...)
	a, b := got["actl"], got["bctl"]
	if a.Informers.ForKind("Pod") != b.Informers.ForKind("Pod") || a.Informers.ForKind("Secret") != b.Informers.ForKind("Secret") {
		t.Fatal("the loops of one process must share one informer per selection")
	}
	if a.Client != b.Client || a.Registry != b.Registry || a.HealthAddr() != b.HealthAddr() {
		t.Fatal("the loops of one process must share the connection, registry and health server")
	}
	base := "http://" + a.HealthAddr()
	eventually(t, 20*time.Second, "every loop to lead and be ready", func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == http.StatusOK && a.IsLeader() && b.IsLeader()
	})
	for _, n := range []string{"actl", "bctl"} {
		if code, body := httpGet(t, base+"/readyz/"+n); code != http.StatusOK {
			t.Errorf("/readyz/%s: %d %q", n, code, body)
		}
		if h := holder(t, c, n); h != "kcm-1" {
			t.Errorf("lease %s held by %q, want kcm-1", n, h)
		}
	}
	if code, _ := httpGet(t, base+"/readyz/unused"); code != http.StatusNotFound {
		t.Errorf("/readyz/unused of a loop not selected: %d", code)
	}
	if h := holder(t, c, "unused"); h != "" {
		t.Errorf("a loop that is not selected holds its lease (%q)", h)
	}
	if _, err := client.Secrets(c).Create(context.Background(), secret("s")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "both loops to reconcile the secret", func() bool {
		return recA.count("default/s") > 0 && recB.count("default/s") > 0
	})
	_, metrics := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`kplane_controller_reconciles_total{controller="actl"}`,
		`kplane_controller_reconciles_total{controller="bctl"}`,
		`kplane_leader_is_leader{name="actl"} 1`,
		`kplane_leader_is_leader{name="bctl"} 1`,
		`kplane_workqueue_adds_total{name="actl"}`,
		`kplane_workqueue_adds_total{name="bctl"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHostLoopLosesLeaseAlone: when one hosted loop loses its lease, it
// stops working and stands again; the other loop keeps leading.
func TestHostLoopLosesLeaseAlone(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv)
	ctxs := make(chan *app.Context, 4)
	h := app.Host{Name: "testkcm", Services: []app.Service{hosted("actl", newRecorder(), ctxs), hosted("bctl", newRecorder(), ctxs)}}
	got, _, _ := startHost(t, h, 2, ctxs, append([]string{"--controllers=actl,bctl", "--apiserver", srv.Addr(), "--health-addr", "", "--id", "kcm-1"}, fastElection...)...)
	eventually(t, 20*time.Second, "both loops to lead", func() bool { return got["actl"].IsLeader() && got["bctl"].IsLeader() })

	// Another candidate takes actl's lease (as after a partition): its
	// holder changes under the loop.
	ctx := context.Background()
	l, err := client.Leases(c).Get(ctx, "kplane-system", "actl")
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = "thief"
	l.Spec.LeaseDurationSeconds = 3600
	if _, err := client.Leases(c).Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "actl to stop leading", func() bool { return !got["actl"].IsLeader() })
	if !got["bctl"].IsLeader() {
		t.Fatal("bctl stopped leading when actl lost its lease")
	}
	if h := holder(t, c, "bctl"); h != "kcm-1" {
		t.Fatalf("bctl's lease is held by %q", h)
	}
}

// TestHostMixesWithOwnBinary: the same loop in a Host and in a binary of
// its own never both lead; stopping the binary hands the loop to the Host.
func TestHostMixesWithOwnBinary(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv)
	alone := make(chan *app.Context, 1)
	soloCtx, stopSolo := context.WithCancel(context.Background())
	soloExited := make(chan struct{})
	var soloErr error
	go func() {
		defer close(soloExited)
		soloErr = app.Run(soloCtx, hosted("actl", newRecorder(), alone),
			append([]string{"--apiserver", srv.Addr(), "--health-addr", "", "--id", "solo"}, fastElection...))
	}()
	defer func() {
		stopSolo()
		<-soloExited
	}()
	solo := <-alone
	eventually(t, 20*time.Second, "the binary of its own to lead actl", func() bool { return solo.IsLeader() })

	ctxs := make(chan *app.Context, 4)
	h := app.Host{Name: "testkcm", Services: []app.Service{hosted("actl", newRecorder(), ctxs), hosted("bctl", newRecorder(), ctxs)}}
	got, _, _ := startHost(t, h, 2, ctxs, append([]string{"--controllers=*", "--apiserver", srv.Addr(), "--health-addr", "", "--id", "kcm-1"}, fastElection...)...)
	eventually(t, 20*time.Second, "the host to lead bctl", func() bool { return got["bctl"].IsLeader() })
	// Standby for actl: checked over several renewals of the solo lease.
	for i := 0; i < 10; i++ {
		if got["actl"].IsLeader() {
			t.Fatal("the hosted actl leads while the binary of its own does")
		}
		if h := holder(t, c, "actl"); h != "solo" {
			t.Fatalf("actl's lease held by %q, want solo", h)
		}
		time.Sleep(200 * time.Millisecond) // spacing the observations, not synchronising
	}
	stopSolo()
	<-soloExited
	if soloErr != nil {
		t.Fatalf("solo actl: %v", soloErr)
	}
	eventually(t, 20*time.Second, "the host to take actl over", func() bool { return got["actl"].IsLeader() })
	if h := holder(t, c, "actl"); h != "kcm-1" {
		t.Fatalf("actl's lease held by %q after the handover", h)
	}
}

// TestHostFatalErrorStopsAll: a loop whose Run fails takes the whole
// process down, every loop releasing its lease, and RunHost names it.
func TestHostFatalErrorStopsAll(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv)
	ctxs := make(chan *app.Context, 4)
	failNow := make(chan struct{})
	broken := app.Service{
		Name: "broken", LeaderElected: true,
		Setup: func(c *app.Context) (app.Reconciler, error) { ctxs <- c; return nil, nil },
		Run: func(ctx context.Context, _ *app.Context) error {
			select {
			case <-failNow:
				return errors.New("disk on fire")
			case <-ctx.Done():
				return nil
			}
		},
	}
	h := app.Host{Name: "testkcm", Services: []app.Service{hosted("actl", newRecorder(), ctxs), broken}}
	got, _, run := startHost(t, h, 2, ctxs, append([]string{"--controllers=actl,broken", "--apiserver", srv.Addr(), "--health-addr", "", "--id", "kcm-1"}, fastElection...)...)
	eventually(t, 20*time.Second, "both loops to lead", func() bool { return got["actl"].IsLeader() && got["broken"].IsLeader() })
	close(failNow)
	select {
	case <-run.done:
		if err := run.err; err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "disk on fire") {
			t.Fatalf("RunHost: %v, want broken's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunHost did not stop after a loop failed")
	}
	for _, n := range []string{"actl", "broken"} {
		if h := holder(t, c, n); h != "" {
			t.Errorf("lease %s still held by %q", n, h)
		}
	}
}

func TestHostRejectsBadInput(t *testing.T) {
	svc := func(name string) app.Service {
		return app.Service{Name: name, Reconcile: func(context.Context, string) error { return nil }}
	}
	for _, tc := range []struct {
		h    app.Host
		args []string
		err  string
	}{
		{app.Host{Services: []app.Service{svc("a")}}, nil, "Host.Name is required"},
		{app.Host{Name: "h"}, nil, "Host.Services is empty"},
		{app.Host{Name: "h", Services: []app.Service{svc("a"), svc("a")}}, nil, `two hosted Services are named "a"`},
		{app.Host{Name: "h", Services: []app.Service{svc("a-b")}}, nil, `name "a-b" may not contain`},
		{app.Host{Name: "h", Services: []app.Service{svc("a")}}, []string{"--controllers=b"}, `unknown controller "b"`},
		{app.Host{Name: "h", Services: []app.Service{svc("a")}}, []string{"--a-workers=0"}, "--a-workers must be at least 1"},
		{app.Host{Name: "h", Services: []app.Service{{Name: "a", CheckFlags: func() error { return errors.New("bad x") },
			Reconcile: func(context.Context, string) error { return nil }}}}, nil, "a: bad x"},
	} {
		err := app.RunHost(context.Background(), tc.h, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.err)
		}
	}
}

func dial(t *testing.T, srv *testserver.Server) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
