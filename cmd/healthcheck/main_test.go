package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestTargetURL(t *testing.T) {
	for _, tc := range []struct{ target, path, want string }{
		{"6444", "/readyz", "http://127.0.0.1:6444/readyz"},
		{":10252", "/readyz", "http://127.0.0.1:10252/readyz"},
		{"10.0.0.1:10252", "healthz", "http://10.0.0.1:10252/healthz"},
		{"http://x:1/custom", "/readyz", "http://x:1/custom"},
	} {
		got, err := targetURL(tc.target, tc.path)
		if err != nil || got != tc.want {
			t.Errorf("targetURL(%q, %q) = %q, %v; want %q", tc.target, tc.path, got, err, tc.want)
		}
	}
	for _, bad := range []string{"0", "70000", "nohost"} {
		if got, err := targetURL(bad, "/readyz"); err == nil {
			t.Errorf("targetURL(%q) = %q, want an error", bad, got)
		}
	}
}

func TestRun(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	var out, errb bytes.Buffer
	if code := run([]string{port}, &out, &errb); code != 0 {
		t.Fatalf("ready server: exit %d, stderr %q", code, errb.String())
	}
	ready.Store(false)
	errb.Reset()
	if code := run([]string{port}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "503") {
		t.Fatalf("unready server: exit %d, stderr %q; want 1 and the status", code, errb.String())
	}
	if code := run([]string{"--path", "/nothing", port}, &out, &errb); code != 1 {
		t.Fatalf("404: exit %d, want 1", code)
	}
	if code := run(nil, &out, &errb); code != 2 {
		t.Fatalf("no target: exit %d, want 2", code)
	}
	srv.Close()
	if code := run([]string{port}, &out, &errb); code != 1 {
		t.Fatalf("closed server: exit %d, want 1", code)
	}
}
