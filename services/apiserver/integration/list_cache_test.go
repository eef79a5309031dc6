package integration_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// Lists are served from the watch cache once it has caught up to etcd's
// revision: a List right after a write must show the write, however busy
// the cache's feed is.
func TestListAfterWriteSeesTheWrite(t *testing.T) { transports(t, testListAfterWriteSeesTheWrite) }

func testListAfterWriteSeesTheWrite(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	// Another writer keeps the Secret cache's feed busy meanwhile (in
	// another namespace, so the lists below stay small).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newSecret("kplane-system", fmt.Sprintf("noise-%d", i), nil)}); err != nil {
				t.Errorf("noise create: %v", err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	for i := range 20 {
		name := fmt.Sprintf("mine-%d", i)
		o := create(t, c, newSecret("default", name, map[string][]byte{"v": []byte("0")}))
		seen := func(what string, want func(*kplanev1.Object) bool) {
			t.Helper()
			resp := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
			if rev(t, resp.GetResourceVersion()) < rev(t, o.Meta().GetResourceVersion()) {
				t.Fatalf("after %s of %s: list at revision %s, before the write's %s", what, name, resp.GetResourceVersion(), o.Meta().GetResourceVersion())
			}
			var found *kplanev1.Object
			for _, it := range resp.GetItems() {
				if it.Meta().GetName() == name {
					found = it
				}
			}
			if !want(found) {
				t.Fatalf("after %s of %s: the list shows %v", what, name, found)
			}
			// A selector list and a one-item page read the same way.
			sel := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", FieldSelector: "metadata.name=" + name, Limit: 1})
			var got *kplanev1.Object
			if len(sel.GetItems()) == 1 {
				got = sel.GetItems()[0]
			}
			if !want(got) {
				t.Fatalf("after %s of %s: the selector list shows %v", what, name, sel.GetItems())
			}
		}
		seen("create", func(f *kplanev1.Object) bool { return f != nil })
		upd := proto.Clone(o).(*kplanev1.Object)
		upd.GetSecret().Data["v"] = []byte("1")
		o = update(t, c, upd)
		seen("update", func(f *kplanev1.Object) bool { return f != nil && string(f.GetSecret().GetData()["v"]) == "1" })
		d, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "default", Name: name})
		must(t, err, "delete "+name)
		o = d.GetObject()
		seen("delete", func(f *kplanev1.Object) bool { return f == nil })
	}
}

// Every page of a paginated List shows the first page's snapshot, whether
// the watch cache still keeps that snapshot or (once more paginations
// than it keeps have begun) etcd serves the page at its revision.
func TestListPagesFromKeptAndEvictedSnapshots(t *testing.T) {
	transports(t, testListPagesFromKeptAndEvictedSnapshots)
}

func testListPagesFromKeptAndEvictedSnapshots(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	for i := range 12 {
		create(t, c, newSecret("default", fmt.Sprintf("base-%02d", i), nil))
	}
	// Twelve paginations, each begun after one more Secret was created:
	// more than the cache keeps, so the earliest are served from etcd.
	type pagination struct {
		want  []string
		items []string
		token string
	}
	var ps []*pagination
	var all []string
	for i := range 12 {
		all = append(all, fmt.Sprintf("default/base-%02d", i))
	}
	for i := range 12 {
		create(t, c, newSecret("default", fmt.Sprintf("late-%02d", i), nil))
		all = append(all, fmt.Sprintf("default/late-%02d", i))
		first := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 5})
		want := slices.Clone(all)
		slices.Sort(want)
		if first.GetRemainingItemCount() != int64(len(want)-5) {
			t.Fatalf("pagination %d: remaining %d, want %d", i, first.GetRemainingItemCount(), len(want)-5)
		}
		ps = append(ps, &pagination{want: want, items: names(first.GetItems()), token: first.GetContinue()})
	}
	for i, p := range ps {
		for p.token != "" {
			page := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default", Limit: 5, Continue: p.token})
			p.items = append(p.items, names(page.GetItems())...)
			p.token = page.GetContinue()
		}
		if got, want := strings.Join(p.items, ","), strings.Join(p.want, ","); got != want {
			t.Errorf("pagination %d listed [%s], want its snapshot's [%s]", i, got, want)
		}
	}
}

// evictListSnapshots begins enough paginated Lists that the watch cache
// keeps none of the snapshots kept before.
func evictListSnapshots(t *testing.T, c kplanev1.ResourcesClient) {
	t.Helper()
	for i := range 3 {
		create(t, c, newSecret("kplane-system", fmt.Sprintf("evict-%d", i), nil))
	}
	for i := range 16 {
		resp := list(t, c, &kplanev1.ListRequest{Kind: "Secret", Namespace: "kplane-system", Limit: 1, FieldSelector: fmt.Sprintf("metadata.name!=x-%d", i)})
		if resp.GetContinue() == "" {
			t.Fatalf("evicting list %d has no continue token", i)
		}
	}
}
