package integration_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestListSelectors(t *testing.T) { transports(t, testListSelectors) }

func testListSelectors(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	create(t, c, newNamespace("other"))
	mk := func(ns, name, node string, labels map[string]string) {
		p := newPod(ns, name, labels)
		p.GetPod().Spec.NodeName = node
		create(t, c, p)
	}
	mk("default", "web-fe", "n1", map[string]string{"app": "web", "tier": "fe"})
	mk("default", "web-db", "n2", map[string]string{"app": "web", "tier": "db"})
	mk("default", "db", "n1", map[string]string{"app": "db"})
	mk("default", "old", "", map[string]string{"app": "web", "legacy": "true"})
	mk("other", "web-other", "n1", map[string]string{"app": "web", "tier": "fe"})

	for _, tc := range []struct {
		ns, labels, fields string
		want               string
	}{
		{"", "", "", "default/db,default/old,default/web-db,default/web-fe,other/web-other"},
		{"default", "", "", "default/db,default/old,default/web-db,default/web-fe"},
		{"other", "", "", "other/web-other"},
		{"default", "app=web", "", "default/old,default/web-db,default/web-fe"},
		{"default", "app==web,tier!=db", "", "default/old,default/web-fe"},
		{"", "app in (web,db),tier notin (fe)", "", "default/db,default/old,default/web-db"},
		{"default", "app=web,!legacy", "", "default/web-db,default/web-fe"},
		{"default", "legacy", "", "default/old"},
		{"", "tier", "", "default/web-db,default/web-fe,other/web-other"},
		{"", "", "spec.nodeName=n1", "default/db,default/web-fe,other/web-other"},
		{"", "", "spec.nodeName=", "default/old"},
		{"default", "app=web", "spec.nodeName!=n2", "default/old,default/web-fe"},
		{"", "", "metadata.name=web-fe", "default/web-fe"},
		{"", "", "metadata.namespace=other", "other/web-other"},
		{"", "", "status.phase=Pending", "default/db,default/old,default/web-db,default/web-fe,other/web-other"},
		{"", "", "status.phase=Running", ""},
		{"", "app=nothing", "", ""},
	} {
		resp := list(t, c, &kplanev1.ListRequest{Kind: "Pod", Namespace: tc.ns, LabelSelector: tc.labels, FieldSelector: tc.fields})
		if got := strings.Join(names(resp.GetItems()), ","); got != tc.want {
			t.Errorf("List ns=%q labels=%q fields=%q = [%s], want [%s]", tc.ns, tc.labels, tc.fields, got, tc.want)
		}
	}
}

func TestListPaginationIsConsistent(t *testing.T) { transports(t, testListPaginationIsConsistent) }

func testListPaginationIsConsistent(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	const n = 25
	orig := map[string]*kplanev1.Object{}
	for i := range n {
		o := create(t, c, newSecret("default", fmt.Sprintf("s-%02d", i), map[string][]byte{"v": []byte("0")}))
		orig[o.Key()] = o
	}

	first := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 10})
	if len(first.GetItems()) != 10 || first.GetContinue() == "" || first.GetRemainingItemCount() != 15 {
		t.Fatalf("first page: %d items, continue %q, remaining %d; want 10, a token, 15",
			len(first.GetItems()), first.GetContinue(), first.GetRemainingItemCount())
	}
	snap := first.GetResourceVersion()

	// Writes between pages must not show in later pages: a delete from
	// page 2, an update on page 3, and a new object that sorts into page 2.
	_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "default", Name: "s-12"})
	must(t, err, "delete s-12")
	upd := proto.Clone(orig["default/s-22"]).(*kplanev1.Object)
	upd.GetSecret().Data["v"] = []byte("1")
	update(t, c, upd)
	create(t, c, newSecret("default", "s-15a", nil))

	second := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 10, Continue: first.GetContinue()})
	if len(second.GetItems()) != 10 || second.GetContinue() == "" || second.GetRemainingItemCount() != 5 {
		t.Fatalf("second page: %d items, continue %q, remaining %d; want 10, a token, 5",
			len(second.GetItems()), second.GetContinue(), second.GetRemainingItemCount())
	}
	third := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 10, Continue: second.GetContinue()})
	if len(third.GetItems()) != 5 || third.GetContinue() != "" || third.GetRemainingItemCount() != 0 {
		t.Fatalf("last page: %d items, continue %q, remaining %d; want 5, none, 0",
			len(third.GetItems()), third.GetContinue(), third.GetRemainingItemCount())
	}
	for _, page := range []*kplanev1.ListResponse{second, third} {
		if page.GetResourceVersion() != snap {
			t.Errorf("page resourceVersion %s, want the snapshot's %s", page.GetResourceVersion(), snap)
		}
	}
	var all []*kplanev1.Object
	all = append(append(append(all, first.GetItems()...), second.GetItems()...), third.GetItems()...)
	seen := map[string]bool{}
	for _, o := range all {
		if seen[o.Key()] {
			t.Errorf("%s appears on two pages", o.Key())
		}
		seen[o.Key()] = true
		want, ok := orig[o.Key()]
		if !ok {
			t.Errorf("%s was created after the snapshot but is listed", o.Key())
			continue
		}
		if !proto.Equal(o, want) {
			t.Errorf("%s = %v, want the snapshot's version %v", o.Key(), o, want)
		}
	}
	if len(seen) != n {
		t.Errorf("pages hold %d distinct objects, want %d", len(seen), n)
	}

	// A fresh list sees the writes.
	now := names(list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"}).GetItems())
	if len(now) != n || strings.Contains(strings.Join(now, ","), "s-12,") || !strings.Contains(strings.Join(now, ","), "s-15a") {
		t.Errorf("fresh list = %v, want s-12 gone and s-15a present", now)
	}

	// Pagination with a selector pages over matches only.
	sel := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", FieldSelector: "metadata.name!=s-00", Limit: 20})
	if len(sel.GetItems()) != 20 || sel.GetContinue() == "" {
		t.Fatalf("selector page: %d items, continue %q", len(sel.GetItems()), sel.GetContinue())
	}
	rest := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", FieldSelector: "metadata.name!=s-00", Limit: 20, Continue: sel.GetContinue()})
	if len(rest.GetItems()) != 4 || rest.GetContinue() != "" {
		t.Fatalf("selector last page: %d items, continue %q; want 4 and none", len(rest.GetItems()), rest.GetContinue())
	}

	// A token only continues the list it came from.
	_, err = c.List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "kplane-system", Limit: 10, Continue: first.GetContinue()})
	requireCode(t, err, codes.InvalidArgument, "continue: token does not belong to this list")
	_, err = c.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Limit: 10, Continue: first.GetContinue()})
	requireCode(t, err, codes.InvalidArgument, "continue: token does not belong to this list")
}

func TestListContinueAfterCompaction(t *testing.T) {
	srv, c := start(t)
	ctx := testCtx(t)
	for i := range 5 {
		create(t, c, newSecret("default", fmt.Sprintf("s-%d", i), nil))
	}
	first := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 2})
	// The snapshot must be older than the compaction point to be gone.
	create(t, c, newSecret("default", "later", nil))
	_, err := srv.Compact(ctx)
	must(t, err, "compact")
	// The watch cache still keeps the list's snapshot: the next page
	// comes from it, compaction or not.
	second := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 2, Continue: first.GetContinue()})
	if got := strings.Join(names(second.GetItems()), ","); got != "default/s-2,default/s-3" {
		t.Fatalf("second page from the kept snapshot = [%s], want [default/s-2,default/s-3]", got)
	}
	// Once other paginated lists have pushed it out, only etcd could
	// serve the page, and its revision is gone.
	evictListSnapshots(t, c)
	_, err = c.List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 2, Continue: second.GetContinue()})
	requireCode(t, err, codes.OutOfRange, "has been compacted; start the list again")
	// Starting again works.
	if n := len(list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"}).GetItems()); n != 6 {
		t.Fatalf("fresh list after compaction = %d items, want 6", n)
	}
}
