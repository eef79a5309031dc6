package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitSchemeNamePort(t *testing.T) {
	for in, want := range map[string][3]string{
		"web":          {"", "web", ""},
		"web:80":       {"", "web", "80"},
		"web:http":     {"", "web", "http"},
		"http:web:80":  {"http", "web", "80"},
		"https:web:80": {"https", "web", "80"},
		"http:web:":    {"http", "web", ""},
	} {
		s, n, p, ok := splitSchemeNamePort(in)
		if !ok || [3]string{s, n, p} != want {
			t.Errorf("%q: got %q %q %q %v, want %v", in, s, n, p, ok, want)
		}
	}
	for _, bad := range []string{"", ":80", "ftp:web:80", "a:b:c:d"} {
		if _, _, _, ok := splitSchemeNamePort(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBackendPath(t *testing.T) {
	for in, want := range map[string]string{
		"/api/v1/namespaces/proxy/services/proxy:80/proxy":            "/",
		"/api/v1/namespaces/default/services/web:80/proxy/":           "/",
		"/api/v1/namespaces/default/services/web:80/proxy/a/b/":       "/a/b/",
		"/api/v1/namespaces/default/pods/p/proxy/a%2Fb/c":             "/a%2Fb/c",
		"/api/v1/namespaces/default/services/web/proxy/proxy/x?y=1#z": "/proxy/x",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := backendPath(u).EscapedPath(); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}

// failingGetter answers every Get with err.
type failingGetter struct{ err error }

func (f failingGetter) Get(context.Context, string, string, string) (*kplanev1.Object, error) {
	return nil, f.err
}

func TestStoreErrorsBecomeStatuses(t *testing.T) {
	for code, want := range map[codes.Code]int{
		codes.NotFound:         http.StatusNotFound,
		codes.Unavailable:      http.StatusServiceUnavailable,
		codes.InvalidArgument:  http.StatusBadRequest,
		codes.DeadlineExceeded: http.StatusGatewayTimeout,
		codes.Internal:         http.StatusInternalServerError,
	} {
		p := New(failingGetter{status.Error(code, "boom")}, nil)
		mux := http.NewServeMux()
		p.Register(mux)
		for _, path := range []string{"/api/v1/namespaces/default/services/web:80/proxy/", "/api/v1/namespaces/default/pods/p/proxy/"} {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			var st struct {
				Kind   string
				Code   int
				Reason string
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != want || st.Code != want || st.Kind != "Status" ||
				rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("%v on %s: %d %s (%v)", code, path, rec.Code, rec.Body, err)
			}
		}
	}
}
