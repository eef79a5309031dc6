package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// restClient speaks Kubernetes' REST to the apiserver's main listener.
type restClient struct {
	t    *testing.T
	base string
}

type restResp struct {
	code   int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (c *restClient) do(method, path, contentType string, body any, header ...string) restResp {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	out := restResp{code: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &out.body) // 304 and streams have no single object
	return out
}

func (r restResp) str(path ...string) string {
	var v any = r.body
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func webRS(replicas int) map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx"}}},
			},
		},
	}
}

// TestRESTDiscovery: /version reports API level 1.32; the legacy and the
// aggregated discovery documents name every kind with its group/version,
// plural, short names and status subresource; the aggregated one has an
// ETag that answers 304.
func TestRESTDiscovery(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	v := c.do("GET", "/version", "", nil)
	if v.code != 200 || v.str("major") != "1" || v.str("minor") != "32" {
		t.Fatalf("/version: %d %s", v.code, v.raw)
	}
	core := c.do("GET", "/api/v1", "", nil)
	if !bytes.Contains(core.raw, []byte(`{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["po"],"categories":["all"]}`)) ||
		!bytes.Contains(core.raw, []byte(`"name":"pods/status"`)) {
		t.Errorf("/api/v1 lacks pods or pods/status: %s", core.raw)
	}
	apps := c.do("GET", "/apis/apps/v1", "", nil)
	if apps.str("groupVersion") != "apps/v1" || !bytes.Contains(apps.raw, []byte(`"shortNames":["rs"]`)) {
		t.Errorf("/apis/apps/v1: %s", apps.raw)
	}
	groups := c.do("GET", "/apis", "", nil)
	for _, g := range []string{"apps", "batch", "coordination.k8s.io", "storage.k8s.io"} {
		if !bytes.Contains(groups.raw, []byte(`"name":"`+g+`"`)) {
			t.Errorf("/apis lacks %s: %s", g, groups.raw)
		}
	}
	const agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	a := c.do("GET", "/apis", "", nil, "Accept", agg+",application/json")
	if ct := a.header.Get("Content-Type"); ct != agg {
		t.Fatalf("aggregated Content-Type %q", ct)
	}
	if a.str("kind") != "APIGroupDiscoveryList" || !bytes.Contains(a.raw, []byte(`"resource":"replicasets"`)) ||
		!bytes.Contains(a.raw, []byte(`"subresource":"status"`)) {
		t.Errorf("aggregated /apis: %s", a.raw)
	}
	tag := a.header.Get("ETag")
	if tag == "" {
		t.Fatal("aggregated discovery has no ETag")
	}
	if again := c.do("GET", "/apis", "", nil, "Accept", agg, "If-None-Match", tag); again.code != http.StatusNotModified {
		t.Errorf("If-None-Match with the current ETag: %d, want 304", again.code)
	}
	if bad := c.do("GET", "/apis/nope.example/v1", "", nil); bad.code != 404 || bad.str("reason") != "NotFound" {
		t.Errorf("unknown group: %d %s", bad.code, bad.raw)
	}
}

// TestRESTCRUD drives one ReplicaSet through create, get, list with
// selectors, update with a stale resourceVersion, the status
// subresource, the three patch types and delete, checking Kubernetes'
// Status errors on the way; what REST wrote is what gRPC reads.
func TestRESTCRUD(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const coll = "/apis/apps/v1/namespaces/default/replicasets"

	created := c.do("POST", coll, "application/json", webRS(2))
	if created.code != 201 || created.str("kind") != "ReplicaSet" || created.str("apiVersion") != "apps/v1" {
		t.Fatalf("create: %d %s", created.code, created.raw)
	}
	rv := created.str("metadata", "resourceVersion")
	if dup := c.do("POST", coll, "application/json", webRS(2)); dup.code != 409 || dup.str("reason") != "AlreadyExists" ||
		dup.str("message") != `replicasets.apps "web" already exists` {
		t.Errorf("second create: %d %s", dup.code, dup.raw)
	}
	// gRPC sees what REST wrote.
	g, err := srv.Client().Get(context.Background(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "web"})
	if err != nil || g.GetObject().GetReplicaSet().GetSpec().GetReplicas() != 2 {
		t.Fatalf("gRPC Get after REST create: %v %v", g, err)
	}

	if nf := c.do("GET", coll+"/nope", "", nil); nf.code != 404 || nf.str("message") != `replicasets.apps "nope" not found` {
		t.Errorf("get missing: %d %s", nf.code, nf.raw)
	}
	bad := webRS(-1)
	bad["metadata"].(map[string]any)["name"] = "bad"
	inv := c.do("POST", coll, "application/json", bad)
	if inv.code != 422 || inv.str("reason") != "Invalid" || !bytes.Contains(inv.raw, []byte(`"field":"spec.replicas"`)) {
		t.Errorf("invalid create: %d %s", inv.code, inv.raw)
	}
	unknown := webRS(1)
	unknown["metadata"].(map[string]any)["name"] = "unknown"
	unknown["spec"].(map[string]any)["replica"] = 1
	if u := c.do("POST", coll+"?fieldValidation=Strict", "application/json", unknown); u.code != 400 || !strings.Contains(u.str("message"), `spec.replica`) {
		t.Errorf("unknown field, Strict: %d %s", u.code, u.raw)
	}
	if u := c.do("POST", coll+"?fieldValidation=Warn", "application/json", unknown); u.code != 201 || !strings.Contains(u.header.Get("Warning"), "spec.replica") {
		t.Errorf("unknown field, Warn: %d %v %s", u.code, u.header, u.raw)
	}
	if dr := c.do("POST", coll+"?dryRun=All", "application/json", webRS(1)); dr.code != 409 || dr.str("reason") != "AlreadyExists" {
		t.Errorf("dry-run create of an existing name: %d %s, want 409 (TestRESTDryRun covers dry runs)", dr.code, dr.raw)
	}

	list := c.do("GET", coll+"?labelSelector=app%3Dweb&limit=1", "", nil)
	if list.str("kind") != "ReplicaSetList" || list.str("apiVersion") != "apps/v1" || list.str("metadata", "continue") == "" {
		t.Errorf("list with limit 1 of 2: %s", list.raw)
	}
	items, _ := list.body["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["kind"] != "ReplicaSet" {
		t.Errorf("list items: %s", list.raw)
	}
	if none := c.do("GET", coll+"?fieldSelector=metadata.name%3Dzzz", "", nil); !bytes.Contains(none.raw, []byte(`"items":[]`)) {
		t.Errorf("field selector matching nothing: %s", none.raw)
	}
	if badSel := c.do("GET", coll+"?labelSelector=a%3D%3D%3Db", "", nil); badSel.code != 400 {
		t.Errorf("bad selector: %d %s", badSel.code, badSel.raw)
	}

	upd := webRS(3)
	upd["metadata"].(map[string]any)["resourceVersion"] = rv
	if u := c.do("PUT", coll+"/web", "application/json", upd); u.code != 200 || u.str("metadata", "resourceVersion") == rv {
		t.Fatalf("update: %d %s", u.code, u.raw)
	}
	if stale := c.do("PUT", coll+"/web", "application/json", upd); stale.code != 409 || stale.str("reason") != "Conflict" {
		t.Errorf("stale update: %d %s", stale.code, stale.raw)
	}
	st := c.do("GET", coll+"/web", "", nil).body
	st["status"] = map[string]any{"replicas": 3, "readyReplicas": 1}
	if s := c.do("PUT", coll+"/web/status", "application/json", st); s.code != 200 || !bytes.Contains(s.raw, []byte(`"readyReplicas":1`)) {
		t.Errorf("status update: %d %s", s.code, s.raw)
	}

	patches := []struct{ ct, body, want string }{
		{"application/merge-patch+json", `{"spec":{"replicas":4}}`, `"replicas":4`},
		{"application/json-patch+json", `[{"op":"replace","path":"/spec/replicas","value":5}]`, `"replicas":5`},
		// Containers merge by name: the image changes, the container stays one.
		{"application/strategic-merge-patch+json", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:2"}]}}}}`, `"containers":[{"image":"nginx:2","imagePullPolicy":"Always","name":"web","terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}]`},
	}
	for _, p := range patches {
		if r := c.do("PATCH", coll+"/web", p.ct, p.body); r.code != 200 || !bytes.Contains(r.raw, []byte(p.want)) {
			t.Errorf("%s: %d %s", p.ct, r.code, r.raw)
		}
	}
	if r := c.do("PATCH", coll+"/web", "application/json-patch+json", `[{"op":"test","path":"/spec/replicas","value":99}]`); r.code != 422 {
		t.Errorf("failing json patch test op: %d %s", r.code, r.raw)
	}
	if r := c.do("PATCH", coll+"/web", "text/plain", `x`); r.code != 415 {
		t.Errorf("unknown patch type: %d %s", r.code, r.raw)
	}

	if d := c.do("DELETE", coll+"/web", "application/json", `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"wrong"}}`); d.code != 409 {
		t.Errorf("delete with a wrong uid precondition: %d %s", d.code, d.raw)
	}
	if d := c.do("DELETE", coll+"/web", "", nil); d.code != 200 || d.str("metadata", "name") != "web" {
		t.Errorf("delete: %d %s", d.code, d.raw)
	}
	if dc := c.do("DELETE", coll+"?labelSelector=app%3Dweb", "", nil); dc.code != 200 || dc.str("kind") != "ReplicaSetList" {
		t.Errorf("deletecollection: %d %s", dc.code, dc.raw)
	}
	if left := c.do("GET", coll, "", nil); !bytes.Contains(left.raw, []byte(`"items":[]`)) {
		t.Errorf("after deletecollection: %s", left.raw)
	}
	if ns := c.do("POST", "/api/v1/namespaces/missing/pods", "application/json", map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}}); ns.code != 404 || ns.str("message") != `namespaces "missing" not found` {
		t.Errorf("create in a missing namespace: %d %s", ns.code, ns.raw)
	}
}

// TestRESTTable: a Table request gets kpctl's columns, wide ones at
// priority 1, with each row's metadata.
func TestRESTTable(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	c.do("POST", "/apis/apps/v1/namespaces/default/replicasets", "application/json", webRS(2))
	r := c.do("GET", "/apis/apps/v1/namespaces/default/replicasets", "", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	if r.str("kind") != "Table" {
		t.Fatalf("table: %s", r.raw)
	}
	for _, want := range []string{`{"name":"DESIRED","type":"string","format":"","description":"","priority":0}`, `{"name":"SELECTOR","type":"string","format":"","description":"","priority":1}`, `"cells":["web","2","0","0"`, `"kind":"PartialObjectMetadata"`} {
		if !bytes.Contains(r.raw, []byte(want)) {
			t.Errorf("table lacks %s: %s", want, r.raw)
		}
	}
}

// TestRESTWatch: a watch streams JSON lines (ADDED for current objects,
// then changes, bookmarks when allowed), ends at timeoutSeconds, and a
// compacted resourceVersion is an ERROR event holding a 410 Expired
// Status.
func TestRESTWatch(t *testing.T) {
	srv := testserver.Start(t, testserver.WithBookmarkInterval(100*time.Millisecond))
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const coll = "/apis/apps/v1/namespaces/default/replicasets"
	c.do("POST", coll, "application/json", webRS(1))

	resp, err := http.Get(c.base + coll + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=30")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	events := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		close(events)
	}()
	next := func(typ string) map[string]any {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("watch ended waiting for %s", typ)
				}
				if ev["type"] == typ {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s event", typ)
			}
		}
	}
	added := next("ADDED")
	if o := added["object"].(map[string]any); o["kind"] != "ReplicaSet" || o["apiVersion"] != "apps/v1" {
		t.Errorf("ADDED object: %v", o)
	}
	c.do("PATCH", coll+"/web", "application/merge-patch+json", `{"spec":{"replicas":2}}`)
	mod := next("MODIFIED")
	if spec := mod["object"].(map[string]any)["spec"].(map[string]any); spec["replicas"] != float64(2) {
		t.Errorf("MODIFIED: %v", spec)
	}
	// A write to another kind moves the revision past the watcher's last
	// event; the next bookmark carries it.
	ns := c.do("POST", "/api/v1/namespaces", "application/json", map[string]any{"metadata": map[string]any{"name": "bm"}})
	bm := next("BOOKMARK")
	if md := bm["object"].(map[string]any)["metadata"].(map[string]any); md["resourceVersion"] != ns.str("metadata", "resourceVersion") {
		t.Errorf("bookmark without resourceVersion: %v", bm)
	}

	short := c.do("GET", coll+"?watch=1&timeoutSeconds=1", "", nil)
	if short.code != 200 {
		t.Errorf("watch with timeoutSeconds=1 ended with %d", short.code)
	}

	for i := 0; i < 3; i++ {
		c.do("PATCH", coll+"/web", "application/merge-patch+json", `{"metadata":{"labels":{"n":"`+strings.Repeat("x", i+1)+`"}}}`)
	}
	if _, err := srv.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := c.do("GET", coll+"?watch=true&resourceVersion=1", "", nil)
	var ev struct {
		Type   string         `json:"type"`
		Object map[string]any `json:"object"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(old.raw), &ev); err != nil || old.code != 200 || ev.Type != "ERROR" ||
		ev.Object["code"] != float64(410) || ev.Object["reason"] != "Expired" {
		t.Errorf("watch from a compacted revision: %d %s", old.code, old.raw)
	}
	if bad := c.do("GET", coll+"?watch=true&labelSelector=a%3D%3D%3Db", "", nil); bad.code != 400 {
		t.Errorf("watch with a bad selector: %d %s", bad.code, bad.raw)
	}
}
