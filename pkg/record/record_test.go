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

// The fold cache is bounded: past its size the least recently recorded
// event is forgotten, so its repeat starts a new Event instead of
// counting up the old one (and memory does not grow with the number of
// objects a component records events about).
func TestFoldCacheForgetsTheLeastRecent(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRecorder(api, "scheduler", "host-1", nil, 2)
	var pods []*kplanev1.Object
	for _, name := range []string{"a", "b", "c"} {
		resp, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
		})})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, resp.Object)
	}
	for _, p := range pods { // a is evicted when c is remembered
		r.Eventf(ctx, p, Normal, "Scheduled", "assigned")
	}
	r.Eventf(ctx, pods[2], Normal, "Scheduled", "assigned") // c: folded
	r.Eventf(ctx, pods[0], Normal, "Scheduled", "assigned") // a: forgotten, a new Event

	list, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string][]int32{}
	for _, o := range list.Items {
		e := o.GetEvent()
		counts[e.InvolvedObject.GetName()] = append(counts[e.InvolvedObject.GetName()], e.Count)
	}
	if got := counts["c"]; len(got) != 1 || got[0] != 2 {
		t.Errorf("events about c: counts %v, want one Event of count 2", got)
	}
	if got := counts["a"]; len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Errorf("events about a: counts %v, want two Events of count 1 (the first forgotten)", got)
	}
	if got := counts["b"]; len(got) != 1 || got[0] != 1 {
		t.Errorf("events about b: counts %v, want one Event of count 1", got)
	}
}
