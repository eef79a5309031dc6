package integration

import (
	"context"
	"testing"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestRESTListResourceVersionMatchStatus: over REST the refusals are
// Kubernetes' Status objects: 422 Invalid with the field as a cause, 504
// Timeout with the ResourceVersionTooLarge cause client-go's reflector
// looks for, 410 Expired.
func TestRESTListResourceVersionMatchStatus(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const coll = "/api/v1/namespaces/default/pods"
	r := c.do("GET", coll+"?resourceVersionMatch=Exact", "", nil)
	causes, _ := r.body["details"].(map[string]any)["causes"].([]any)
	if r.code != 422 || r.str("reason") != "Invalid" || len(causes) != 1 || causes[0].(map[string]any)["field"] != "resourceVersionMatch" {
		t.Errorf("match without resourceVersion: %d %s", r.code, r.raw)
	}
	r = c.do("GET", coll+"?resourceVersion=99999999&resourceVersionMatch=NotOlderThan", "", nil)
	causes, _ = r.body["details"].(map[string]any)["causes"].([]any)
	if r.code != 504 || r.str("reason") != "Timeout" || len(causes) != 1 || causes[0].(map[string]any)["reason"] != "ResourceVersionTooLarge" {
		t.Errorf("too large: %d %s", r.code, r.raw)
	}
	first := c.do("GET", coll, "", nil).str("metadata", "resourceVersion")
	c.do("POST", "/api/v1/namespaces", "application/json", map[string]any{"metadata": map[string]any{"name": "later"}})
	if _, err := srv.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = c.do("GET", coll+"?resourceVersion="+first+"&resourceVersionMatch=Exact", "", nil)
	if r.code != 410 || r.str("reason") != "Expired" {
		t.Errorf("Exact at a compacted revision: %d %s", r.code, r.raw)
	}
}
