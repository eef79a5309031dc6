package integration

import (
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestRESTDryRun: dryRun=All on POST, PUT, each PATCH type, server-side
// apply, DELETE and deletecollection runs defaulting, validation and
// admission, answers the object as it would be, and writes nothing: the
// store's revision does not move and a watch sees no event. An invalid
// object still fails as without dryRun; a dryRun value other than All is
// 400 naming the parameter. The gRPC requests' dry_run is the same path.
func TestRESTDryRun(t *testing.T) {
	srv := testserver.Start(t)
	ctx := t.Context()
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const coll = "/apis/apps/v1/namespaces/default/replicasets"
	if r := c.do("POST", coll, "application/json", webRS(2)); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	stored := func() *kplanev1.Object {
		t.Helper()
		g, err := srv.Client().Get(ctx, &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return g.GetObject()
	}
	before := stored()
	rev := func() int64 {
		t.Helper()
		r, err := srv.API().Store().CurrentRevision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := rev()
	w, err := srv.Client().Watch(ctx, &kplanev1.WatchRequest{Kind: "ReplicaSet", Namespace: "default", ResourceVersion: before.Meta().GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}

	other := webRS(3)
	other["metadata"].(map[string]any)["name"] = "other"
	replicas := func(r restResp) float64 {
		spec, _ := r.body["spec"].(map[string]any)
		n, _ := spec["replicas"].(float64)
		return n
	}
	cases := []struct {
		name, method, path, contentType string
		body                            any
		code                            int
		replicas                        float64
	}{
		{"create", "POST", coll, "application/json", other, 201, 3},
		{"put", "PUT", coll + "/web", "application/json", webRS(5), 200, 5},
		{"merge patch", "PATCH", coll + "/web", "application/merge-patch+json", `{"spec":{"replicas":6}}`, 200, 6},
		{"json patch", "PATCH", coll + "/web", "application/json-patch+json", `[{"op":"replace","path":"/spec/replicas","value":7}]`, 200, 7},
		{"strategic merge patch", "PATCH", coll + "/web", "application/strategic-merge-patch+json", `{"spec":{"replicas":8}}`, 200, 8},
		{"apply", "PATCH", coll + "/web?fieldManager=test&force=true", "application/apply-patch+yaml",
			`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web"},"spec":{"replicas":9}}`, 200, 9},
		{"apply create", "PATCH", coll + "/fresh?fieldManager=test", "application/apply-patch+yaml",
			`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"fresh"},"spec":{"replicas":4,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`, 201, 4},
		{"delete", "DELETE", coll + "/web", "", nil, 200, 2},
	}
	for _, tc := range cases {
		r := c.do(tc.method, tc.path+sep(tc.path)+"dryRun=All", tc.contentType, tc.body)
		if r.code != tc.code || replicas(r) != tc.replicas {
			t.Errorf("%s: %d %s, want %d with replicas %v", tc.name, r.code, r.raw, tc.code, tc.replicas)
		}
		if tc.method == "POST" {
			if r.str("metadata", "uid") == "" || r.str("metadata", "creationTimestamp") == "" || r.str("metadata", "resourceVersion") != "" {
				t.Errorf("%s: metadata %v: want uid and creationTimestamp set, no resourceVersion", tc.name, r.body["metadata"])
			}
		}
		if got := rev(); got != start {
			t.Fatalf("%s: the store's revision moved from %d to %d", tc.name, start, got)
		}
	}
	// deletecollection answers the list it would delete.
	dc := c.do("DELETE", coll+"?dryRun=All", "", nil)
	if items, _ := dc.body["items"].([]any); dc.code != 200 || len(items) != 1 {
		t.Errorf("deletecollection: %d %s", dc.code, dc.raw)
	}
	// DeleteOptions' dryRun in the body, as kubectl delete --dry-run=server sends it.
	if r := c.do("DELETE", coll+"/web", "application/json", `{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}`); r.code != 200 {
		t.Errorf("delete with DeleteOptions.dryRun: %d %s", r.code, r.raw)
	}
	// Validation and existence checks run as for the real write.
	bad := webRS(-1)
	bad["metadata"].(map[string]any)["name"] = "bad"
	if r := c.do("POST", coll+"?dryRun=All", "application/json", bad); r.code != 422 || r.str("reason") != "Invalid" {
		t.Errorf("invalid dry-run create: %d %s", r.code, r.raw)
	}
	if r := c.do("PUT", coll+"/nope?dryRun=All", "application/json", func() map[string]any {
		o := webRS(1)
		o["metadata"].(map[string]any)["name"] = "nope"
		return o
	}()); r.code != 404 {
		t.Errorf("dry-run update of a missing object: %d %s", r.code, r.raw)
	}
	if r := c.do("DELETE", coll+"/nope?dryRun=All", "", nil); r.code != 404 {
		t.Errorf("dry-run delete of a missing object: %d %s", r.code, r.raw)
	}
	stale := webRS(4)
	stale["metadata"].(map[string]any)["resourceVersion"] = "1"
	if r := c.do("PUT", coll+"/web?dryRun=All", "application/json", stale); r.code != 409 || r.str("reason") != "Conflict" {
		t.Errorf("dry-run update at a stale resourceVersion: %d %s", r.code, r.raw)
	}
	// Bad values name the parameter; the subresources without dry runs refuse it.
	for _, path := range []string{coll + "?dryRun=Yes", coll + "?dryRun=All&dryRun=Nope"} {
		if r := c.do("POST", path, "application/json", other); r.code != 400 || !strings.HasPrefix(r.str("message"), "dryRun: Unsupported value") {
			t.Errorf("POST %s: %d %s", path, r.code, r.raw)
		}
	}
	if r := c.do("DELETE", coll+"/web", "application/json", `{"dryRun":["Maybe"]}`); r.code != 400 || !strings.Contains(r.str("message"), "dryRun") {
		t.Errorf("DeleteOptions.dryRun Maybe: %d %s", r.code, r.raw)
	}
	if r := c.do("PATCH", coll+"/web/scale?dryRun=All", "application/merge-patch+json", `{"spec":{"replicas":1}}`); r.code != 400 || !strings.Contains(r.str("message"), "dryRun") {
		t.Errorf("scale dry run: %d %s", r.code, r.raw)
	}
	// gRPC's dry_run shares the path.
	obj := stored()
	obj.GetReplicaSet().GetSpec().Replicas = ptr32(11)
	u, err := srv.Client().Update(ctx, &kplanev1.UpdateRequest{Object: obj, DryRun: true})
	if err != nil || u.GetObject().GetReplicaSet().GetSpec().GetReplicas() != 11 || u.GetObject().Meta().GetResourceVersion() != before.Meta().GetResourceVersion() {
		t.Errorf("gRPC dry-run update: %v %v", err, u)
	}
	if _, err := srv.Client().Delete(ctx, &kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: "default", Name: "web", DryRun: true}); err != nil {
		t.Errorf("gRPC dry-run delete: %v", err)
	}

	if got := rev(); got != start {
		t.Fatalf("the store's revision moved from %d to %d", start, got)
	}
	after := stored()
	if after.Meta().GetResourceVersion() != before.Meta().GetResourceVersion() || after.GetReplicaSet().GetSpec().GetReplicas() != 2 {
		t.Errorf("stored object changed: %v", after)
	}
	// Nothing reached the watch: a real write now is its first event.
	if r := c.do("PATCH", coll+"/web", "application/merge-patch+json", `{"spec":{"replicas":12}}`); r.code != 200 {
		t.Fatalf("real patch: %d %s", r.code, r.raw)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetType() == kplanev1.EventType_EVENT_TYPE_BOOKMARK {
			continue
		}
		if ev.GetType() != kplanev1.EventType_EVENT_TYPE_MODIFIED || ev.GetObject().GetReplicaSet().GetSpec().GetReplicas() != 12 {
			t.Fatalf("first watch event after the dry runs: %v", ev)
		}
		break
	}
}

func sep(path string) string {
	if strings.Contains(path, "?") {
		return "&"
	}
	return "?"
}

func ptr32(v int32) *int32 { return &v }
