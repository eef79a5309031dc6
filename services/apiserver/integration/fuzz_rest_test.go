package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// The REST fuzz tests run their seed corpora in every `go test` (and so
// in `make test`). To fuzz longer, one target at a time:
//
//	cd services/apiserver && go test -run '^$' -fuzz '^FuzzRESTSelectors$' -fuzztime 5m ./integration/
//	cd services/apiserver && go test -run '^$' -fuzz '^FuzzRESTPatch$' -fuzztime 5m ./integration/
//
// A failing input is written under integration/testdata/fuzz/<Target>/
// and replayed by every later `go test`; commit it with the fix.

// fuzzHTTP sends one request and returns the code and body; a transport
// failure fails the test (the server must answer every request).
func fuzzHTTP(t *testing.T, method, u, contentType string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		t.Skip("not a valid request") // a URL net/http itself refuses to build
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, u, err)
	}
	return resp.StatusCode, raw
}

// requireClientError checks a refusal: a 4xx carrying a Status with that
// code and a message that names the problem (one of names).
func requireClientError(t *testing.T, code int, raw []byte, names ...string) {
	t.Helper()
	if code < 400 || code >= 500 {
		t.Fatalf("answer %d, want 2xx or 4xx: %s", code, raw)
	}
	var st restStatus
	if err := json.Unmarshal(raw, &st); err != nil || st.Kind != "Status" || st.Code != code || st.Message == "" {
		t.Fatalf("%d without a Status naming the problem: %s", code, raw)
	}
	for _, n := range names {
		if strings.Contains(st.Message, n) {
			return
		}
	}
	if len(names) > 0 {
		t.Fatalf("Status %q names none of %q", st.Message, names)
	}
}

// FuzzRESTSelectors sends arbitrary labelSelector and fieldSelector
// query parameters to a LIST and a WATCH of pods: the server answers 200
// with a PodList, or 400 with a Status naming the parameter; never 5xx.
func FuzzRESTSelectors(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""},
		{"app=web", ""},
		{"app==web,tier!=db", "spec.nodeName=n1"},
		{"app in (web,db),tier notin (fe)", "metadata.name!=x"},
		{"!legacy", "status.phase=Running"},
		{"tier", "metadata.namespace=default"},
		{"a==b==c", ""},
		{"app in (", ""},
		{"", "spec.nodeName"},
		{"", "no.such.field=1"},
		{"x=" + strings.Repeat("y", 70), ""},
		{"a,b=,", "=,="},
		{"\x00", "\xff"},
	} {
		f.Add(s[0], s[1])
	}
	srv := testserver.Start(f)
	c := srv.Client()
	ctx := context.Background()
	if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newPod("default", "web", map[string]string{"app": "web"})}); err != nil {
		f.Fatal(err)
	}
	base := "http://" + srv.Addr() + "/api/v1/namespaces/default/pods?"

	f.Fuzz(func(t *testing.T, labels, fields string) {
		q := url.Values{"labelSelector": {labels}, "fieldSelector": {fields}}
		code, raw := fuzzHTTP(t, http.MethodGet, base+q.Encode(), "", nil)
		if code == http.StatusOK {
			var list struct {
				Kind string `json:"kind"`
			}
			if err := json.Unmarshal(raw, &list); err != nil || list.Kind != "PodList" {
				t.Fatalf("200 without a PodList: %s", raw)
			}
		} else {
			requireClientError(t, code, raw, "labelSelector", "fieldSelector", "selector", "field label")
		}
		// A watch with the same selectors answers the same way before any
		// event: a refusal as a Status, an acceptance as a 200 stream that
		// timeoutSeconds ends.
		q.Set("watch", "true")
		q.Set("timeoutSeconds", "1")
		wcode, wraw := fuzzHTTP(t, http.MethodGet, base+q.Encode(), "", nil)
		if (wcode == http.StatusOK) != (code == http.StatusOK) {
			t.Fatalf("LIST answered %d, WATCH %d: %s", code, wcode, wraw)
		}
		if wcode != http.StatusOK {
			requireClientError(t, wcode, wraw)
		}
	})
}

// FuzzRESTPatch sends arbitrary bodies of each patch content type to a
// fixed pod. The server answers 2xx or 4xx with a Status, never 5xx; a
// refused patch changes nothing; an accepted one yields an object the
// store holds as valid: writing it back unchanged (PUT) succeeds without
// a new resourceVersion.
func FuzzRESTPatch(f *testing.F) {
	types := []string{
		"application/merge-patch+json",
		"application/json-patch+json",
		"application/strategic-merge-patch+json",
		"application/apply-patch+yaml",
	}
	for _, s := range []struct {
		typ  uint8
		body string
	}{
		{0, `{"metadata":{"labels":{"a":"b"}}}`},
		{0, `{"spec":{"containers":[{"name":"app","image":"nginx:1.26"}]}}`},
		{0, `{"spec":{"containers":null}}`},
		{0, `{"metadata":{"name":"other"}}`},
		{0, `{"status":{"phase":"Running"}}`},
		{0, `[]`},
		{1, `[{"op":"add","path":"/metadata/labels/x","value":"y"}]`},
		{1, `[{"op":"replace","path":"/spec/containers/0/image","value":"busybox"}]`},
		{1, `[{"op":"remove","path":"/spec"}]`},
		{1, `[{"op":"test","path":"/metadata/name","value":"nope"}]`},
		{1, `[{"op":"move","from":"/metadata/labels","path":"/metadata/annotations"}]`},
		{1, `{"op":"add"}`},
		{2, `{"spec":{"containers":[{"name":"app","image":"nginx:1.27"}]}}`},
		{2, `{"spec":{"containers":[{"name":"side","image":"busybox"}]}}`},
		{2, `{"spec":{"$setElementOrder/containers":[{"name":"app"}]}}`},
		{2, `{"metadata":{"labels":{"$patch":"delete"}}}`},
		{2, `{"spec":{"containers":[{"$patch":"replace"}]}}`},
		{2, `{"spec":{"containers":[{"name":[]}]}}`}, // panicked in strategicpatch
		{3, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    owner: fuzz\n"},
		{3, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx:1.28\n"},
		{3, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: other\n"},
		{3, "kind: [\n"},
		{0, "\x00"},
		{1, ""},
		{2, `{"spec":{"containers":[{"name":"app","ports":[{"containerPort":"x"}]}]}}`},
	} {
		f.Add(s.typ, []byte(s.body))
	}
	srv := testserver.Start(f)
	c := srv.Client()
	fixed := newPod("default", "web", map[string]string{"app": "web"})
	if _, err := c.Create(context.Background(), &kplanev1.CreateRequest{Object: fixed}); err != nil {
		f.Fatal(err)
	}
	u := "http://" + srv.Addr() + "/api/v1/namespaces/default/pods/web"

	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		before, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "web"})
		must(t, err, "get the pod")
		ct := types[int(typ)%len(types)]
		code, raw := fuzzHTTP(t, http.MethodPatch, u+"?fieldManager=fuzz", ct, body)
		if code < 200 || code >= 300 {
			requireClientError(t, code, raw)
			after, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "web"})
			must(t, err, "get the pod")
			if !proto.Equal(before.GetObject(), after.GetObject()) {
				t.Fatalf("a refused %s (%d) changed the pod", ct, code)
			}
			return
		}
		obj, err := decodeObject(raw)
		if err != nil {
			t.Fatalf("%s answered %d with no Pod: %v: %s", ct, code, err, raw)
		}
		// The stored object is valid: writing it back is a no-op.
		again, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: obj})
		if err != nil {
			t.Fatalf("the patched pod does not pass validation when written back: %v", err)
		}
		if again.GetObject().Meta().GetResourceVersion() != obj.Meta().GetResourceVersion() {
			t.Fatalf("writing the patched pod back unchanged moved its resourceVersion")
		}
		// Put the fixed pod back for the next input: a pod's spec is mostly
		// immutable, so delete (at once) and create it again, after
		// dropping any finalizer the patch added.
		if len(obj.Meta().GetFinalizers()) > 0 {
			obj.Meta().Finalizers, obj.Meta().ResourceVersion = nil, ""
			_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: obj})
			must(t, err, "drop the finalizers")
		}
		_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web", GracePeriodSeconds: proto.Int64(0)})
		must(t, err, "delete the patched pod")
		_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: proto.Clone(fixed).(*kplanev1.Object)})
		must(t, err, "recreate the fixed pod")
	})
}
