package controller_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/controller"
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
