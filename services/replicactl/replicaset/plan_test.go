package replicaset

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const rsUID = "rs-uid"

func testRS(replicas int32, mut ...func(*kplanev1.ReplicaSet)) *Owner {
	rs := &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default", Uid: rsUID, Generation: 3},
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{
				MatchLabels:      map[string]string{"app": "web"},
				MatchExpressions: []*kplanev1.LabelSelectorRequirement{{Key: "tier", Operator: "In", Values: []string{"front", "edge"}}},
			},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front", "extra": "x"}},
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
	for _, m := range mut {
		m(rs)
	}
	o, err := OwnerOf(kplanev1.MustWrap(rs))
	if err != nil {
		panic(err)
	}
	return o
}

type podOpt func(*kplanev1.Pod)

func mkPod(name string, opts ...podOpt) *kplanev1.Pod {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{
			Name: name, Namespace: "default", Uid: "uid-" + name,
			Labels:            map[string]string{"app": "web", "tier": "front", "extra": "x"},
			CreationTimestamp: timestamppb.New(t0),
			OwnerReferences:   []*kplanev1.OwnerReference{{Kind: kindReplicaSet, Name: "web", Uid: rsUID, Controller: true}},
		},
		Spec:   &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
		Status: &kplanev1.PodStatus{Phase: kplanev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func orphan(p *kplanev1.Pod)   { p.Metadata.OwnerReferences = nil }
func onNode(n string) podOpt   { return func(p *kplanev1.Pod) { p.Spec.NodeName = n } }
func phase(ph string) podOpt   { return func(p *kplanev1.Pod) { p.Status.Phase = ph } }
func deleting(p *kplanev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.New(t0) }
func labelsOf(l map[string]string) podOpt {
	return func(p *kplanev1.Pod) { p.Metadata.Labels = l }
}
func ownedBy(kind, name, uid string) podOpt {
	return func(p *kplanev1.Pod) {
		p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{Kind: kind, Name: name, Uid: uid, Controller: true}}
	}
}
func readySince(t time.Time) podOpt {
	return func(p *kplanev1.Pod) {
		p.Status.Phase = kplanev1.PodRunning
		p.Status.Conditions = append(p.Status.Conditions, &kplanev1.Condition{Type: kplanev1.PodReady, Status: "True", LastTransitionTime: timestamppb.New(t)})
	}
}
func notReady(p *kplanev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, &kplanev1.Condition{Type: kplanev1.PodReady, Status: "False"})
}
func restarts(n int32) podOpt {
	return func(p *kplanev1.Pod) {
		p.Status.ContainerStatuses = []*kplanev1.ContainerStatus{{Name: "c", RestartCount: 1}, {Name: "d", RestartCount: n}}
	}
}
func created(t time.Time) podOpt {
	return func(p *kplanev1.Pod) { p.Metadata.CreationTimestamp = timestamppb.New(t) }
}
func noCreationTime(p *kplanev1.Pod) { p.Metadata.CreationTimestamp = nil }
func cost(c int) podOpt {
	return func(p *kplanev1.Pod) {
		p.Metadata.Annotations = map[string]string{kplanev1.AnnotationPodDeletionCost: strconv.Itoa(c)}
	}
}

func names(pods []*kplanev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.GetMetadata().GetName()
	}
	return out
}

func TestDecide(t *testing.T) {
	otherLabels := map[string]string{"app": "db", "tier": "front"}
	cases := []struct {
		name    string
		owner   *Owner
		pods    []*kplanev1.Pod
		manage  bool
		burst   int
		create  int
		del     []string
		adopt   []string
		release []string
		owned   int
	}{
		{name: "scale up from nothing", owner: testRS(3), manage: true, create: 3},
		{name: "steady", owner: testRS(2), pods: []*kplanev1.Pod{mkPod("a"), mkPod("b")}, manage: true, owned: 2},
		{name: "burst caps creates", owner: testRS(1000), manage: true, burst: 500, create: 500},
		{name: "burst caps deletes", owner: testRS(0), pods: []*kplanev1.Pod{mkPod("a"), mkPod("b"), mkPod("c")}, manage: true, burst: 2, del: []string{"a", "b"}, owned: 3},
		{name: "scale down picks victims", owner: testRS(1),
			pods:   []*kplanev1.Pod{mkPod("run", onNode("n1"), readySince(t0)), mkPod("pend"), mkPod("sched", onNode("n2"))},
			manage: true, del: []string{"pend", "sched"}, owned: 3},
		{name: "expectations pending: no create, no delete", owner: testRS(5), pods: []*kplanev1.Pod{mkPod("a")}, manage: false, owned: 1},
		{name: "expectations pending: adoption still happens", owner: testRS(5), pods: []*kplanev1.Pod{mkPod("o", orphan)}, manage: false, adopt: []string{"o"}, owned: 1},
		{name: "adopt orphans and count them", owner: testRS(2),
			pods:   []*kplanev1.Pod{mkPod("a"), mkPod("o1", orphan), mkPod("o2", orphan)},
			manage: true, adopt: []string{"o1", "o2"}, owned: 3, del: []string{"a"}},
		{name: "orphan not matching is left alone", owner: testRS(1), pods: []*kplanev1.Pod{mkPod("o", orphan, labelsOf(otherLabels))}, manage: true, create: 1},
		{name: "set-based selector: NotIn value is not adopted", owner: testRS(1),
			pods: []*kplanev1.Pod{mkPod("o", orphan, labelsOf(map[string]string{"app": "web", "tier": "back"}))}, manage: true, create: 1},
		{name: "release owned pod that stopped matching and replace it", owner: testRS(1),
			pods: []*kplanev1.Pod{mkPod("gone", labelsOf(otherLabels))}, manage: true, release: []string{"gone"}, create: 1},
		{name: "pods of another controller are ignored", owner: testRS(1),
			pods: []*kplanev1.Pod{mkPod("x", ownedBy(kindReplicaSet, "other", "other-uid")), mkPod("y", ownedBy("Job", "j", "job-uid"))}, manage: true, create: 1},
		{name: "pod of an earlier namesake owner is not ours", owner: testRS(1),
			pods: []*kplanev1.Pod{mkPod("old", ownedBy(kindReplicaSet, "web", "old-uid"))}, manage: true, create: 1},
		{name: "finished pods do not count and are replaced", owner: testRS(2),
			pods: []*kplanev1.Pod{mkPod("ok", phase(kplanev1.PodRunning)), mkPod("done", phase(kplanev1.PodSucceeded)), mkPod("bad", phase(kplanev1.PodFailed))}, manage: true, create: 1, owned: 1},
		{name: "pods being deleted do not count", owner: testRS(2),
			pods: []*kplanev1.Pod{mkPod("a"), mkPod("b", deleting), mkPod("c", deleting, orphan)}, manage: true, create: 1, owned: 1},
		{name: "owner being deleted neither adopts nor manages", owner: testRS(3, func(rs *kplanev1.ReplicaSet) { rs.Metadata.DeletionTimestamp = timestamppb.New(t0) }),
			pods: []*kplanev1.Pod{mkPod("a"), mkPod("o", orphan)}, manage: true, owned: 1},
		{name: "owner being deleted still releases", owner: testRS(3, func(rs *kplanev1.ReplicaSet) { rs.Metadata.DeletionTimestamp = timestamppb.New(t0) }),
			pods: []*kplanev1.Pod{mkPod("a", labelsOf(otherLabels))}, manage: true, release: []string{"a"}},
		{name: "replicas zero deletes everything", owner: testRS(0), pods: []*kplanev1.Pod{mkPod("a"), mkPod("b")}, manage: true, del: []string{"a", "b"}, owned: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.owner, tc.pods, tc.manage, tc.burst)
			if p.Create != tc.create {
				t.Errorf("create = %d, want %d", p.Create, tc.create)
			}
			check := func(what string, got []*kplanev1.Pod, want []string) {
				t.Helper()
				g := names(got)
				if what != "delete" {
					slices.Sort(g)
				}
				if !slices.Equal(g, want) && (len(g) != 0 || len(want) != 0) {
					t.Errorf("%s = %v, want %v", what, g, want)
				}
			}
			check("delete", p.Delete, tc.del)
			check("adopt", p.Adopt, tc.adopt)
			check("release", p.Release, tc.release)
			if len(p.Owned) != tc.owned {
				t.Errorf("owned = %v, want %d pods", names(p.Owned), tc.owned)
			}
		})
	}
}

func TestReplicationControllerSameCodePath(t *testing.T) {
	rc := &kplanev1.ReplicationController{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "rc-uid"},
		Spec: &kplanev1.ReplicationControllerSpec{
			Replicas: proto.Int32(2),
			Selector: map[string]string{"app": "web"},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "web"}}},
		},
	}
	owner, err := OwnerOf(kplanev1.MustWrap(rc))
	if err != nil {
		t.Fatal(err)
	}
	if owner.Key() != "ReplicationController/default/web" {
		t.Fatalf("key %q", owner.Key())
	}
	pods := []*kplanev1.Pod{
		mkPod("mine", ownedBy(kindReplicationController, "web", "rc-uid")),
		mkPod("o", orphan, labelsOf(map[string]string{"app": "web", "tier": "anything"})),
		mkPod("rs", ownedBy(kindReplicaSet, "web", rsUID)), // a ReplicaSet's pod with the same labels
	}
	p := Decide(owner, pods, true, 0)
	if got := names(p.Adopt); !slices.Equal(got, []string{"o"}) || len(p.Owned) != 2 || p.Create != 0 || len(p.Delete) != 0 {
		t.Fatalf("plan: adopt %v owned %v create %d delete %v", got, names(p.Owned), p.Create, names(p.Delete))
	}
	pod := NewPod(owner)
	ref := pod.GetMetadata().GetOwnerReferences()[0]
	if ref.GetKind() != kindReplicationController || ref.GetApiVersion() != "v1" || ref.GetUid() != "rc-uid" {
		t.Fatalf("owner ref %v", ref)
	}

	if _, err := OwnerOf(kplanev1.MustWrap(&kplanev1.ReplicationController{
		Metadata: &kplanev1.ObjectMeta{Name: "bad", Namespace: "default"},
		Spec:     &kplanev1.ReplicationControllerSpec{Selector: map[string]string{"bad key!": "v"}},
	})); err == nil {
		t.Fatal("invalid equality selector accepted")
	}
	empty, err := OwnerOf(kplanev1.MustWrap(&kplanev1.ReplicationController{Metadata: &kplanev1.ObjectMeta{Name: "e", Namespace: "default"}, Spec: &kplanev1.ReplicationControllerSpec{}}))
	if err != nil {
		t.Fatal(err)
	}
	if empty.Selector.Matches(map[string]string{"app": "web"}) {
		t.Fatal("an empty selector must adopt nothing")
	}
}

// TestVictimRanking checks every rule: in each case the first pod must be
// deleted before the second, whichever order they are given in.
func TestVictimRanking(t *testing.T) {
	older, newer := t0.Add(-time.Hour), t0
	cases := []struct {
		rule        string
		first, then *kplanev1.Pod
		others      []*kplanev1.Pod // extra pods of the owner (for co-location)
	}{
		{rule: "unscheduled before scheduled", first: mkPod("a"), then: mkPod("b", onNode("n1"))},
		{rule: "pending before running", first: mkPod("a", onNode("n1")), then: mkPod("b", onNode("n2"), phase(kplanev1.PodRunning))},
		{rule: "pending before unknown", first: mkPod("a", onNode("n1")), then: mkPod("b", onNode("n2"), phase(kplanev1.PodUnknown))},
		{rule: "unknown before running", first: mkPod("a", onNode("n1"), phase(kplanev1.PodUnknown)), then: mkPod("b", onNode("n2"), phase(kplanev1.PodRunning))},
		{rule: "not ready before ready", first: mkPod("a", onNode("n1"), phase(kplanev1.PodRunning), notReady), then: mkPod("b", onNode("n2"), readySince(older))},
		{rule: "no ready condition before ready", first: mkPod("a", onNode("n1"), phase(kplanev1.PodRunning)), then: mkPod("b", onNode("n2"), readySince(older))},
		{rule: "lower deletion cost first", first: mkPod("a", onNode("n1"), readySince(older), cost(-5)), then: mkPod("b", onNode("n2"), readySince(newer))},
		{rule: "crowded node first", first: mkPod("a", onNode("n1"), readySince(older)), then: mkPod("b", onNode("n2"), readySince(newer)),
			others: []*kplanev1.Pod{mkPod("c", onNode("n1"), readySince(older))}},
		{rule: "recently ready before long ready", first: mkPod("a", onNode("n1"), readySince(newer)), then: mkPod("b", onNode("n2"), readySince(older))},
		{rule: "more restarts first", first: mkPod("a", onNode("n1"), readySince(older), restarts(7)), then: mkPod("b", onNode("n2"), readySince(older), restarts(2))},
		{rule: "newer before older", first: mkPod("a", onNode("n1"), readySince(older), created(newer)), then: mkPod("b", onNode("n2"), readySince(older), created(older))},
		{rule: "unknown creation time first", first: mkPod("a", onNode("n1"), noCreationTime), then: mkPod("b", onNode("n2"), created(newer))},
		{rule: "scheduling outranks everything later", first: mkPod("a", readySince(older), restarts(0), created(older)), then: mkPod("b", onNode("n1"), phase(kplanev1.PodRunning), notReady, restarts(9))},
		{rule: "readiness outranks restarts and age", first: mkPod("a", onNode("n1"), phase(kplanev1.PodRunning), notReady, created(older)), then: mkPod("b", onNode("n2"), readySince(older), restarts(9), created(newer))},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			for _, order := range [][]*kplanev1.Pod{{tc.first, tc.then}, {tc.then, tc.first}} {
				pods := append(append([]*kplanev1.Pod{}, order...), tc.others...)
				got := Victims(pods, 1)
				if len(got) != 1 || got[0] != tc.first {
					t.Fatalf("victim %v, want %s", names(got), tc.first.GetMetadata().GetName())
				}
			}
		})
	}
	// A full ranking, shuffled input.
	pods := []*kplanev1.Pod{
		mkPod("long-ready", onNode("n1"), readySince(older)),
		mkPod("unscheduled", created(older)),
		mkPod("ready-now", onNode("n2"), readySince(newer)),
		mkPod("pending-bound", onNode("n3")),
		mkPod("running-not-ready", onNode("n4"), phase(kplanev1.PodRunning), notReady),
	}
	want := []string{"unscheduled", "pending-bound", "running-not-ready", "ready-now", "long-ready"}
	if got := names(Victims(pods, 10)); !slices.Equal(got, want) {
		t.Fatalf("ranking %v, want %v", got, want)
	}
	if Victims(pods, 0) != nil {
		t.Fatal("zero victims requested, some returned")
	}
}

func TestComputeStatus(t *testing.T) {
	owner := testRS(4, func(rs *kplanev1.ReplicaSet) { rs.Spec.MinReadySeconds = 10 })
	pods := []*kplanev1.Pod{
		mkPod("avail", readySince(t0.Add(-time.Minute))),
		mkPod("fresh", readySince(t0.Add(-3*time.Second))),
		mkPod("pending"),
		mkPod("partial", labelsOf(map[string]string{"app": "web", "tier": "front"})),
	}
	st, recheck := ComputeStatus(owner, pods, nil, "", t0)
	want := &kplanev1.ReplicaSetStatus{Replicas: 4, FullyLabeledReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 1, ObservedGeneration: 3}
	if !proto.Equal(st, want) {
		t.Fatalf("status %v, want %v", st, want)
	}
	if recheck != 7*time.Second {
		t.Fatalf("recheck after %v, want 7s (when 'fresh' becomes available)", recheck)
	}

	// Without minReadySeconds every ready pod is available and nothing is rechecked.
	st, recheck = ComputeStatus(testRS(4), pods, nil, "", t0)
	if st.AvailableReplicas != 2 || recheck != 0 {
		t.Fatalf("available %d recheck %v", st.AvailableReplicas, recheck)
	}

	// A failure adds ReplicaFailure naming the error; the same failure later
	// keeps the condition as it was (so the status compares equal); success
	// removes it.
	boom := errors.New(`Pod "web-xxxxx" is invalid: metadata.name: too long`)
	st, _ = ComputeStatus(testRS(1), nil, boom, reasonFailedCreate, t0)
	if len(st.Conditions) != 1 {
		t.Fatalf("conditions %v", st.Conditions)
	}
	c := st.Conditions[0]
	if c.Type != kplanev1.ReplicaSetReplicaFailure || c.Status != "True" || c.Reason != reasonFailedCreate || c.Message != boom.Error() {
		t.Fatalf("condition %v", c)
	}
	failing := testRS(1, func(rs *kplanev1.ReplicaSet) { rs.Status = st })
	again, _ := ComputeStatus(failing, nil, boom, reasonFailedCreate, t0.Add(time.Minute))
	if !statusEqual(failing.Status, again) {
		t.Fatalf("the same failure changed the status: %v -> %v", failing.Status, again)
	}
	healed, _ := ComputeStatus(failing, nil, nil, "", t0.Add(time.Minute))
	if len(healed.Conditions) != 0 {
		t.Fatalf("condition kept after success: %v", healed.Conditions)
	}
	if statusEqual(failing.Status, healed) {
		t.Fatal("healing must change the status")
	}
	if !statusEqual(nil, &kplanev1.ReplicaSetStatus{}) {
		t.Fatal("nil and empty status must compare equal")
	}
}

func TestNewPod(t *testing.T) {
	owner := testRS(1, func(rs *kplanev1.ReplicaSet) {
		rs.Spec.Template.Metadata.Annotations = map[string]string{"a": "b"}
	})
	p := NewPod(owner)
	m := p.GetMetadata()
	if m.GetGenerateName() != "web-" || m.GetName() != "" || m.GetNamespace() != "default" {
		t.Fatalf("meta %v", m)
	}
	if m.GetLabels()["extra"] != "x" || m.GetAnnotations()["a"] != "b" {
		t.Fatalf("template metadata not copied: %v", m)
	}
	refs := m.GetOwnerReferences()
	if len(refs) != 1 {
		t.Fatalf("refs %v", refs)
	}
	want := &kplanev1.OwnerReference{ApiVersion: "apps/v1", Kind: kindReplicaSet, Name: "web", Uid: rsUID, Controller: true, BlockOwnerDeletion: true}
	if !proto.Equal(refs[0], want) {
		t.Fatalf("ref %v, want %v", refs[0], want)
	}
	// The pod must not share maps or messages with the cached template.
	m.Labels["extra"] = "changed"
	p.Spec.Containers[0].Image = "changed"
	if owner.Template.Metadata.Labels["extra"] != "x" || owner.Template.Spec.Containers[0].Image != "busybox" {
		t.Fatal("NewPod aliases the template")
	}
}

func TestSplitOwnerKey(t *testing.T) {
	kind, ns, name, err := splitOwnerKey("ReplicationController/default/web")
	if err != nil || kind != kindReplicationController || ns != "default" || name != "web" {
		t.Fatalf("%q %q %q %v", kind, ns, name, err)
	}
	for _, bad := range []string{"default/web", "Pod/default/web", "ReplicaSet/web", ""} {
		if _, _, _, err := splitOwnerKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The informer hands pods over in no particular order; the victims must
// not depend on it (ties in the ranking go by name).
func TestVictimsIgnoreInputOrder(t *testing.T) {
	var pods []*kplanev1.Pod
	for i := range 40 {
		pods = append(pods, mkPod(fmt.Sprintf("p-%02d", i)))
	}
	want := Victims(pods, 7)
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		shuffled := slices.Clone(pods)
		rnd.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := Victims(shuffled, 7)
		for i := range want {
			if got[i].GetMetadata().GetName() != want[i].GetMetadata().GetName() {
				t.Fatalf("victims of a shuffled list differ at %d: %s, want %s", i, got[i].GetMetadata().GetName(), want[i].GetMetadata().GetName())
			}
		}
	}
}
