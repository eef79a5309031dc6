package authn

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// TestMiddleware: a refused request never reaches the handler, is
// answered by refuse and logged once without the token; an accepted one
// carries its user in the context.
func TestMiddleware(t *testing.T) {
	tf, err := ParseTokenFile(strings.NewReader("good-token,alice,u1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	c := New(Config{Tokens: []TokenAuthenticator{tf}, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
	var seen *user.Info
	h := c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = user.From(r.Context())
	}), func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusUnauthorized) })

	req := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	req.Header.Set("Authorization", "Bearer secret-wrong-token")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || seen != nil {
		t.Fatalf("bad token: %d, handler saw %v", rec.Code, seen)
	}
	if out := logs.String(); strings.Count(out, "request refused") != 1 || strings.Contains(out, "secret-wrong-token") || !strings.Contains(out, "path=/api/v1/pods") {
		t.Fatalf("refusal log: %q", out)
	}

	req = httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	req.Header.Set("Authorization", "Bearer good-token")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || seen == nil || seen.Name != "alice" {
		t.Fatalf("good token: %d, user %+v", rec.Code, seen)
	}
}
