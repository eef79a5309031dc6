package health

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kplane_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady atomic.Bool
	notReady.Store(true)
	srv, err := Start("127.0.0.1:0", reg, func() error {
		if notReady.Load() {
			return errors.New("informers not synced")
		}
		return nil
	}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	base := "http://" + srv.Addr()
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "informers not synced") {
		t.Fatalf("/readyz while not ready: %d %q", code, body)
	}
	notReady.Store(false)
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz when ready: %d", code)
	}
	if _, body := get(t, base+"/metrics"); !strings.Contains(body, "kplane_test_total 3") {
		t.Fatalf("/metrics lacks the registered counter:\n%s", body)
	}
}

func TestPortInUseFailsStart(t *testing.T) {
	a, err := Start("127.0.0.1:0", prometheus.NewRegistry(), func() error { return nil }, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	_, err = Start(a.Addr(), prometheus.NewRegistry(), func() error { return nil }, hclog.NewNullLogger())
	if err == nil {
		t.Fatal("a second server on the same address started")
	}
	// The error tells which flag to change.
	if !strings.Contains(err.Error(), "--health-addr") || !strings.Contains(err.Error(), a.Addr()) {
		t.Errorf("error %q names neither --health-addr nor the address", err)
	}
}

func TestReadyChecks(t *testing.T) {
	srv, err := Start("127.0.0.1:0", prometheus.NewRegistry(), func() error { return errors.New("b: not synced") }, hclog.NewNullLogger(),
		WithReadyChecks(map[string]func() error{
			"a": func() error { return nil },
			"b": func() error { return errors.New("not synced") },
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	base := "http://" + srv.Addr()
	if code, _ := get(t, base+"/readyz/a"); code != http.StatusOK {
		t.Fatalf("/readyz/a: %d", code)
	}
	if code, body := get(t, base+"/readyz/b"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not synced") {
		t.Fatalf("/readyz/b: %d %q", code, body)
	}
	if code, _ := get(t, base+"/readyz/c"); code != http.StatusNotFound {
		t.Fatalf("/readyz/c of no check: %d, want 404", code)
	}
}
