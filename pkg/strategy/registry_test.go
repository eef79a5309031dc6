package strategy

import (
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestForEveryKind(t *testing.T) {
	for _, name := range kplanev1.KindNames() {
		s := For(name)
		if s == nil {
			t.Errorf("no strategy for kind %s", name)
			continue
		}
		if _, ok := s.(CreatePreparer); !ok {
			t.Errorf("strategy for %s is not a CreatePreparer", name)
		}
	}
	if len(strategies) != len(kplanev1.KindNames()) {
		t.Errorf("%d strategies for %d kinds", len(strategies), len(kplanev1.KindNames()))
	}
	for _, name := range []string{"", "Widget", "pod", "deployment"} {
		if For(name) != nil {
			t.Errorf("For(%q) should be nil", name)
		}
	}
}

func TestWrongKind(t *testing.T) {
	s := For("Pod")
	node := kplanev1.MustWrap(&kplanev1.Node{Metadata: meta("", "n")})
	assertErrors(t, s.Validate(node), []string{"kind: expected a Pod, got Node"})
	assertErrors(t, s.Validate(&kplanev1.Object{}), []string{"kind: expected a Pod, got an empty object"})
	pod := kplanev1.MustWrap(validPod())
	assertErrors(t, s.ValidateUpdate(pod, node), []string{"kind: expected a Pod, got Node"})
	// Default leaves other kinds alone.
	before := proto.Clone(node)
	s.Default(node)
	if !proto.Equal(before, node) {
		t.Error("Default changed an object of another kind")
	}
	s.Default(&kplanev1.Object{})
	s.Default(nil)
}

// TestMinimalObjects checks that the smallest object of each kind that a
// user could write is valid after defaulting, so the rules are not stricter
// than Kubernetes for the common case.
func TestMinimalObjects(t *testing.T) {
	objs := []proto.Message{
		&kplanev1.Namespace{Metadata: meta("", "a")},
		&kplanev1.Node{Metadata: meta("", "n1")},
		&kplanev1.Pod{Metadata: meta("d", "p"), Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}},
		&kplanev1.ReplicaSet{Metadata: meta("d", "r"), Spec: &kplanev1.ReplicaSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}},
		&kplanev1.Deployment{Metadata: meta("d", "web"), Spec: &kplanev1.DeploymentSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}},
		&kplanev1.StatefulSet{Metadata: meta("d", "db"), Spec: &kplanev1.StatefulSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}},
		&kplanev1.DaemonSet{Metadata: meta("d", "logs"), Spec: &kplanev1.DaemonSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}},
		&kplanev1.ControllerRevision{Metadata: meta("d", "db-1"), Revision: 1},
		&kplanev1.ReplicationController{Metadata: meta("d", "r"), Spec: &kplanev1.ReplicationControllerSpec{
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}},
		&kplanev1.Job{Metadata: meta("d", "j"), Spec: &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{
			Spec: &kplanev1.PodSpec{RestartPolicy: "Never", Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}},
		&kplanev1.CronJob{Metadata: meta("d", "cj"), Spec: &kplanev1.CronJobSpec{Schedule: "@hourly", JobTemplate: &kplanev1.JobTemplateSpec{
			Spec: &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{
				Spec: &kplanev1.PodSpec{RestartPolicy: "Never", Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}}}},
		&kplanev1.Service{Metadata: meta("d", "s"), Spec: &kplanev1.ServiceSpec{Ports: []*kplanev1.ServicePort{{Port: 80}}}},
		&kplanev1.Endpoints{Metadata: meta("d", "s")},
		&kplanev1.PersistentVolume{Metadata: meta("", "pv"), Spec: &kplanev1.PersistentVolumeSpec{
			Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{"ReadWriteOnce"}}},
		&kplanev1.PersistentVolumeClaim{Metadata: meta("d", "c"), Spec: &kplanev1.PersistentVolumeClaimSpec{
			AccessModes: []string{"ReadWriteOnce"}, Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}}},
		&kplanev1.StorageClass{Metadata: meta("", "sc"), Provisioner: "kplane.io/hostpath"},
		&kplanev1.PriorityClass{Metadata: meta("", "high"), Value: 1000},
		&kplanev1.PodDisruptionBudget{Metadata: meta("d", "web"), Spec: &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(1)}},
		&kplanev1.ServiceAccount{Metadata: meta("d", "default")},
		&kplanev1.Secret{Metadata: meta("d", "s")},
		&kplanev1.Lease{Metadata: meta("kplane-system", "replicactl")},
		&kplanev1.Event{Metadata: meta("d", "e"), InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Name: "p"}},
		&kplanev1.Role{Metadata: meta("d", "r")},
		&kplanev1.ClusterRole{Metadata: meta("", "system:r")},
		&kplanev1.RoleBinding{Metadata: meta("d", "rb"), RoleRef: &kplanev1.RoleRef{Kind: "Role", Name: "r"}},
		&kplanev1.ClusterRoleBinding{Metadata: meta("", "crb"), RoleRef: &kplanev1.RoleRef{Kind: "ClusterRole", Name: "system:r"}},
	}
	seen := map[string]bool{}
	for _, m := range objs {
		obj := kplanev1.MustWrap(m)
		kind := obj.KindName()
		seen[kind] = true
		s := For(kind)
		s.(CreatePreparer).PrepareForCreate(obj)
		s.Default(obj)
		if errs := s.Validate(obj); len(errs) != 0 {
			t.Errorf("minimal %s rejected: %v", kind, errs)
		}
		// Defaulting is idempotent: an update re-defaults a stored object.
		again := proto.Clone(obj).(*kplanev1.Object)
		s.Default(again)
		if !proto.Equal(obj, again) {
			t.Errorf("%s: Default is not idempotent", kind)
		}
		if errs := s.ValidateUpdate(again, obj); len(errs) != 0 {
			t.Errorf("%s: unchanged update rejected: %v", kind, errs)
		}
	}
	for _, k := range kplanev1.KindNames() {
		if !seen[k] {
			t.Errorf("no minimal example for %s", k)
		}
	}
}

// FuzzValidate feeds arbitrary bytes through proto unmarshalling into an
// Object and checks that Default, Validate and ValidateUpdate never panic,
// that Default is idempotent, and that an unchanged object is a valid update.
func FuzzValidate(f *testing.F) {
	seeds := []proto.Message{validPod(), validReplicaSet(), validRC(), validJob(), validService(), validEndpoints(), validNode(),
		validPV(), validPVC(), validStorageClass(), validSecret(), validEvent(), validCronJob(), validDeployment(), validStatefulSet(), validDaemonSet(), validPriorityClass(),
		&kplanev1.Namespace{Metadata: meta("", "a")}, &kplanev1.Lease{Spec: &kplanev1.LeaseSpec{HolderIdentity: "x"}},
		&kplanev1.ServiceAccount{}}
	for _, m := range seeds {
		b, err := proto.Marshal(kplanev1.MustWrap(m))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj := &kplanev1.Object{}
		if err := proto.Unmarshal(data, obj); err != nil {
			return
		}
		s := For(obj.KindName())
		if s == nil {
			return
		}
		old := proto.Clone(obj).(*kplanev1.Object)
		s.(CreatePreparer).PrepareForCreate(obj)
		s.Default(obj)
		_ = s.Validate(obj)
		_ = s.ValidateUpdate(obj, old)
		_ = s.ValidateUpdate(old, obj)
		again := proto.Clone(obj).(*kplanev1.Object)
		s.Default(again)
		if !proto.Equal(obj, again) {
			t.Fatalf("Default is not idempotent for %s", obj.KindName())
		}
		if errs := s.ValidateUpdate(again, obj); len(errs) != 0 {
			t.Fatalf("unchanged %s rejected as an update: %v", obj.KindName(), errs)
		}
	})
}
