package replicaset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A whole pod as the node agent reports it: trimPod keeps exactly what
// trim.go lists.
func TestTrimPodGolden(t *testing.T) {
	p := mkPod("a", onNode("n1"), readySince(t0), restarts(3), cost(7))
	p.Metadata.ResourceVersion, p.Metadata.GenerateName = "42", "web-"
	p.Metadata.Annotations["note"] = "dropped"
	p.Metadata.ManagedFields = []*kplanev1.ManagedFieldsEntry{{Manager: "kpctl"}}
	p.Status.Conditions = append([]*kplanev1.Condition{{Type: "Initialized", Status: "True"}}, p.Status.Conditions...)
	p.Status.PodIp, p.Status.HostIp, p.Status.QosClass = "10.0.0.5", "192.168.0.2", "BestEffort"
	p.Spec.Volumes = []*kplanev1.Volume{{Name: "data"}}

	got := trimPod(kplanev1.MustWrap(proto.Clone(p).(*kplanev1.Pod))).GetPod()
	want := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "a", Namespace: "default", Uid: "uid-a", ResourceVersion: "42",
			Labels: p.Metadata.Labels, OwnerReferences: p.Metadata.OwnerReferences, CreationTimestamp: p.Metadata.CreationTimestamp,
			Annotations: map[string]string{kplanev1.AnnotationPodDeletionCost: "7"}},
		Spec: &kplanev1.PodSpec{NodeName: "n1"},
		Status: &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
			Conditions:        []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: "True", LastTransitionTime: timestamppb.New(t0)}},
			ContainerStatuses: []*kplanev1.ContainerStatus{{RestartCount: 1}, {RestartCount: 3}}},
	}
	if !proto.Equal(want, got) {
		t.Errorf("trimPod kept\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
	}
	if got := trimPod(kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "bare", Namespace: "default"}})).GetPod(); got.Spec != nil || got.Status != nil {
		t.Errorf("a pod without spec.nodeName or status trimmed to %v; want metadata only", got)
	}
}

// Every decision the reconcile takes from pods (adopt, release, owned,
// create, victims in order, status and its recheck) comes out the same
// from trimmed pods as from whole ones, over random sets of pods in
// every state trim.go keeps fields for.
func TestTrimmedPodsDecideAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 23))
	now := t0.Add(time.Hour)
	for round := range 200 {
		owner := testRS(int32(rng.IntN(30)), func(rs *kplanev1.ReplicaSet) { rs.Spec.MinReadySeconds = int32(rng.IntN(3) * 600) })
		whole := randomPods(rng, rng.IntN(40))
		rng.Shuffle(len(whole), func(i, j int) { whole[i], whole[j] = whole[j], whole[i] })
		trimmed := make([]*kplanev1.Pod, len(whole))
		for i, p := range whole {
			trimmed[i] = trimPod(kplanev1.MustWrap(proto.Clone(p).(*kplanev1.Pod))).GetPod()
		}
		manage := rng.IntN(4) > 0
		pw, pt := Decide(owner, whole, manage, 5), Decide(owner, trimmed, manage, 5)
		for _, c := range []struct {
			what   string
			w, got []*kplanev1.Pod
		}{{"adopt", pw.Adopt, pt.Adopt}, {"release", pw.Release, pt.Release}, {"owned", pw.Owned, pt.Owned}, {"delete", pw.Delete, pt.Delete}} {
			if !slices.Equal(names(c.w), names(c.got)) {
				t.Fatalf("round %d: %s from whole pods %v, from trimmed %v", round, c.what, names(c.w), names(c.got))
			}
		}
		if pw.Create != pt.Create {
			t.Fatalf("round %d: create %d from whole pods, %d from trimmed", round, pw.Create, pt.Create)
		}
		sw, rw := ComputeStatus(owner, pw.Owned, nil, "", now)
		st, rt := ComputeStatus(owner, pt.Owned, nil, "", now)
		if !proto.Equal(sw, st) || rw != rt {
			t.Fatalf("round %d: status from whole pods %v (recheck %v), from trimmed %v (recheck %v)", round, sw, rw, st, rt)
		}
	}
}

// randomPods returns n pods in random states: every field trim.go keeps
// and every case Decide tells apart (orphans, other owners, labels the
// selector does not match, finished and deleting pods).
func randomPods(rng *rand.Rand, n int) []*kplanev1.Pod {
	var out []*kplanev1.Pod
	for i := range n {
		var opts []podOpt
		pick := func(p float64, o podOpt) {
			if rng.Float64() < p {
				opts = append(opts, o)
			}
		}
		pick(0.6, onNode(fmt.Sprintf("n%d", rng.IntN(4))))
		pick(0.5, readySince(t0.Add(time.Duration(rng.IntN(120))*time.Minute)))
		pick(0.1, notReady)
		pick(0.2, restarts(int32(rng.IntN(5))))
		pick(0.2, cost(rng.IntN(3)-1))
		pick(0.2, created(t0.Add(time.Duration(rng.IntN(5))*time.Minute)))
		pick(0.05, noCreationTime)
		pick(0.1, phase([]string{kplanev1.PodSucceeded, kplanev1.PodFailed, kplanev1.PodUnknown}[rng.IntN(3)]))
		pick(0.1, deleting)
		pick(0.15, orphan)
		pick(0.1, labelsOf(map[string]string{"app": "web", "tier": "back"}))
		pick(0.05, ownedBy(kindReplicaSet, "other", "other-uid"))
		out = append(out, mkPod(fmt.Sprintf("p%02d", i), opts...))
	}
	return out
}

// BenchmarkWalk100000 is the part of a reconcile that grows with the
// set: Decide and ComputeStatus over 100,000 trimmed Running pods of one
// set (what every reconcile of the scale scenario's set walks).
func BenchmarkWalk100000(b *testing.B) {
	owner := testRS(100000)
	pods := make([]*kplanev1.Pod, 100000)
	for i := range pods {
		p := mkPod(fmt.Sprintf("web-%06d", i), onNode(fmt.Sprintf("n%d", i%1000)), readySince(t0))
		pods[i] = trimPod(kplanev1.MustWrap(p)).GetPod()
	}
	now := t0.Add(time.Hour)
	b.ResetTimer()
	for range b.N {
		p := Decide(owner, pods, true, 500)
		if st, _ := ComputeStatus(owner, p.Owned, nil, "", now); st.GetReadyReplicas() != 100000 {
			b.Fatalf("status %v", st)
		}
	}
}

// BenchmarkDecideCounted100000 is the same reconcile's decision and
// counts from the pod store's tally (DecideCounted), which a set that
// only grows or holds takes instead of the walk.
func BenchmarkDecideCounted100000(b *testing.B) {
	owner := testRS(100000)
	objs := make([]*kplanev1.Object, 100000)
	for i := range objs {
		objs[i] = trimPod(kplanev1.MustWrap(mkPod(fmt.Sprintf("web-%06d", i), onNode(fmt.Sprintf("n%d", i%1000)), readySince(t0))))
	}
	store := informer.NewStoreOf(nil, objs...)
	if err := store.AddTally(tallyActivePods, tallyActive); err != nil {
		b.Fatal(err)
	}
	now := t0.Add(time.Hour)
	b.ResetTimer()
	for range b.N {
		p, c, ok := DecideCounted(store, owner, true, 500)
		if !ok || p.Create != 0 {
			b.Fatalf("DecideCounted: %+v, answered %v", p, ok)
		}
		if st := StatusFor(owner, c, nil, "", now); st.GetReadyReplicas() != 100000 {
			b.Fatalf("status %v", st)
		}
	}
}
