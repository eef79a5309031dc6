package record

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRepeatsFoldIntoOneEvent(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	})})
	if err != nil {
		t.Fatal(err)
	}
	node, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Namespace", Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	r := New(api, "scheduler", "host-1", nil)
	for i := 0; i < 3; i++ {
		r.Eventf(ctx, pod.Object, Warning, "FailedScheduling", "0/%d nodes are available", 3)
	}
	r.Eventf(ctx, pod.Object, Normal, "Scheduled", "assigned to n1")
	r.Eventf(ctx, node.Object, Normal, "Seen", "cluster-scoped object")

	list, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events", len(list.Items))
	byReason := map[string]*kplanev1.Event{}
	for _, o := range list.Items {
		e := o.GetEvent()
		if _, dup := byReason[e.Reason]; dup {
			t.Fatalf("two events with reason %s", e.Reason)
		}
		byReason[e.Reason] = e
	}
	failed := byReason["FailedScheduling"]
	if failed == nil || failed.Count != 3 || failed.Type != Warning || failed.Message != "0/3 nodes are available" {
		t.Fatalf("folded event wrong: %v", failed)
	}
	if got := failed.InvolvedObject; got.GetKind() != "Pod" || got.GetName() != "p" || got.GetUid() != pod.Object.Meta().Uid {
		t.Fatalf("involvedObject wrong: %v", got)
	}
	if failed.Source.GetComponent() != "scheduler" || failed.Source.GetHost() != "host-1" {
		t.Fatalf("source wrong: %v", failed.Source)
	}
	if byReason["Scheduled"].GetCount() != 1 || byReason["Seen"] == nil {
		t.Fatalf("other events wrong: %v", byReason)
	}
}
