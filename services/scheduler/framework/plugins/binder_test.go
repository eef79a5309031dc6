package plugins

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// clientHandle is a Handle with a real apiserver client (the rest is not
// used by the plugins under test).
type clientHandle struct {
	framework.Handle
	c kplanev1.ResourcesClient
}

func (h clientHandle) Client() kplanev1.ResourcesClient { return h.c }

// DefaultBinder writes spec.nodeName on the version of the pod the
// decision was made on: a pod changed meanwhile (labels, or bound by
// someone else) is a Conflict and a deleted one NotFound, and neither is
// written.
func TestDefaultBinder(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	pods := client.Pods(c)
	binder := DefaultBinder{h: clientHandle{c: c}}
	update := func(p *kplanev1.Pod, mod func(*kplanev1.Pod)) {
		next := proto.Clone(p).(*kplanev1.Pod)
		mod(next)
		if _, err := pods.Update(ctx, next); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, pod string
		// meanwhile happens between the decision and the binding.
		meanwhile func(p *kplanev1.Pod)
		check     func(error) bool
		wantNode  string
	}{
		{"binds", "fresh", nil, func(err error) bool { return err == nil }, "n1"},
		{"pod changed meanwhile", "changed", func(p *kplanev1.Pod) {
			update(p, func(p *kplanev1.Pod) { p.Metadata.Labels = map[string]string{"changed": "yes"} })
		}, client.IsConflict, ""},
		{"bound elsewhere meanwhile", "elsewhere", func(p *kplanev1.Pod) {
			update(p, func(p *kplanev1.Pod) { p.Spec.NodeName = "n2" })
		}, client.IsConflict, "n2"},
		{"pod deleted meanwhile", "deleted", func(p *kplanev1.Pod) {
			if _, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: p.GetMetadata().GetName(), GracePeriodSeconds: proto.Int64(0)}); err != nil {
				t.Fatal(err)
			}
		}, client.IsNotFound, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(tc.pod)
			p.Metadata.Uid = "" // the apiserver gives one
			created, err := pods.Create(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			decided := info(t, created)
			if tc.meanwhile != nil {
				tc.meanwhile(created)
			}
			st := binder.Bind(ctx, framework.NewCycleState(), decided, "n1")
			if err := st.AsError(); !tc.check(err) {
				t.Fatalf("Bind: %v (code %v)", err, st.Code())
			}
			got, err := pods.Get(ctx, "default", created.GetMetadata().GetName())
			switch {
			case tc.wantNode == "-":
				if !client.IsNotFound(err) {
					t.Fatalf("the deleted pod is back: %v %v", got, err)
				}
			case err != nil:
				t.Fatal(err)
			case got.GetSpec().GetNodeName() != tc.wantNode:
				t.Fatalf("spec.nodeName %q, want %q", got.GetSpec().GetNodeName(), tc.wantNode)
			}
		})
	}
}
