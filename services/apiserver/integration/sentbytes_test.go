package integration_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// sentBytes reads kplane_apiserver_sent_bytes_total{method,kind} (0 when absent).
func sentBytes(t *testing.T, metricsURL, method, kind string) float64 {
	t.Helper()
	_, _, body := httpDo(t, http.MethodGet, metricsURL, "")
	prefix := `kplane_apiserver_sent_bytes_total{kind="` + kind + `",method="` + method + `"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			must(t, err, "parse "+line)
			return f
		}
	}
	return 0
}

// TestSentBytesCounted: the bytes of list responses and of watch events
// are counted by method and kind, and grow with what is sent.
func TestSentBytesCounted(t *testing.T) {
	srv, c := start(t)
	url := "http://" + srv.API().HealthAddr() + "/metrics"
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	w, err := c.Watch(ctx, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default"})
	must(t, err, "watch")
	create(t, c, kplanev1.MustWrap(&kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Name: "s", Namespace: "default"},
		StringData: map[string]string{"k": strings.Repeat("x", 4000)}}))
	for {
		ev, err := w.Recv()
		must(t, err, "receive the event")
		if ev.GetObject().Meta().GetName() == "s" {
			break
		}
	}
	if got := sentBytes(t, url, "Watch", "Secret"); got < 4000 {
		t.Fatalf("watch bytes of Secret: %v, want at least the 4000-byte secret", got)
	}
	before := sentBytes(t, url, "List", "Secret")
	_, err = c.List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
	must(t, err, "list")
	if got := sentBytes(t, url, "List", "Secret"); got-before < 4000 {
		t.Fatalf("a list of the secret added %v bytes", got-before)
	}
}
