package integration

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestRESTServerSideApply: an apply creates the object and records its
// manager in managedFields; a second manager changing an owned field gets
// 409 Conflict naming the manager and the field, and nothing is written;
// force takes the field over; the same value co-owns without conflict;
// unknown fields, a missing fieldManager and a wrong kind are refused.
func TestRESTServerSideApply(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const item = "/apis/apps/v1/namespaces/default/replicasets/web"
	const ssa = "application/apply-patch+yaml"
	yamlOf := func(replicas int) string {
		b, err := json.Marshal(webRS(replicas)) // JSON is YAML
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	managers := func(r restResp) []string {
		var out []string
		mf, _ := r.body["metadata"].(map[string]any)["managedFields"].([]any)
		for _, e := range mf {
			m := e.(map[string]any)
			out = append(out, m["manager"].(string)+"/"+m["operation"].(string))
		}
		sort.Strings(out) // managedFields' order is not part of the API
		return out
	}

	created := c.do("PATCH", item+"?fieldManager=alice", ssa, yamlOf(2))
	if created.code != 201 || !strings.Contains(string(created.raw), `"f:replicas":{}`) || strings.Join(managers(created), ",") != "alice/Apply" {
		t.Fatalf("apply create: %d %s", created.code, created.raw)
	}
	if again := c.do("PATCH", item+"?fieldManager=alice", ssa, yamlOf(3)); again.code != 200 || !strings.Contains(string(again.raw), `"replicas":3`) {
		t.Errorf("apply by the owner: %d %s", again.code, again.raw)
	}
	conflict := c.do("PATCH", item+"?fieldManager=bob", ssa, yamlOf(5))
	if conflict.code != 409 || conflict.str("reason") != "Conflict" || conflict.str("kind") != "Status" ||
		conflict.str("message") != `Apply failed with 1 conflict: conflict with "alice": .spec.replicas` {
		t.Errorf("conflicting apply: %d %s", conflict.code, conflict.raw)
	}
	g, err := srv.Client().Get(context.Background(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "web"})
	if err != nil || g.GetObject().GetReplicaSet().GetSpec().GetReplicas() != 3 {
		t.Fatalf("after the refused apply: %v %v", g, err)
	}
	if shared := c.do("PATCH", item+"?fieldManager=carol", ssa, yamlOf(3)); shared.code != 200 ||
		strings.Join(managers(shared), ",") != "alice/Apply,carol/Apply" {
		t.Errorf("co-owning apply: %d %v", shared.code, managers(shared))
	}
	forced := c.do("PATCH", item+"?fieldManager=bob&force=true", ssa, yamlOf(5))
	if forced.code != 200 || !strings.Contains(string(forced.raw), `"replicas":5`) {
		t.Errorf("forced apply: %d %s", forced.code, forced.raw)
	}
	// A merge patch keeps the appliers and adds its own Update, named by
	// the client's user agent when no fieldManager is given.
	c.do("PATCH", item, "application/merge-patch+json", `{"metadata":{"labels":{"tier":"fe"}}}`)
	if got := c.do("GET", item, "", nil); strings.Join(managers(got), ",") != "Go-http-client/Update,alice/Apply,bob/Apply,carol/Apply" {
		t.Errorf("managedFields after a merge patch: %v", managers(got))
	}

	// Writes without apply are tracked as Updates: a create by dave owns
	// spec.replicas, so alice's apply conflicts with dave; a PUT that
	// leaves managedFields out keeps them.
	rs := webRS(2)
	rs["metadata"].(map[string]any)["name"] = "api"
	const coll = "/apis/apps/v1/namespaces/default/replicasets"
	if r := c.do("POST", coll+"?fieldManager=dave", "application/json", rs); r.code != 201 || strings.Join(managers(r), ",") != "dave/Update" {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	cur := c.do("GET", coll+"/api", "", nil).body
	delete(cur["metadata"].(map[string]any), "managedFields")
	if r := c.do("PUT", coll+"/api?fieldManager=dave", "application/json", cur); r.code != 200 || strings.Join(managers(r), ",") != "dave/Update" {
		t.Errorf("PUT without managedFields: %d %v", r.code, managers(r))
	}
	rs["spec"].(map[string]any)["replicas"] = 4
	applied, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.do("PATCH", coll+"/api?fieldManager=alice", ssa, string(applied)); r.code != 409 ||
		!strings.HasPrefix(r.str("message"), `Apply failed with 1 conflict: conflict with "dave" using apps/v1: .spec.replicas`) {
		t.Errorf("apply over an Update: %d %s", r.code, r.raw)
	}

	for _, bad := range []struct{ query, body, want string }{
		{"", yamlOf(2), "require fieldManager"},
		{"?fieldManager=alice", strings.Replace(yamlOf(2), `"replicas"`, `"replica"`, 1), `strict decoding error: unknown field "spec.replica"`},
		{"?fieldManager=alice", strings.Replace(yamlOf(2), `"ReplicaSet"`, `"Deployment"`, 1), `must name apiVersion "apps/v1" and kind "ReplicaSet"`},
		{"?fieldManager=alice&force=maybe", yamlOf(2), "force: Invalid value"},
		{"?fieldManager=alice", "spec: [", "decode the applied configuration as YAML"},
	} {
		if r := c.do("PATCH", item+bad.query, ssa, bad.body); r.code != 400 || !strings.Contains(r.str("message"), bad.want) {
			t.Errorf("apply %s: %d %s, want 400 with %q", bad.query, r.code, r.raw, bad.want)
		}
	}
	if r := c.do("PATCH", item+"/status?fieldManager=alice", ssa, yamlOf(2)); r.code != 415 || !strings.Contains(r.str("message"), "not supported on the status subresource") {
		t.Errorf("apply to status: %d %s", r.code, r.raw)
	}
	g, err = srv.Client().Get(context.Background(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "web"})
	if err != nil || g.GetObject().GetReplicaSet().GetSpec().GetReplicas() != 5 {
		t.Fatalf("after the refused applies: %v %v", g, err)
	}
}
