package garbagecollector

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func replicaSet(name string) *kplanev1.Object {
	labels := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.ReplicaSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: labels},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: labels},
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	})
}

func ownedPod(name string, owners ...*kplanev1.Object) *kplanev1.Object {
	meta := &kplanev1.ObjectMeta{Name: name, Namespace: "default"}
	for i, o := range owners {
		meta.OwnerReferences = append(meta.OwnerReferences, &kplanev1.OwnerReference{
			Kind: o.KindName(), Name: o.Meta().Name, Uid: o.Meta().Uid, Controller: i == 0,
		})
	}
	return kplanev1.MustWrap(&kplanev1.Pod{Metadata: meta, Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}})
}

type fixture struct {
	t   *testing.T
	api kplanev1.ResourcesClient
	ctx context.Context
}

func newFixture(t *testing.T) *fixture {
	api, _ := controllertest.Start(t, NewService())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &fixture{t: t, api: api, ctx: ctx}
}

func (f *fixture) create(o *kplanev1.Object) *kplanev1.Object {
	f.t.Helper()
	resp, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: o})
	if err != nil {
		f.t.Fatalf("create %s %s: %v", o.KindName(), o.Key(), err)
	}
	return resp.Object
}

func (f *fixture) get(kind, name string) (*kplanev1.Object, bool) {
	f.t.Helper()
	resp, err := f.api.Get(f.ctx, &kplanev1.GetRequest{Kind: kind, Namespace: "default", Name: name})
	if err != nil {
		return nil, false
	}
	return resp.Object, true
}

// eventually polls cond until it holds or the deadline passes.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	testutil.Eventually(f.t, 20*time.Second, what, cond)
}

func (f *fixture) delete(kind, name, propagation string) {
	f.t.Helper()
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: kind, Namespace: "default", Name: name, PropagationPolicy: propagation}); err != nil {
		f.t.Fatalf("delete %s %s: %v", kind, name, err)
	}
}

func TestBackgroundCascadeDeletesDependents(t *testing.T) {
	f := newFixture(t)
	rs := f.create(replicaSet("web"))
	f.create(ownedPod("web-a", rs))
	f.create(ownedPod("web-b", rs))
	other := f.create(ownedPod("unrelated"))
	f.delete("ReplicaSet", "web", "Background")
	f.eventually("both dependents are deleted", func() bool {
		_, a := f.get("Pod", "web-a")
		_, b := f.get("Pod", "web-b")
		return !a && !b
	})
	if _, ok := f.get("Pod", other.Meta().Name); !ok {
		t.Fatal("a pod without owners was deleted")
	}
}

func TestOrphanKeepsDependentsAndStripsReferences(t *testing.T) {
	f := newFixture(t)
	rs := f.create(replicaSet("web"))
	f.create(ownedPod("web-a", rs))
	f.delete("ReplicaSet", "web", "Orphan")
	f.eventually("the owner is gone", func() bool { _, ok := f.get("ReplicaSet", "web"); return !ok })
	pod, ok := f.get("Pod", "web-a")
	if !ok {
		t.Fatal("orphaned pod was deleted")
	}
	if refs := pod.Meta().GetOwnerReferences(); len(refs) != 0 {
		t.Fatalf("orphaned pod still has owner references %v", refs)
	}
}

func TestForegroundDeletesDependentsFirst(t *testing.T) {
	f := newFixture(t)
	rs := f.create(replicaSet("web"))
	f.create(ownedPod("web-a", rs))
	f.delete("ReplicaSet", "web", "Foreground")
	// The owner is marked, not gone, while a dependent exists.
	if o, ok := f.get("ReplicaSet", "web"); ok && o.Meta().DeletionTimestamp == nil {
		t.Fatal("foreground-deleted owner has no deletionTimestamp")
	}
	f.eventually("dependent and then owner are gone", func() bool {
		_, pod := f.get("Pod", "web-a")
		_, owner := f.get("ReplicaSet", "web")
		return !pod && !owner
	})
}

func TestDanglingReferenceDropped(t *testing.T) {
	f := newFixture(t)
	a := f.create(replicaSet("a"))
	b := f.create(replicaSet("b"))
	f.create(ownedPod("shared", a, b))
	f.delete("ReplicaSet", "a", "Background")
	f.eventually("the reference to the deleted owner is dropped", func() bool {
		p, ok := f.get("Pod", "shared")
		return ok && len(p.Meta().GetOwnerReferences()) == 1 && p.Meta().OwnerReferences[0].GetUid() == b.Meta().Uid
	})
}

func TestOwnerWithWrongUIDCountsAsGone(t *testing.T) {
	f := newFixture(t)
	rs := f.create(replicaSet("web"))
	stale := proto.Clone(rs).(*kplanev1.Object)
	stale.Meta().Uid = "00000000-0000-0000-0000-000000000000"
	f.create(ownedPod("web-old", stale))
	f.eventually("a pod naming a missing owner uid is collected", func() bool { _, ok := f.get("Pod", "web-old"); return !ok })
	if _, ok := f.get("ReplicaSet", "web"); !ok {
		t.Fatal("the live owner of the same name was deleted")
	}
}
