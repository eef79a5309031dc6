package integration_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// FuzzCreate sends arbitrary objects (mutated wire bytes of valid and
// invalid seeds) to Create. Whatever arrives, the server answers with one
// of the client-error codes or stores the object; it never fails
// internally, never stores on a rejection, and what it stores is valid
// (a no-op Update of it succeeds without writing).
func FuzzCreate(f *testing.F) {
	seeds := []*kplanev1.Object{
		newPod("default", "web", map[string]string{"app": "web"}),
		newBoundPod("default", "bound", "node-1"),
		newReplicaSet("default", "rs", 2),
		newSecret("default", "s", map[string][]byte{"k": []byte("v")}),
		newNode("node-1"),
		newNamespace("team"),
		newLease("default", "l"),
		newEvent("default", "e"),
		newPod("default", "Bad_Name", nil),
		newPod("nope", "web", nil),
		kplanev1.MustWrap(&kplanev1.Pod{Metadata: meta("default", "nospec", nil)}),
		kplanev1.MustWrap(&kplanev1.Service{Metadata: meta("default", "svc", nil),
			Spec: &kplanev1.ServiceSpec{Ports: []*kplanev1.ServicePort{{Port: 80}}}}),
	}
	for _, o := range seeds {
		b, err := proto.Marshal(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	srv := testserver.Start(f)
	c := srv.Client()

	f.Fuzz(func(t *testing.T, wire []byte) {
		in := &kplanev1.Object{}
		if err := proto.Unmarshal(wire, in); err != nil {
			t.Skip("not an Object")
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		before, err := c.List(ctx, &kplanev1.ListRequest{Kind: "Namespace"})
		must(t, err, "list")

		resp, err := c.Create(ctx, &kplanev1.CreateRequest{Object: in})
		switch status.Code(err) {
		case codes.OK:
		case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists:
			after, lerr := c.List(ctx, &kplanev1.ListRequest{Kind: "Namespace"})
			must(t, lerr, "list")
			if after.GetResourceVersion() != before.GetResourceVersion() {
				t.Fatalf("rejected create (%v) moved the store revision %s -> %s", err, before.GetResourceVersion(), after.GetResourceVersion())
			}
			return
		default:
			t.Fatalf("Create(%v) = %v; want OK or a client error", in, err)
		}

		out := resp.GetObject()
		k := out.Info()
		got, err := c.Get(ctx, &kplanev1.GetRequest{Kind: k.Name, Namespace: out.Meta().GetNamespace(), Name: out.Meta().GetName()})
		must(t, err, "get the created object")
		if !proto.Equal(got.GetObject(), out) {
			t.Fatalf("stored %v, Create returned %v", got.GetObject(), out)
		}
		up, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: out})
		if err != nil {
			t.Fatalf("no-op update of the stored object %v: %v (the store accepted an object its own validation rejects)", out, err)
		}
		if up.GetObject().Meta().GetResourceVersion() != out.Meta().GetResourceVersion() {
			t.Fatalf("no-op update wrote a new revision")
		}
	})
}

// FuzzListLabelSelector checks the List and Watch paths with arbitrary
// label selectors: the server accepts exactly what the selector parser
// accepts, and then returns exactly the pods the selector matches, the
// same set from List as from a Watch's initial events.
func FuzzListLabelSelector(f *testing.F) {
	for _, s := range []string{
		"", "app=web", "app==web,tier!=db", "app in (web,db)", "tier notin (fe)", "!legacy", "legacy",
		"app in (web", "=x", "a b", "app=web,,", "example.com/team=core", "x in ()", "!", "app!=",
	} {
		f.Add(s)
	}
	srv := testserver.Start(f)
	c := srv.Client()
	ctx := context.Background()
	pods := map[string]map[string]string{
		"web-fe": {"app": "web", "tier": "fe"},
		"web-db": {"app": "web", "tier": "db"},
		"db":     {"app": "db"},
		"old":    {"app": "web", "legacy": "true"},
		"team":   {"example.com/team": "core"},
		"bare":   nil,
	}
	for name, l := range pods {
		if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newPod("default", name, l)}); err != nil {
			f.Fatalf("seed pod %s: %v", name, err)
		}
	}

	f.Fuzz(func(t *testing.T, selector string) {
		if !utf8.ValidString(selector) {
			t.Skip("proto3 strings are UTF-8: the client cannot send this")
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		sel, parseErr := labels.Parse(selector)
		resp, err := c.List(ctx, &kplanev1.ListRequest{Kind: "Pod", LabelSelector: selector})
		if parseErr != nil {
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "labelSelector: ") {
				t.Fatalf("List(%q) = %v; the parser says %v, want InvalidArgument labelSelector: ...", selector, err, parseErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("List(%q) = %v; the parser accepts it", selector, err)
		}
		var want []string
		for name, l := range pods {
			if sel.Matches(l) {
				want = append(want, "default/"+name)
			}
		}
		sort.Strings(want)
		listed := names(resp.GetItems())
		if strings.Join(listed, ",") != strings.Join(want, ",") {
			t.Fatalf("List(%q) = %v, want %v", selector, listed, want)
		}

		// The initial events of a Watch with the same selector: the same
		// set, then the stream is live (a later pod arrives or not).
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		stream, err := c.Watch(wctx, &kplanev1.WatchRequest{Kind: "Pod", LabelSelector: selector, ResourceVersion: "0"})
		must(t, err, "watch")
		var watched []*kplanev1.Object
		for range listed {
			ev, err := stream.Recv()
			must(t, err, "watch recv")
			if ev.GetType() != kplanev1.EventType_EVENT_TYPE_ADDED {
				t.Fatalf("Watch(%q) initial event %v", selector, ev.GetType())
			}
			watched = append(watched, ev.GetObject())
		}
		if got := names(watched); strings.Join(got, ",") != strings.Join(listed, ",") {
			t.Fatalf("Watch(%q) initial objects %v, List %v", selector, got, listed)
		}
	})
}
