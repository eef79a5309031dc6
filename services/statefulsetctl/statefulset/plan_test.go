package statefulset

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is ordinal i of set "db" at revision rev; ready makes it Running
// and Ready.
func pod(i int32, rev string, ready bool) *kplanev1.Pod {
	p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: PodName("db", i),
		Labels: map[string]string{kplanev1.LabelControllerRevisionHash: rev, kplanev1.LabelPodIndex: strconv.Itoa(int(i))}},
		Status: &kplanev1.PodStatus{Phase: kplanev1.PodPending}}
	if ready {
		p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning, Conditions: []*kplanev1.Condition{
			{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.New(t0.Add(-time.Hour))}}}
	}
	return p
}

func pods(ps ...*kplanev1.Pod) map[int32]*kplanev1.Pod {
	m := map[int32]*kplanev1.Pod{}
	for _, p := range ps {
		i, _ := Ordinal("db", p.Metadata.Name)
		m[i] = p
	}
	return m
}

func names(ps []*kplanev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Metadata.Name)
	}
	return out
}

func eq[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOrdinal(t *testing.T) {
	for name, want := range map[string]int32{"db-0": 0, "db-12": 12} {
		if got, ok := Ordinal("db", name); !ok || got != want {
			t.Errorf("Ordinal(%q) = %d, %v", name, got, ok)
		}
	}
	for _, name := range []string{"db", "db-", "db-01", "db--1", "db-+1", "db-x", "dbx-1", "db-0-1", "db-99999999999"} {
		if _, ok := Ordinal("db", name); ok {
			t.Errorf("Ordinal(%q) accepted", name)
		}
	}
	ss := &kplanev1.StatefulSet{Metadata: &kplanev1.ObjectMeta{Name: "db"}, Spec: &kplanev1.StatefulSetSpec{
		VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Metadata: &kplanev1.ObjectMeta{Name: "data"}}}}}
	if i, ok := ClaimOrdinal(ss, "data-db-3"); !ok || i != 3 {
		t.Errorf("ClaimOrdinal = %d, %v", i, ok)
	}
	if _, ok := ClaimOrdinal(ss, "logs-db-3"); ok {
		t.Error("ClaimOrdinal accepted a foreign template")
	}
}

func TestDecideOrderedReady(t *testing.T) {
	b := Bounds{Replicas: 3, Ordered: true, MaxUnavailable: 1}
	// Empty: only 0 is created.
	if p := Decide(b, pods(), "r1", t0); !eq(p.Create, []int32{0}) || len(p.Delete) != 0 {
		t.Fatalf("empty: %+v", p)
	}
	// 0 exists but is not Ready: nothing, 1 waits.
	if p := Decide(b, pods(pod(0, "r1", false)), "r1", t0); len(p.Create) != 0 || p.Waiting == "" {
		t.Fatalf("0 not ready: %+v", p)
	}
	// 0 Ready: 1 next.
	if p := Decide(b, pods(pod(0, "r1", true)), "r1", t0); !eq(p.Create, []int32{1}) {
		t.Fatalf("0 ready: %+v", p)
	}
	// A hole at 1 with 2 present: 1 is refilled first.
	if p := Decide(b, pods(pod(0, "r1", true), pod(2, "r1", true)), "r1", t0); !eq(p.Create, []int32{1}) {
		t.Fatalf("hole: %+v", p)
	}
	// A terminating pod blocks its successor's recreation and everything after.
	term := pod(1, "r1", true)
	term.Metadata.DeletionTimestamp = timestamppb.New(t0)
	if p := Decide(b, pods(pod(0, "r1", true), term), "r1", t0); len(p.Create) != 0 || len(p.Delete) != 0 {
		t.Fatalf("terminating 1: %+v", p)
	}
	// A failed pod is deleted (recreated later under the same name).
	failed := pod(0, "r1", false)
	failed.Status.Phase = kplanev1.PodFailed
	if p := Decide(b, pods(failed), "r1", t0); !eq(names(p.Delete), []string{"db-0"}) || len(p.Create) != 0 {
		t.Fatalf("failed: %+v", p)
	}
}

func TestDecideScaleDown(t *testing.T) {
	all := pods(pod(0, "r1", true), pod(1, "r1", true), pod(2, "r1", true), pod(3, "r1", true), pod(4, "r1", true))
	ordered := Bounds{Replicas: 2, Ordered: true, MaxUnavailable: 1}
	if p := Decide(ordered, all, "r1", t0); !eq(names(p.Delete), []string{"db-4"}) {
		t.Fatalf("ordered scale down deletes the highest only: %v", names(p.Delete))
	}
	term := proto.Clone(all[4]).(*kplanev1.Pod)
	term.Metadata.DeletionTimestamp = timestamppb.New(t0)
	waiting := pods(all[0], all[1], all[2], all[3], term)
	if p := Decide(ordered, waiting, "r1", t0); len(p.Delete) != 0 {
		t.Fatalf("ordered scale down waits for 4 to go: %v", names(p.Delete))
	}
	parallel := Bounds{Replicas: 2, MaxUnavailable: 1}
	if p := Decide(parallel, all, "r1", t0); !eq(names(p.Delete), []string{"db-4", "db-3", "db-2"}) {
		t.Fatalf("parallel scale down: %v", names(p.Delete))
	}
}

func TestDecideParallel(t *testing.T) {
	b := Bounds{Replicas: 3, MaxUnavailable: 1}
	if p := Decide(b, pods(), "r1", t0); !eq(p.Create, []int32{0, 1, 2}) {
		t.Fatalf("parallel creates all: %+v", p)
	}
	if p := Decide(b, pods(pod(1, "r1", false)), "r1", t0); !eq(p.Create, []int32{0, 2}) {
		t.Fatalf("parallel does not wait for readiness: %+v", p)
	}
}

func TestDecideRollingUpdate(t *testing.T) {
	old := pods(pod(0, "r1", true), pod(1, "r1", true), pod(2, "r1", true), pod(3, "r1", true))
	b := Bounds{Replicas: 4, Ordered: true, MaxUnavailable: 1}
	if p := Decide(b, old, "r2", t0); !eq(names(p.Delete), []string{"db-3"}) {
		t.Fatalf("highest ordinal first: %v", names(p.Delete))
	}
	// 3 updated but not Ready yet: nothing else goes.
	mid := pods(old[0], old[1], old[2], pod(3, "r2", false))
	if p := Decide(b, mid, "r2", t0); len(p.Delete) != 0 {
		t.Fatalf("waits for the updated pod: %v", names(p.Delete))
	}
	// Partition 2: only 3 and 2 are ever replaced.
	bp := b
	bp.Partition = 2
	part := pods(old[0], old[1], old[2], pod(3, "r2", true))
	if p := Decide(bp, part, "r2", t0); !eq(names(p.Delete), []string{"db-2"}) {
		t.Fatalf("partition: %v", names(p.Delete))
	}
	done := pods(old[0], old[1], pod(2, "r2", true), pod(3, "r2", true))
	if p := Decide(bp, done, "r2", t0); len(p.Delete) != 0 {
		t.Fatalf("below partition untouched: %v", names(p.Delete))
	}
	// maxUnavailable 2 with Parallel: two at a time, highest first.
	b2 := Bounds{Replicas: 4, MaxUnavailable: 2}
	if p := Decide(b2, old, "r2", t0); !eq(names(p.Delete), []string{"db-3", "db-2"}) {
		t.Fatalf("maxUnavailable 2: %v", names(p.Delete))
	}
	// OnDelete never replaces.
	if p := Decide(Bounds{Replicas: 4, Ordered: true, OnDelete: true, MaxUnavailable: 1}, old, "r2", t0); len(p.Delete) != 0 {
		t.Fatalf("OnDelete: %v", names(p.Delete))
	}
	// minReadySeconds: a pod Ready for less than that is unavailable, and
	// the plan says when to look again.
	fresh := pod(3, "r2", true)
	fresh.Status.Conditions[0].LastTransitionTime = timestamppb.New(t0.Add(-2 * time.Second))
	bm := b
	bm.MinReady = 10 * time.Second
	if p := Decide(bm, pods(old[0], old[1], old[2], fresh), "r2", t0); len(p.Delete) != 0 || p.Recheck != 8*time.Second {
		t.Fatalf("minReady: delete %v, recheck %v", names(p.Delete), p.Recheck)
	}
}

func TestBoundsOf(t *testing.T) {
	ss := &kplanev1.StatefulSet{Spec: &kplanev1.StatefulSetSpec{Replicas: proto.Int32(10), UpdateStrategy: &kplanev1.StatefulSetUpdateStrategy{
		Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateStatefulSetStrategy{Partition: proto.Int32(3), MaxUnavailable: kplanev1.IntOrStringFromString("25%")}}}}
	b, err := BoundsOf(ss)
	if err != nil || b.Replicas != 10 || b.Partition != 3 || b.MaxUnavailable != 2 || !b.Ordered {
		t.Fatalf("bounds: %+v, %v", b, err)
	}
	ss.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = kplanev1.IntOrStringFromString("1%")
	if b, _ := BoundsOf(ss); b.MaxUnavailable != 1 {
		t.Fatalf("a percent rounding to 0 is 1: %+v", b)
	}
	ss.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = kplanev1.IntOrStringFromString("lots")
	if _, err := BoundsOf(ss); err == nil {
		t.Fatal("a bad maxUnavailable is an error")
	}
}

func TestNewPodAndClaim(t *testing.T) {
	ss := &kplanev1.StatefulSet{Metadata: &kplanev1.ObjectMeta{Name: "db", Namespace: "ns", Uid: "u1"}, Spec: &kplanev1.StatefulSetSpec{
		ServiceName:                          "db-svc",
		Selector:                             &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		PersistentVolumeClaimRetentionPolicy: &kplanev1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Delete", WhenScaled: "Retain"},
		VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Metadata: &kplanev1.ObjectMeta{Name: "data"},
			Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"}}}}}}
	tmpl := &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "db"}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "db:1"}},
			Volumes: []*kplanev1.Volume{{Name: "data", EmptyDir: &kplanev1.EmptyDirVolumeSource{}}}}}
	p := NewPod(ss, tmpl, "db-abc", 2)
	l := p.Metadata.Labels
	if p.Metadata.Name != "db-2" || l["app"] != "db" || l[kplanev1.LabelStatefulSetPodName] != "db-2" || l[kplanev1.LabelPodIndex] != "2" ||
		l[kplanev1.LabelControllerRevisionHash] != "db-abc" || p.Spec.Hostname != "db-2" || p.Spec.Subdomain != "db-svc" {
		t.Fatalf("identity: %v", p)
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].GetPersistentVolumeClaim().GetClaimName() != "data-db-2" || p.Spec.Volumes[0].EmptyDir != nil {
		t.Fatalf("the template's volume of the claim's name points at the claim: %v", p.Spec.Volumes)
	}
	if tmpl.Spec.Volumes[0].EmptyDir == nil {
		t.Fatal("NewPod changed the template")
	}
	ref := p.Metadata.OwnerReferences[0]
	if ref.Kind != "StatefulSet" || ref.Uid != "u1" || !ref.Controller {
		t.Fatalf("owner: %v", ref)
	}
	c := NewClaim(ss, ss.Spec.VolumeClaimTemplates[0], 2)
	if c.Metadata.Name != "data-db-2" || c.Metadata.Labels["app"] != "db" || len(c.Metadata.OwnerReferences) != 1 ||
		c.Metadata.OwnerReferences[0].Controller || c.Spec.AccessModes[0] != "ReadWriteOnce" {
		t.Fatalf("claim: %v", c)
	}
	ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = "Retain"
	if c := NewClaim(ss, ss.Spec.VolumeClaimTemplates[0], 0); len(c.Metadata.OwnerReferences) != 0 {
		t.Fatalf("Retain: no owner: %v", c.Metadata.OwnerReferences)
	}
}

func TestStatus(t *testing.T) {
	ss := &kplanev1.StatefulSet{Metadata: &kplanev1.ObjectMeta{Generation: 4}}
	b := Bounds{Replicas: 3}
	st := Status(ss, b, pods(pod(0, "r1", true), pod(1, "r2", true), pod(2, "r2", false)), "r1", "r2", nil, t0)
	if st.Replicas != 3 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 || st.CurrentReplicas != 1 || st.UpdatedReplicas != 2 ||
		st.CurrentRevision != "r1" || st.UpdateRevision != "r2" || st.ObservedGeneration != 4 {
		t.Fatalf("mid-update: %v", st)
	}
	st = Status(ss, b, pods(pod(0, "r2", true), pod(1, "r2", true), pod(2, "r2", true)), "r1", "r2", nil, t0)
	if st.CurrentRevision != "r2" || st.CurrentReplicas != 3 {
		t.Fatalf("complete update makes r2 current: %v", st)
	}
}
