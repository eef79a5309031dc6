package controller_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// lostReply commits every create and then reports Unavailable, as an
// apiserver killed between its etcd write and its reply does.
type lostReply struct {
	kplanev1.ResourcesClient
	committed int64 // revision of the last committed create
}

func (l *lostReply) Create(ctx context.Context, req *kplanev1.CreateRequest, opts ...grpc.CallOption) (*kplanev1.CreateResponse, error) {
	resp, err := l.ResourcesClient.Create(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	l.committed, _ = apiutil.ParseResourceVersion(resp.GetObject().Meta().GetResourceVersion())
	return nil, status.Error(codes.Unavailable, "connection reset")
}

// TestObjectControlKeepsACreateOfUnknownOutcomeExpected: a create whose
// outcome is unknown stays expected (lowering it would create the object
// twice) until the cache has caught up with a revision read after the
// failure, which shows the object if it was written.
func TestObjectControlKeepsACreateOfUnknownOutcomeExpected(t *testing.T) {
	ctx, api := setup(t)
	exp := controller.NewExpectations(0)
	lost := &lostReply{ResourcesClient: api}
	oc := &controller.ObjectControl{API: lost, Expectations: exp,
		OwnerKey: func(*kplanev1.Object) (string, bool) { return "default/owner", true }}
	const key = "default/owner"
	n, err := oc.Create(ctx, key, 1, func() (*kplanev1.Object, error) { return kplanev1.Wrap(newPod("maybe")) })
	if err == nil || n != 0 {
		t.Fatalf("create: %d, %v; want the Unavailable error", n, err)
	}
	if adds, _ := exp.Pending(key); adds != 1 {
		t.Fatalf("a create of unknown outcome must stay expected, pending %d", adds)
	}
	if exp.SatisfiedAt(key, lost.committed-1) {
		t.Fatal("a cache from before the create must not release the owner")
	}
	if !exp.SatisfiedAt(key, lost.committed) {
		t.Fatal("a cache at the revision read after the failure must release the owner")
	}
	if c := oc.Counts.CreateFailures.Load(); c != 1 {
		t.Fatalf("create failures counted %d, want 1", c)
	}
}

// cutAfterCommit commits a create, then ends the caller's term (cancel)
// and reports Unavailable: a lost lease cancels the work context just as
// the apiserver goes away, so no revision can be read after the failure.
type cutAfterCommit struct {
	kplanev1.ResourcesClient
	cancel    context.CancelFunc
	committed int64
}

func (c *cutAfterCommit) Create(ctx context.Context, req *kplanev1.CreateRequest, opts ...grpc.CallOption) (*kplanev1.CreateResponse, error) {
	resp, err := c.ResourcesClient.Create(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	c.committed, _ = apiutil.ParseResourceVersion(resp.GetObject().Meta().GetResourceVersion())
	c.cancel()
	return nil, status.Error(codes.Unavailable, "connection reset")
}

// TestObjectControlResolvesAnUnknownOutcomeInALaterReconcile: when no
// revision could be read after a create of unknown outcome (its context
// ended with the term), the revision rule must not release the owner on
// its own, and ObjectControl.SatisfiedAt reads one in the next reconcile
// and releases the owner once the cache shows the committed object,
// rather than after the TTL.
func TestObjectControlResolvesAnUnknownOutcomeInALaterReconcile(t *testing.T) {
	ctx, api := setup(t)
	pods, err := informer.New(api, informer.Options{Selection: informer.Selection{Kind: "Pod"}})
	if err != nil {
		t.Fatal(err)
	}
	infCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pods.Run(infCtx) // ends with infCtx
	}()
	t.Cleanup(func() { stop(); <-done })
	testutil.Eventually(t, 10*time.Second, "pod informer to sync", pods.HasSynced)

	exp := controller.NewExpectations(0)
	termCtx, endTerm := context.WithCancel(ctx)
	cut := &cutAfterCommit{ResourcesClient: api, cancel: endTerm}
	oc := &controller.ObjectControl{API: cut, Expectations: exp,
		OwnerKey: func(*kplanev1.Object) (string, bool) { return "default/owner", true }}
	const key = "default/owner"
	if n, err := oc.Create(termCtx, key, 1, func() (*kplanev1.Object, error) { return kplanev1.Wrap(newPod("maybe")) }); err == nil || n != 0 {
		t.Fatalf("create: %d, %v; want the Unavailable error", n, err)
	}
	if exp.SatisfiedAt(key, cut.committed+1000) {
		t.Fatal("with no revision read after the failure, no cache revision may release the owner")
	}
	testutil.Eventually(t, 10*time.Second, "the owner to be released", func() bool {
		manage, err := oc.SatisfiedAt(ctx, key, pods)
		if err != nil {
			t.Fatal(err)
		}
		if manage {
			if _, ok := pods.Store().GetByName("default", "maybe"); !ok {
				t.Fatal("released before the cache showed the committed pod")
			}
		}
		return manage
	})
}
