package controller_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/controller"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestClaim against a real apiserver: a matching orphan is adopted, an
// owned pod that stopped matching is released, a pod another controller
// owns and a non-matching orphan are left alone; with the owner gone
// (replaced by a namesake) nothing is adopted and the error says so.
func TestClaim(t *testing.T) {
	ctx, api := setup(t)
	l := map[string]string{"app": "db"}
	ownerResp, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.StatefulSet{
		Metadata: &kplanev1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: &kplanev1.StatefulSetSpec{Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l}, Spec: newPod("x").Spec}},
	})})
	if err != nil {
		t.Fatal(err)
	}
	owner := ownerResp.GetObject()
	ref := &kplanev1.OwnerReference{ApiVersion: "apps/v1", Kind: "StatefulSet", Name: "db", Uid: owner.Meta().GetUid(), Controller: true}
	pod := func(name string, labels map[string]string, refs ...*kplanev1.OwnerReference) *kplanev1.Object {
		p := newPod(name)
		p.Metadata.Labels, p.Metadata.OwnerReferences = labels, refs
		return kplanev1.MustWrap(create(t, ctx, api, p))
	}
	orphan := pod("orphan", l)
	stray := pod("stray", map[string]string{"app": "other"}, ref)
	foreign := pod("foreign", l, &kplanev1.OwnerReference{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", Uid: "u-other", Controller: true})
	unrelated := pod("unrelated", map[string]string{"app": "other"})
	match := func(o *kplanev1.Object) bool { return o.Meta().GetLabels()["app"] == "db" }

	owned, err := controller.Claim(ctx, api, owner, ref, []*kplanev1.Object{orphan, stray, foreign, unrelated}, match)
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != 1 || owned[0].Meta().GetName() != "orphan" {
		t.Fatalf("owned %v", owned)
	}
	get := func(name string) *kplanev1.ObjectMeta {
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetObject().Meta()
	}
	if r := get("orphan").GetOwnerReferences(); len(r) != 1 || r[0].GetUid() != owner.Meta().GetUid() {
		t.Errorf("orphan not adopted: %v", r)
	}
	if r := get("stray").GetOwnerReferences(); len(r) != 0 {
		t.Errorf("stray not released: %v", r)
	}
	if r := get("foreign").GetOwnerReferences(); len(r) != 1 || r[0].GetUid() != "u-other" {
		t.Errorf("foreign pod touched: %v", r)
	}
	if r := get("unrelated").GetOwnerReferences(); len(r) != 0 {
		t.Errorf("unrelated pod touched: %v", r)
	}

	// The owner replaced by a namesake: the cached one must not adopt.
	if _, err := api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "StatefulSet", Namespace: "default", Name: "db"}); err != nil {
		t.Fatal(err)
	}
	again := proto.Clone(owner).(*kplanev1.Object)
	again.Meta().Uid, again.Meta().ResourceVersion = "", ""
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: again}); err != nil {
		t.Fatal(err)
	}
	late := pod("late", l)
	if _, err := controller.Claim(ctx, api, owner, ref, []*kplanev1.Object{late}, match); err == nil {
		t.Fatal("adopting for a replaced owner: no error")
	}
	if r := get("late").GetOwnerReferences(); len(r) != 0 {
		t.Errorf("adopted for a replaced owner: %v", r)
	}
}
