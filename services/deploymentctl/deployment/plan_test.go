package deployment

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// set builds a Set: spec replicas, pods present, pods available.
func set(name string, replicas, pods, avail int32) Set {
	return Set{RS: &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Uid: name, Generation: 1},
		Spec:     &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(replicas)},
		Status:   &kplanev1.ReplicaSetStatus{Replicas: pods, AvailableReplicas: avail, ObservedGeneration: 1},
	}, Pods: pods, Available: avail, AllPods: pods}
}

func TestRollingStep(t *testing.T) {
	for _, c := range []struct {
		name     string
		b        Bounds
		newSet   Set
		olds     []Set
		wantNew  int32
		wantOlds []int32
	}{
		{"start: surge 2 up, unavailable 1 down", Bounds{10, 2, 1}, set("n", 0, 0, 0), []Set{set("o", 10, 10, 10)}, 2, []int32{9}},
		{"new pods not ready: old may not go below 9 available", Bounds{10, 2, 1}, set("n", 2, 2, 0), []Set{set("o", 9, 9, 9)}, 3, []int32{9}},
		{"old pods still terminating take surge room", Bounds{10, 2, 1}, set("n", 2, 2, 0), []Set{set("o", 9, 10, 9)}, 2, []int32{9}},
		{"new ready: old goes down by what is available above 9", Bounds{10, 2, 1}, set("n", 3, 3, 3), []Set{set("o", 9, 9, 9)}, 3, []int32{6}},
		{"finishing", Bounds{10, 2, 1}, set("n", 10, 10, 10), []Set{set("o", 1, 1, 1)}, 10, []int32{0}},
		{"unavailable old pods go for free", Bounds{10, 2, 1}, set("n", 2, 2, 0), []Set{set("o", 10, 10, 7)}, 2, []int32{7}},
		{"oldest revision first", Bounds{10, 0, 2}, set("n", 5, 5, 5), []Set{set("a", 3, 3, 3), set("b", 2, 2, 2)}, 5, []int32{1, 2}},
		{"25%/25% of 4", Bounds{4, 1, 1}, set("n", 0, 0, 0), []Set{set("o", 4, 4, 4)}, 1, []int32{3}},
		{"surge 0: new only after old goes", Bounds{3, 0, 1}, set("n", 0, 0, 0), []Set{set("o", 3, 3, 3)}, 0, []int32{2}},
		{"surge 0, next step", Bounds{3, 0, 1}, set("n", 0, 0, 0), []Set{set("o", 2, 2, 2)}, 1, []int32{2}},
		{"unavailable 0: wait for new to be ready", Bounds{3, 1, 0}, set("n", 1, 1, 0), []Set{set("o", 3, 3, 3)}, 1, []int32{3}},
		{"new above replicas after a scale-down", Bounds{3, 1, 1}, set("n", 5, 5, 5), nil, 3, []int32{}},
		{"no olds: fill to replicas", Bounds{5, 1, 1}, set("n", 2, 2, 2), nil, 5, []int32{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gotNew, gotOlds := RollingStep(c.b, c.newSet, c.olds)
			if gotNew != c.wantNew || len(gotOlds) != len(c.wantOlds) {
				t.Fatalf("RollingStep = %d, %v; want %d, %v", gotNew, gotOlds, c.wantNew, c.wantOlds)
			}
			for i := range gotOlds {
				if gotOlds[i] != c.wantOlds[i] {
					t.Fatalf("RollingStep = %d, %v; want %d, %v", gotNew, gotOlds, c.wantNew, c.wantOlds)
				}
			}
		})
	}
}

// TestRollingStepKeepsBounds simulates a rollout step by step with a
// replicactl and kubelet that act instantly but in the worst order (new
// pods appear before old ones go; new pods become available one step
// later) and checks both bounds after every step, for many sizes.
func TestRollingStepKeepsBounds(t *testing.T) {
	for replicas := int32(1); replicas <= 12; replicas++ {
		for surge := int32(0); surge <= 3; surge++ {
			for unav := int32(0); unav <= 3; unav++ {
				if surge == 0 && unav == 0 {
					continue
				}
				b := Bounds{replicas, surge, unav}
				n, o := set("n", 0, 0, 0), set("o", replicas, replicas, replicas)
				for step := 0; ; step++ {
					if step > 100 {
						t.Fatalf("%v: no progress: new %v old %v", b, n, o)
					}
					if n.Replicas() == replicas && o.Replicas() == 0 && n.Available == replicas {
						break
					}
					nt, ot := RollingStep(b, n, []Set{o})
					// The new set's earlier pods become available; its new
					// pods appear; the old set's pods go.
					n = set("n", nt, nt, n.Pods)
					o = set("o", ot[0], ot[0], min(ot[0], o.Available))
					if total := n.Pods + o.Pods; total > replicas+surge {
						t.Fatalf("%v step %d: %d pods exist, bound %d", b, step, total, replicas+surge)
					}
					if avail := n.Available + o.Available; avail < replicas-unav {
						t.Fatalf("%v step %d: %d available, floor %d", b, step, avail, replicas-unav)
					}
				}
			}
		}
	}
}

func TestRecreateStep(t *testing.T) {
	b := Bounds{3, 0, 3}
	n, olds := RecreateStep(b, set("n", 0, 0, 0), []Set{set("o", 3, 3, 3)})
	if n != 0 || olds[0] != 0 {
		t.Fatalf("first step = %d, %v", n, olds)
	}
	terminating := set("o", 0, 0, 0)
	terminating.AllPods = 1
	if n, _ := RecreateStep(b, set("n", 0, 0, 0), []Set{terminating}); n != 0 {
		t.Fatal("new pods before the old ones are gone")
	}
	unobserved := set("o", 0, 0, 0)
	unobserved.RS.Metadata.Generation = 2
	if n, _ := RecreateStep(b, set("n", 0, 0, 0), []Set{unobserved}); n != 0 {
		t.Fatal("new pods before replicactl saw the scale-down")
	}
	if n, _ := RecreateStep(b, set("n", 0, 0, 0), []Set{set("o", 0, 0, 0)}); n != 3 {
		t.Fatal("new set not scaled once the old pods are gone")
	}
}

func TestScaleTargets(t *testing.T) {
	// Mid-rollout 10 -> 20 with surge 3: 13 allowed before, 23 after,
	// the 10 more shared 8:5 -> 6 and 4 (floors 6, 3; leftover to the largest).
	sets := []Set{set("o", 8, 8, 8), set("n", 5, 5, 0)}
	got := ScaleTargets(Bounds{20, 3, 5}, sets, 1)
	if got[0] != 15 || got[1] != 8 {
		t.Fatalf("ScaleTargets up = %v", got)
	}
	// Down 10 -> 5 with surge 2: 12 -> 7, remove 5 shared 8:4.
	got = ScaleTargets(Bounds{5, 2, 1}, []Set{set("o", 8, 8, 8), set("n", 4, 4, 4)}, 1)
	if got[0] != 4 || got[1] != 3 { // shares -3.3, -1.7: floors -3, -1, the last one from the largest
		t.Fatalf("ScaleTargets down = %v", got)
	}
	// One active set takes replicas.
	got = ScaleTargets(Bounds{7, 2, 1}, []Set{set("o", 0, 0, 0), set("n", 3, 3, 3)}, 1)
	if got[0] != 0 || got[1] != 7 {
		t.Fatalf("ScaleTargets single = %v", got)
	}
	// None active: the new set.
	got = ScaleTargets(Bounds{4, 1, 1}, []Set{set("o", 0, 0, 0), set("n", 0, 0, 0)}, 1)
	if got[1] != 4 {
		t.Fatalf("ScaleTargets none = %v", got)
	}
}

func TestIsScalingEvent(t *testing.T) {
	d := &kplanev1.Deployment{Spec: &kplanev1.DeploymentSpec{Replicas: proto.Int32(3)}}
	s := set("a", 3, 3, 3)
	if !IsScalingEvent(d, []Set{s}) {
		t.Fatal("set without annotation is a scaling event")
	}
	s.RS.Metadata.Annotations = map[string]string{kplanev1.AnnotationDesiredReplicas: "3"}
	if IsScalingEvent(d, []Set{s, set("old", 0, 0, 0)}) {
		t.Fatal("annotated set, inactive old: no scaling event")
	}
	d.Spec.Replicas = proto.Int32(4)
	if !IsScalingEvent(d, []Set{s}) {
		t.Fatal("replicas changed")
	}
}

func TestNewReplicaSet(t *testing.T) {
	d := &kplanev1.Deployment{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1",
			Annotations: map[string]string{kplanev1.AnnotationChangeCause: "v2"}},
		Spec: &kplanev1.DeploymentSpec{Replicas: proto.Int32(4), MinReadySeconds: 2,
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "web"}}}},
	}
	rs := NewReplicaSet(d, "abc", 3, 1, Bounds{4, 1, 1})
	m := rs.GetMetadata()
	if m.Name != "web-abc" || m.Labels[kplanev1.LabelPodTemplateHash] != "abc" ||
		rs.Spec.Selector.MatchLabels[kplanev1.LabelPodTemplateHash] != "abc" ||
		rs.Spec.Template.Metadata.Labels[kplanev1.LabelPodTemplateHash] != "abc" ||
		m.Annotations[kplanev1.AnnotationDeploymentRevision] != "3" || m.Annotations[kplanev1.AnnotationDesiredReplicas] != "4" ||
		m.Annotations[kplanev1.AnnotationMaxReplicas] != "5" || m.Annotations[kplanev1.AnnotationChangeCause] != "v2" ||
		rs.Spec.GetReplicas() != 1 || rs.Spec.MinReadySeconds != 2 || !m.OwnerReferences[0].Controller || m.OwnerReferences[0].Uid != "u1" {
		t.Fatalf("NewReplicaSet = %v", rs)
	}
	if _, ok := d.Spec.Template.Metadata.Labels[kplanev1.LabelPodTemplateHash]; ok {
		t.Fatal("NewReplicaSet changed the Deployment's template")
	}
}

func TestHistoryToDelete(t *testing.T) {
	d := &kplanev1.Deployment{Spec: &kplanev1.DeploymentSpec{RevisionHistoryLimit: proto.Int32(2)}}
	var olds []Set
	for i := 1; i <= 4; i++ {
		s := set("r"+strconv.Itoa(i), 0, 0, 0)
		s.RS.Metadata.Annotations = map[string]string{kplanev1.AnnotationDeploymentRevision: strconv.Itoa(i)}
		olds = append(olds, s)
	}
	olds = append(olds, set("active", 2, 2, 2))
	got := HistoryToDelete(d, olds)
	if len(got) != 2 || got[0].RS.Metadata.Name != "r1" || got[1].RS.Metadata.Name != "r2" {
		t.Fatalf("HistoryToDelete = %v", got)
	}
}

func TestComputeStatusProgressDeadline(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d := &kplanev1.Deployment{
		Metadata: &kplanev1.ObjectMeta{Generation: 2},
		Spec:     &kplanev1.DeploymentSpec{Replicas: proto.Int32(2), ProgressDeadlineSeconds: proto.Int32(30)},
	}
	b := Bounds{2, 1, 0}
	n := set("web-new", 1, 1, 0)
	o := set("web-old", 2, 2, 2)
	st, left := ComputeStatus(d, b, &n, []Set{o, n}, Progress{Reason: kplanev1.ReasonNewReplicaSetCreated, NewName: "web-new"}, t0)
	prog := apiutil.FindCondition(st.Conditions, kplanev1.DeploymentProgressing)
	if prog.GetStatus() != kplanev1.ConditionTrue || prog.GetReason() != kplanev1.ReasonNewReplicaSetCreated || left != 30*time.Second {
		t.Fatalf("created: %v, recheck %v", prog, left)
	}
	if st.ObservedGeneration != 2 || st.Replicas != 3 || st.UpdatedReplicas != 1 || st.AvailableReplicas != 2 || st.UnavailableReplicas != 0 {
		t.Fatalf("counts: %v", st)
	}
	if !apiutil.IsConditionTrue(st.Conditions, kplanev1.DeploymentAvailable) {
		t.Fatal("Available should be True with 2 of 2 available, maxUnavailable 0")
	}
	d.Status = st
	// Nothing moves for 10s: the condition stays, recheck at the deadline.
	st, left = ComputeStatus(d, b, &n, []Set{o, n}, Progress{NewName: "web-new"}, t0.Add(10*time.Second))
	if !proto.Equal(st, d.Status) || left != 20*time.Second {
		t.Fatalf("standing still changed the status or recheck %v", left)
	}
	// Past the deadline: False, ProgressDeadlineExceeded.
	st, left = ComputeStatus(d, b, &n, []Set{o, n}, Progress{NewName: "web-new"}, t0.Add(31*time.Second))
	prog = apiutil.FindCondition(st.Conditions, kplanev1.DeploymentProgressing)
	if prog.GetStatus() != kplanev1.ConditionFalse || prog.GetReason() != kplanev1.ReasonProgressDeadlineExceeded || left != 0 {
		t.Fatalf("deadline: %v", prog)
	}
	if prog.GetMessage() != `ReplicaSet "web-new" has timed out progressing.` {
		t.Fatalf("message %q", prog.GetMessage())
	}
	// Paused: Unknown, no deadline.
	d.Status = st
	d.Spec.Paused = true
	st, left = ComputeStatus(d, b, &n, []Set{o, n}, Progress{NewName: "web-new"}, t0.Add(40*time.Second))
	prog = apiutil.FindCondition(st.Conditions, kplanev1.DeploymentProgressing)
	if prog.GetStatus() != kplanev1.ConditionUnknown || prog.GetReason() != kplanev1.ReasonDeploymentPaused || left != 0 {
		t.Fatalf("paused: %v", prog)
	}
	// Complete: NewReplicaSetAvailable.
	d.Spec.Paused = false
	done := set("web-new", 2, 2, 2)
	st, _ = ComputeStatus(d, b, &done, []Set{set("web-old", 0, 0, 0), done}, Progress{NewName: "web-new"}, t0.Add(50*time.Second))
	prog = apiutil.FindCondition(st.Conditions, kplanev1.DeploymentProgressing)
	if prog.GetStatus() != kplanev1.ConditionTrue || prog.GetReason() != kplanev1.ReasonNewReplicaSetAvailable {
		t.Fatalf("complete: %v", prog)
	}
}

func TestFindNew(t *testing.T) {
	tmpl := func(img, hash string) *kplanev1.PodTemplateSpec {
		l := map[string]string{"app": "web"}
		if hash != "" {
			l[kplanev1.LabelPodTemplateHash] = hash
		}
		return &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l},
			Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: img}}}}
	}
	d := &kplanev1.Deployment{Spec: &kplanev1.DeploymentSpec{Template: tmpl("v2", "")}}
	mk := func(name, img string, age time.Duration, deleting bool) Set {
		s := set(name, 1, 1, 1)
		s.RS.Spec.Template = tmpl(img, name)
		s.RS.Metadata.CreationTimestamp = timestamppb.New(time.Unix(1000, 0).Add(-age))
		if deleting {
			s.RS.Metadata.DeletionTimestamp = timestamppb.New(time.Unix(1000, 0))
		}
		return s
	}
	n, olds := FindNew(d, []Set{mk("old", "v1", time.Hour, false), mk("young", "v2", time.Minute, false),
		mk("elder", "v2", 2*time.Hour, false), mk("dying", "v2", 3*time.Hour, true)})
	if n == nil || n.RS.Metadata.Name != "elder" || len(olds) != 3 {
		t.Fatalf("FindNew = %v, %d olds", n, len(olds))
	}
	if n, _ := FindNew(d, []Set{mk("old", "v1", time.Hour, false)}); n != nil {
		t.Fatal("a set of another template taken as new")
	}
}

// unobserved is s with a spec replicactl has not acted on yet.
func unobserved(s Set) Set {
	rs := proto.Clone(s.RS).(*kplanev1.ReplicaSet)
	rs.Metadata.Generation = 2
	s.RS = rs
	return s
}

func TestGuardScaleUps(t *testing.T) {
	b := Bounds{4, 1, 1}
	replan := func(sets []Set) []int32 {
		n, o := RollingStep(b, sets[0], sets[1:])
		return append([]int32{n}, o...)
	}
	// withPods is sets with the pods a fresh read finds.
	withPods := func(sets []Set, pods ...int32) func() ([]Set, error) {
		return func() ([]Set, error) {
			out := append([]Set(nil), sets...)
			for i := range out {
				out[i].Pods, out[i].AllPods = pods[i], pods[i]
			}
			return out, nil
		}
	}
	for _, c := range []struct {
		name     string
		sets     []Set
		fresh    []int32 // pods a fresh read finds, per set; nil: no read expected
		want     []int32
		wantRead bool
	}{
		// The old set was lowered to 3 and shows 3 pods, but replicactl has
		// not acted on the 3 yet: a 4th pod for the old size may be on its
		// way, so the new set waits.
		{"an unobserved scale-down holds the scale-up", []Set{set("n", 1, 1, 1), unobserved(set("o", 3, 3, 3))}, nil, []int32{1, 2}, false},
		{"an unobserved new set holds it too", []Set{unobserved(set("n", 1, 1, 1)), set("o", 3, 3, 3)}, nil, []int32{1, 2}, false},
		// Observed, but the cache missed a pod the fresh read finds: no room.
		{"a fresh count bounds the scale-up", []Set{set("n", 1, 1, 1), set("o", 3, 3, 3)}, []int32{1, 4}, []int32{1, 2}, true},
		{"a fresh count that agrees lets it through", []Set{set("n", 1, 1, 1), set("o", 3, 3, 3)}, []int32{1, 3}, []int32{2, 2}, true},
		{"a fresh count never raises it", []Set{set("n", 0, 0, 0), set("o", 3, 4, 3)}, []int32{0, 3}, []int32{1, 3}, true},
		{"a cache without room reads nothing", []Set{set("n", 1, 1, 1), set("o", 3, 4, 3)}, nil, []int32{1, 2}, false},
		// Nothing scales up: no read, nothing held.
		{"scale-downs pass unobserved", []Set{set("n", 2, 2, 2), unobserved(set("o", 3, 3, 3))}, nil, []int32{2, 1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := false
			recount := func() ([]Set, error) {
				read = true
				if c.fresh == nil {
					t.Fatal("a fresh read that was not needed")
				}
				return withPods(c.sets, c.fresh...)()
			}
			got, err := GuardScaleUps(c.sets, replan(c.sets), recount, replan)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) || read != c.wantRead {
				t.Fatalf("GuardScaleUps = %v (read %v); want %v (read %v)", got, read, c.want, c.wantRead)
			}
		})
	}
	t.Run("a failed read writes nothing", func(t *testing.T) {
		sets := []Set{set("n", 1, 1, 1), set("o", 3, 3, 3)}
		boom := errors.New("apiserver unreachable")
		if _, err := GuardScaleUps(sets, replan(sets), func() ([]Set, error) { return nil, boom }, replan); !errors.Is(err, boom) {
			t.Fatalf("err = %v; want %v", err, boom)
		}
	})
	t.Run("a set being deleted counts as observed", func(t *testing.T) {
		o := unobserved(set("o", 0, 1, 1))
		o.RS.Metadata.DeletionTimestamp = timestamppb.Now()
		if !o.Observed() {
			t.Fatal("a deleting set is not observed")
		}
	})
}
