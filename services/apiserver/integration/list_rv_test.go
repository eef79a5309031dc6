package integration_test

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestListResourceVersionMatch: a list at resourceVersion with
// resourceVersionMatch Exact reads that snapshot (paging included), with
// NotOlderThan (or no match) the newest, never older than asked; bad
// combinations are refused as Kubernetes refuses them, a revision the
// store has not reached is "Too large", a compacted one too old. The
// same over gRPC and REST.
func TestListResourceVersionMatch(t *testing.T) { transports(t, testListResourceVersionMatch) }

func testListResourceVersionMatch(t *testing.T, srv *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	a := create(t, c, newPod("default", "a", nil))
	b := create(t, c, newPod("default", "b", nil))
	a.Meta().Labels = map[string]string{"v": "2"}
	a2 := update(t, c, a)
	rvA, rvB, rvA2 := a.Meta().GetResourceVersion(), b.Meta().GetResourceVersion(), a2.Meta().GetResourceVersion()

	lst := func(rv, match string, limit int64, cont string) (*kplanev1.ListResponse, error) {
		return c.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", ResourceVersion: rv, ResourceVersionMatch: match, Limit: limit, Continue: cont})
	}
	// Exact: the snapshot at rvA holds a alone, as it was.
	at, err := lst(rvA, "Exact", 0, "")
	must(t, err, "list Exact at a's creation")
	if got := names(at.GetItems()); len(got) != 1 || got[0] != "default/a" || at.GetItems()[0].Meta().GetLabels()["v"] != "" {
		t.Errorf("Exact %s: %v", rvA, at.GetItems())
	}
	if at.GetResourceVersion() != rvA {
		t.Errorf("Exact %s answered resourceVersion %s", rvA, at.GetResourceVersion())
	}
	// Exact at rvB, paged one by one while another write happens: every
	// page reads the same snapshot.
	p1, err := lst(rvB, "Exact", 1, "")
	must(t, err, "list Exact, page 1")
	create(t, c, newPod("default", "c", nil))
	if p1.GetContinue() == "" || len(p1.GetItems()) != 1 || p1.GetItems()[0].Meta().GetResourceVersion() != rvA {
		t.Fatalf("Exact %s page 1: %v continue %q", rvB, p1.GetItems(), p1.GetContinue())
	}
	p2, err := lst("", "", 1, p1.GetContinue())
	must(t, err, "list Exact, page 2")
	if got := names(p2.GetItems()); len(got) != 1 || got[0] != "default/b" || p2.GetContinue() != "" || p2.GetResourceVersion() != rvB {
		t.Errorf("Exact %s page 2: %v continue %q rv %s", rvB, got, p2.GetContinue(), p2.GetResourceVersion())
	}
	// NotOlderThan, no match, "0": the newest.
	for _, o := range []struct{ rv, match string }{{rvA, "NotOlderThan"}, {rvA, ""}, {"0", ""}, {"0", "NotOlderThan"}, {"", ""}} {
		l, err := lst(o.rv, o.match, 0, "")
		must(t, err, "list "+o.rv+" "+o.match)
		if len(l.GetItems()) != 3 || rev(t, l.GetResourceVersion()) <= rev(t, rvA2) {
			t.Errorf("list rv=%q match=%q: %v at %s, want a, b, c at the newest revision", o.rv, o.match, names(l.GetItems()), l.GetResourceVersion())
		}
	}
	// Bad combinations, named by field.
	requireCode(t, func() error { _, err := lst("", "Exact", 0, ""); return err }(), codes.InvalidArgument,
		"resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
	requireCode(t, func() error { _, err := lst("", "NotOlderThan", 0, ""); return err }(), codes.InvalidArgument,
		"resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
	requireCode(t, func() error { _, err := lst("0", "Exact", 0, ""); return err }(), codes.InvalidArgument,
		`resourceVersionMatch: Forbidden: resourceVersionMatch "Exact" is forbidden for resourceVersion "0"`)
	requireCode(t, func() error { _, err := lst(rvA, "Newest", 0, ""); return err }(), codes.InvalidArgument,
		`resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan"`)
	requireCode(t, func() error { _, err := lst("x1", "", 0, ""); return err }(), codes.InvalidArgument,
		`resourceVersion: Invalid value: "x1"`)
	requireCode(t, func() error { _, err := lst(rvA, "Exact", 0, p1.GetContinue()); return err }(), codes.InvalidArgument,
		"resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided")
	requireCode(t, func() error { _, err := lst(rvA, "", 0, p1.GetContinue()); return err }(), codes.InvalidArgument,
		"specifying resource version is not allowed when using continue")
	// A revision the store has not reached.
	future := strconv.FormatInt(rev(t, rvA2)+1000, 10)
	requireCode(t, func() error { _, err := lst(future, "NotOlderThan", 0, ""); return err }(), codes.DeadlineExceeded, "Too large resource version")
	requireCode(t, func() error { _, err := lst(future, "", 0, ""); return err }(), codes.DeadlineExceeded, "Too large resource version")
	requireCode(t, func() error { _, err := lst(future, "Exact", 0, ""); return err }(), codes.DeadlineExceeded, "Too large resource version")
	// A compacted one.
	if _, err := srv.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	requireCode(t, func() error { _, err := lst(rvA, "Exact", 0, ""); return err }(), codes.OutOfRange, "The resourceVersion for the provided list is too old")
	if _, err := lst(rvA, "NotOlderThan", 0, ""); err != nil {
		t.Errorf("NotOlderThan a compacted revision: %v, want the newest", err)
	}
}
