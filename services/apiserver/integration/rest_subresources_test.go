package integration

import (
	"context"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestRESTScale: the scale subresource of ReplicaSet, ReplicationController,
// Deployment and StatefulSet is autoscaling/v1 Scale, read, replaced and
// patched over the service's GetScale/UpdateScale; it is in discovery;
// bad input writes nothing.
func TestRESTScale(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}

	// Discovery names scale as autoscaling/v1 Scale on the four kinds.
	apps := c.do("GET", "/apis/apps/v1", "", nil)
	want := map[string]bool{"replicasets/scale": false, "deployments/scale": false, "statefulsets/scale": false}
	for _, r := range apps.body["resources"].([]any) {
		m := r.(map[string]any)
		if _, ok := want[m["name"].(string)]; ok {
			want[m["name"].(string)] = m["group"] == "autoscaling" && m["version"] == "v1" && m["kind"] == "Scale"
		}
		if m["name"] == "daemonsets/scale" || m["name"] == "controllerrevisions/scale" {
			t.Errorf("%s has no replicas but is advertised", m["name"])
		}
	}
	for n, ok := range want {
		if !ok {
			t.Errorf("discovery: %s missing or not autoscaling/v1 Scale: %s", n, apps.raw)
		}
	}

	// The aggregated document (kubectl's first choice) says the same.
	agg := c.do("GET", "/apis", "", nil, "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	if !strings.Contains(string(agg.raw), `"subresource":"scale","responseKind":{"group":"autoscaling","version":"v1","kind":"Scale"}`) {
		t.Errorf("aggregated discovery lacks the scale subresource: %.2000s", agg.raw)
	}
	core := c.do("GET", "/api", "", nil, "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	if !strings.Contains(string(core.raw), `"subresource":"eviction","responseKind":{"group":"policy","version":"v1","kind":"Eviction"}`) {
		t.Errorf("aggregated core discovery lacks pods/eviction: %.2000s", core.raw)
	}

	for _, k := range []struct{ path, kind string }{
		{"/apis/apps/v1/namespaces/default/replicasets", "ReplicaSet"},
		{"/api/v1/namespaces/default/replicationcontrollers", "ReplicationController"},
		{"/apis/apps/v1/namespaces/default/deployments", "Deployment"},
		{"/apis/apps/v1/namespaces/default/statefulsets", "StatefulSet"},
	} {
		t.Run(k.kind, func(t *testing.T) {
			body := webRS(2)
			body["kind"] = k.kind
			if k.kind == "ReplicationController" {
				body["apiVersion"] = "v1"
				body["spec"].(map[string]any)["selector"] = map[string]any{"app": "web"}
			}
			if k.kind == "StatefulSet" {
				body["spec"].(map[string]any)["serviceName"] = "web"
			}
			if cr := c.do("POST", k.path, "application/json", body); cr.code != 201 {
				t.Fatalf("create: %d %s", cr.code, cr.raw)
			}
			scale := k.path + "/web/scale"
			g := c.do("GET", scale, "", nil)
			spec, _ := g.body["spec"].(map[string]any)
			if g.code != 200 || g.str("kind") != "Scale" || g.str("apiVersion") != "autoscaling/v1" ||
				g.str("metadata", "name") != "web" || spec["replicas"] != float64(2) {
				t.Fatalf("get scale: %d %s", g.code, g.raw)
			}
			rv := g.str("metadata", "resourceVersion")

			// kubectl scale's merge patch.
			p := c.do("PATCH", scale, "application/merge-patch+json", `{"spec":{"replicas":5}}`)
			if p.code != 200 || p.body["spec"].(map[string]any)["replicas"] != float64(5) {
				t.Fatalf("merge patch: %d %s", p.code, p.raw)
			}
			obj, err := srv.Client().Get(context.Background(), &kplanev1.GetRequest{Kind: k.kind, Namespace: "default", Name: "web"})
			if err != nil {
				t.Fatal(err)
			}
			if n := replicasOf(obj.GetObject()); n != 5 {
				t.Fatalf("the %s has %d replicas after the scale patch, want 5", k.kind, n)
			}
			// A PUT with the stale resourceVersion conflicts and writes nothing.
			put := map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale",
				"metadata": map[string]any{"name": "web", "namespace": "default", "resourceVersion": rv}, "spec": map[string]any{"replicas": 7}}
			if r := c.do("PUT", scale, "application/json", put); r.code != 409 || r.str("reason") != "Conflict" {
				t.Errorf("stale PUT: %d %s", r.code, r.raw)
			}
			put["metadata"].(map[string]any)["resourceVersion"] = p.str("metadata", "resourceVersion")
			if r := c.do("PUT", scale, "application/json", put); r.code != 200 || r.body["spec"].(map[string]any)["replicas"] != float64(7) {
				t.Errorf("PUT: %d %s", r.code, r.raw)
			}
			// json-patch and strategic merge patch.
			if r := c.do("PATCH", scale, "application/json-patch+json", `[{"op":"replace","path":"/spec/replicas","value":1}]`); r.code != 200 ||
				r.body["spec"].(map[string]any)["replicas"] != float64(1) {
				t.Errorf("json patch: %d %s", r.code, r.raw)
			}
			if r := c.do("PATCH", scale, "application/strategic-merge-patch+json", `{"spec":{"replicas":3}}`); r.code != 200 ||
				r.body["spec"].(map[string]any)["replicas"] != float64(3) {
				t.Errorf("strategic patch: %d %s", r.code, r.raw)
			}
			// Bad input: nothing written.
			for _, bad := range []struct {
				method, ct, body, field string
				code                    int
			}{
				{"PATCH", "application/merge-patch+json", `{"spec":{"replicas":-1}}`, "spec.replicas", 422},
				{"PATCH", "application/merge-patch+json", `{"spec":{"replica":4}}`, "replica", 400},
				{"PUT", "application/json", `{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"other"},"spec":{"replicas":4}}`, "metadata.name", 400},
				{"PATCH", "application/apply-patch+yaml", `spec: {replicas: 4}`, "", 415},
			} {
				r := c.do(bad.method, scale, bad.ct, bad.body)
				if r.code != bad.code || !contains(r.str("message"), bad.field) {
					t.Errorf("%s %s: %d %s, want %d naming %q", bad.method, bad.body, r.code, r.raw, bad.code, bad.field)
				}
			}
			if r := c.do("GET", scale, "", nil); r.body["spec"].(map[string]any)["replicas"] != float64(3) {
				t.Errorf("bad input changed the replicas: %s", r.raw)
			}
			if r := c.do("GET", k.path+"/missing/scale", "", nil); r.code != 404 || r.str("reason") != "NotFound" {
				t.Errorf("scale of a missing object: %d %s", r.code, r.raw)
			}
		})
	}
	if r := c.do("GET", "/apis/apps/v1/namespaces/default/daemonsets/web/scale", "", nil); r.code != 404 {
		t.Errorf("daemonsets/scale: %d %s", r.code, r.raw)
	}
}

func replicasOf(o *kplanev1.Object) int32 {
	switch {
	case o.GetReplicaSet() != nil:
		return o.GetReplicaSet().GetSpec().GetReplicas()
	case o.GetReplicationController() != nil:
		return o.GetReplicationController().GetSpec().GetReplicas()
	case o.GetDeployment() != nil:
		return o.GetDeployment().GetSpec().GetReplicas()
	default:
		return o.GetStatefulSet().GetSpec().GetReplicas()
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && strings.Contains(s, sub))
}

func pod(name, node string) map[string]any {
	spec := map[string]any{"containers": []any{map[string]any{"name": "main", "image": "busybox"}}}
	if node != "" {
		spec["nodeName"] = node
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name}, "spec": spec}
}

// TestRESTEvictionBinding: pods/binding sets spec.nodeName of an unbound
// pod once; pods/eviction deletes through the same Delete as a DELETE, so
// a bound pod is deleted gracefully (Terminating) and a zero grace period
// removes it; discovery advertises policy/v1 Eviction for kubectl drain.
func TestRESTEvictionBinding(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const pods = "/api/v1/namespaces/default/pods"

	core := c.do("GET", "/api/v1", "", nil)
	found := map[string]bool{}
	for _, r := range core.body["resources"].([]any) {
		m := r.(map[string]any)
		switch m["name"] {
		case "pods/eviction":
			found["eviction"] = m["group"] == "policy" && m["version"] == "v1" && m["kind"] == "Eviction"
		case "pods/binding":
			found["binding"] = m["kind"] == "Binding"
		case "pods/log":
			found["log"] = m["kind"] == "Pod"
		case "replicationcontrollers/scale":
			found["rc scale"] = m["group"] == "autoscaling"
		}
	}
	for _, n := range []string{"eviction", "binding", "log", "rc scale"} {
		if !found[n] {
			t.Errorf("discovery of v1 lacks %s: %s", n, core.raw)
		}
	}

	if r := c.do("POST", pods, "application/json", pod("p", "")); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	binding := func(name, target string) restResp {
		return c.do("POST", pods+"/p/binding", "application/json", map[string]any{
			"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": name},
			"target": map[string]any{"apiVersion": "v1", "kind": "Node", "name": target}})
	}
	if r := binding("p", ""); r.code != 422 || !contains(r.str("message"), "target.name") {
		t.Errorf("binding without a target: %d %s", r.code, r.raw)
	}
	if r := binding("other", "n1"); r.code != 400 || !contains(r.str("message"), "metadata.name") {
		t.Errorf("binding of another name: %d %s", r.code, r.raw)
	}
	if r := binding("p", "n1"); r.code != 201 || r.str("status") != "Success" {
		t.Fatalf("binding: %d %s", r.code, r.raw)
	}
	if r := binding("p", "n2"); r.code != 409 || r.str("reason") != "Conflict" || !contains(r.str("message"), `already assigned to node "n1"`) {
		t.Errorf("second binding: %d %s", r.code, r.raw)
	}
	g := c.do("GET", pods+"/p", "", nil)
	if g.body["spec"].(map[string]any)["nodeName"] != "n1" {
		t.Fatalf("bound pod: %s", g.raw)
	}

	evict := func(name string, grace *int) restResp {
		ev := map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name, "namespace": "default"}}
		if grace != nil {
			ev["deleteOptions"] = map[string]any{"gracePeriodSeconds": *grace}
		}
		return c.do("POST", pods+"/"+name+"/eviction", "application/json", ev)
	}
	if r := c.do("POST", pods+"/p/eviction", "application/json", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"q"}}`); r.code != 400 {
		t.Errorf("eviction naming another pod: %d %s", r.code, r.raw)
	}
	if r := c.do("POST", pods+"/p/eviction", "application/json", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p"},"deleteOption":{}}`); r.code != 400 || !contains(r.str("message"), "deleteOption") {
		t.Errorf("eviction with an unknown field: %d %s", r.code, r.raw)
	}
	if r := evict("p", nil); r.code != 201 || r.str("status") != "Success" {
		t.Fatalf("eviction: %d %s", r.code, r.raw)
	}
	// Graceful: the bound pod is Terminating, waiting for its node agent.
	g = c.do("GET", pods+"/p", "", nil)
	if g.code != 200 || g.str("metadata", "deletionTimestamp") == "" {
		t.Fatalf("evicted bound pod: want Terminating, got %d %s", g.code, g.raw)
	}
	zero := 0
	if r := evict("p", &zero); r.code != 201 {
		t.Fatalf("eviction with grace 0: %d %s", r.code, r.raw)
	}
	if g := c.do("GET", pods+"/p", "", nil); g.code != 404 {
		t.Fatalf("pod after eviction with grace 0: %d %s", g.code, g.raw)
	}
	if r := evict("p", nil); r.code != 404 || r.str("reason") != "NotFound" {
		t.Errorf("eviction of a missing pod: %d %s", r.code, r.raw)
	}
	if r := c.do("GET", pods+"/p/eviction", "", nil); r.code != 405 {
		t.Errorf("GET eviction: %d %s", r.code, r.raw)
	}
	// The log of an unscheduled pod is refused as Kubernetes refuses it.
	if r := c.do("POST", pods, "application/json", pod("u", "")); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	if r := c.do("GET", pods+"/u/log", "", nil); r.code != 400 || !contains(r.str("message"), "does not have a host assigned") {
		t.Errorf("log of an unscheduled pod: %d %s", r.code, r.raw)
	}
	if r := c.do("GET", pods+"/u/log?container=nope", "", nil); r.code != 400 || !contains(r.str("message"), "container nope is not valid") {
		t.Errorf("log of a missing container: %d %s", r.code, r.raw)
	}
}
