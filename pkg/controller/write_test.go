package controller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func newPod(name string) *kplanev1.Pod {
	return &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

func setup(t *testing.T) (context.Context, kplanev1.ResourcesClient) {
	t.Helper()
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, srv.Client()
}

func create(t *testing.T, ctx context.Context, api kplanev1.ResourcesClient, pod *kplanev1.Pod) *kplanev1.Pod {
	t.Helper()
	resp, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(pod)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetObject().GetPod()
}

func labelled(key string) controller.Mutation[*kplanev1.Pod] {
	return func(cur *kplanev1.Pod) *kplanev1.Pod {
		if cur.GetMetadata().GetLabels()[key] != "" {
			return nil // done already
		}
		next := proto.Clone(cur).(*kplanev1.Pod)
		if next.Metadata.Labels == nil {
			next.Metadata.Labels = map[string]string{}
		}
		next.Metadata.Labels[key] = "yes"
		return next
	}
}

// TestUpdateRereadsOnConflict: a write from a stale copy conflicts; the
// helper rereads, decides again on the fresh object, and keeps the other
// writer's change.
func TestUpdateRereadsOnConflict(t *testing.T) {
	ctx, api := setup(t)
	stale := create(t, ctx, api, newPod("p"))
	if _, wrote, err := controller.Update(ctx, api, stale, labelled("first")); err != nil || !wrote {
		t.Fatalf("first writer: wrote=%v err=%v", wrote, err)
	}
	var calls atomic.Int32
	out, wrote, err := controller.Update(ctx, api, stale, func(cur *kplanev1.Pod) *kplanev1.Pod {
		calls.Add(1)
		return labelled("second")(cur)
	})
	if err != nil || !wrote {
		t.Fatalf("second writer: wrote=%v err=%v", wrote, err)
	}
	if calls.Load() != 2 {
		t.Fatalf("mutate ran %d times, want 2 (stale, then reread)", calls.Load())
	}
	if l := out.GetMetadata().GetLabels(); l["first"] != "yes" || l["second"] != "yes" {
		t.Fatalf("labels after both writers: %v", l)
	}
	// Nothing left to do: no write.
	if _, wrote, err := controller.Update(ctx, api, out, labelled("second")); err != nil || wrote {
		t.Fatalf("no-op update: wrote=%v err=%v", wrote, err)
	}
}

// TestUpdateStopsOnReplacedObject: when the object was deleted and a
// namesake created, the helper does not touch the namesake.
func TestUpdateStopsOnReplacedObject(t *testing.T) {
	ctx, api := setup(t)
	old := create(t, ctx, api, newPod("p"))
	if _, err := api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "p", GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	create(t, ctx, api, newPod("p"))
	out, wrote, err := controller.UpdateStatus(ctx, api, old, func(cur *kplanev1.Pod) *kplanev1.Pod {
		next := proto.Clone(cur).(*kplanev1.Pod)
		next.Status = &kplanev1.PodStatus{Phase: kplanev1.PodFailed}
		return next
	})
	if err != nil || wrote || out != nil {
		t.Fatalf("update of a replaced pod: out=%v wrote=%v err=%v", out, wrote, err)
	}
	resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetObject().GetPod().GetStatus().GetPhase() == kplanev1.PodFailed {
		t.Fatal("the namesake was written")
	}
}

// TestDeleteIfSameUID: only the object judged is deleted; a missing or
// replaced one counts as done.
func TestDeleteIfSameUID(t *testing.T) {
	ctx, api := setup(t)
	zero := int64(0)
	opts := client.DeleteOptions{GracePeriodSeconds: &zero}
	old := kplanev1.MustWrap(create(t, ctx, api, newPod("p")))
	if _, err := api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "p", GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, deleted, err := controller.DeleteIfSameUID(ctx, api, old, opts); err != nil || deleted {
		t.Fatalf("delete of a missing pod: deleted=%v err=%v", deleted, err)
	}
	fresh := kplanev1.MustWrap(create(t, ctx, api, newPod("p")))
	if _, deleted, err := controller.DeleteIfSameUID(ctx, api, old, opts); err != nil || deleted {
		t.Fatalf("delete of a replaced pod: deleted=%v err=%v", deleted, err)
	}
	if _, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "p"}); err != nil {
		t.Fatalf("the namesake is gone: %v", err)
	}
	if _, deleted, err := controller.DeleteIfSameUID(ctx, api, fresh, opts); err != nil || !deleted {
		t.Fatalf("delete of the pod judged: deleted=%v err=%v", deleted, err)
	}
}

// TestObjectControlKeepsExpectations: creates and deletes raise the
// owner's expectations before the calls and settle them for failures, and
// the revisions they return let SatisfiedAt release the owner.
func TestObjectControlKeepsExpectations(t *testing.T) {
	ctx, api := setup(t)
	exp := controller.NewExpectations(0)
	oc := &controller.ObjectControl{
		API: api, Expectations: exp,
		OwnerKey: func(*kplanev1.Object) (string, bool) { return "default/owner", true },
	}
	const key = "default/owner"
	var i atomic.Int32
	n, err := oc.Create(ctx, key, 3, func() (*kplanev1.Object, error) {
		return kplanev1.Wrap(newPod("p" + string(rune('0'+i.Add(1)))))
	})
	if err != nil || n != 3 {
		t.Fatalf("create: %d, %v", n, err)
	}
	if adds, _ := exp.Pending(key); adds != 3 || exp.Satisfied(key) {
		t.Fatalf("3 creations must be expected until observed, pending %d", adds)
	}
	if exp.SatisfiedAt(key, 1) {
		t.Fatal("a cache behind the writes must not release the owner")
	}
	if !exp.SatisfiedAt(key, 1<<40) {
		t.Fatal("a cache past every write must release the owner")
	}

	// A systematic failure: slow start stops after the first call, and
	// nothing is left expected.
	n, err = oc.Create(ctx, key, 5, func() (*kplanev1.Object, error) { return nil, errors.New("bad template") })
	if err == nil || n != 0 {
		t.Fatalf("failing create: %d, %v", n, err)
	}
	if adds, _ := exp.Pending(key); adds != 0 {
		t.Fatalf("failed or unattempted creates still expected: %d", adds)
	}

	p1, _ := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "p1"})
	gone := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "nope", Namespace: "default", Uid: "x"}})
	n, err = oc.Delete(ctx, key, []*kplanev1.Object{p1.GetObject(), gone}, client.DeleteOptions{})
	if err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	if _, dels := exp.Pending(key); dels != 1 {
		t.Fatalf("the deletion done must be expected until observed, the missing one not: %d", dels)
	}
	oc.ObserveDelete(p1.GetObject())
	if !exp.Satisfied(key) {
		t.Fatal("observed deletion did not satisfy the owner")
	}
	// The missing pod's NotFound is a delete done, not a failure.
	c := &oc.Counts
	if c.Creates.Load() != 3+1 || c.CreateFailures.Load() != 1 || c.Deletes.Load() != 2 || c.DeleteFailures.Load() != 0 {
		t.Fatalf("counts: creates %d (failed %d), deletes %d (failed %d); want 4 (1), 2 (0)",
			c.Creates.Load(), c.CreateFailures.Load(), c.Deletes.Load(), c.DeleteFailures.Load())
	}
}
