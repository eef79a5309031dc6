package rollout

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func dbTemplate(image string) *kplanev1.PodTemplateSpec {
	return &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "db"}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: image}}}}
}

func TestRevisionRoundTrip(t *testing.T) {
	owner := &kplanev1.ObjectMeta{Name: "db", Namespace: "default", Uid: "u1"}
	cr := NewRevision("StatefulSet", owner, dbTemplate("db:1"), 3, nil)
	if cr.Revision != 3 || cr.Metadata.Name != "db-"+TemplateHash(dbTemplate("db:1"), nil) || cr.Metadata.Labels["app"] != "db" {
		t.Fatalf("revision: %v", cr)
	}
	ref := cr.Metadata.OwnerReferences[0]
	if ref.Kind != "StatefulSet" || ref.ApiVersion != "apps/v1" || !ref.Controller || ref.Uid != "u1" {
		t.Fatalf("owner reference: %v", ref)
	}
	got, err := DecodeTemplate(cr)
	if err != nil || got.Spec.Containers[0].Image != "db:1" {
		t.Fatalf("decode: %v, %v", got, err)
	}
	if !SameTemplate(cr, dbTemplate("db:1")) || SameTemplate(cr, dbTemplate("db:2")) {
		t.Error("SameTemplate compares templates")
	}
	if RevisionName("db", dbTemplate("db:1"), nil) == RevisionName("db", dbTemplate("db:1"), new(int32)) {
		t.Error("a collision count must change the name")
	}
	if _, err := DecodeTemplate(&kplanev1.ControllerRevision{Data: []byte{0xff, 0xff}}); err == nil {
		t.Error("garbage data decoded")
	}
}

func TestStaleRevisions(t *testing.T) {
	var revs []*kplanev1.ControllerRevision
	for _, name := range []string{"r5", "r1", "r3", "r2", "r4"} {
		revs = append(revs, &kplanev1.ControllerRevision{Metadata: &kplanev1.ObjectMeta{Name: name}, Revision: int64(name[1] - '0')})
	}
	live := map[string]bool{"r5": true, "r1": true}
	got := StaleRevisions(revs, live, 1)
	if len(got) != 2 || got[0].Metadata.Name != "r2" || got[1].Metadata.Name != "r3" {
		t.Fatalf("stale with limit 1: %v", got)
	}
	if got := StaleRevisions(revs, live, 3); got != nil {
		t.Fatalf("within limit: %v", got)
	}
	if got := StaleRevisions(revs, live, 0); len(got) != 3 {
		t.Fatalf("limit 0 keeps only live ones: %v", got)
	}
	if MaxRevisionNumber(revs) != 5 || MaxRevisionNumber(nil) != 0 {
		t.Error("MaxRevisionNumber")
	}
}
