package integration_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestCreateSetsServerFields(t *testing.T) { transports(t, testCreateSetsServerFields) }

func testCreateSetsServerFields(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)

	in := newPod("default", "web", map[string]string{"app": "web"})
	// Client-sent server-owned fields must be replaced, not trusted.
	m := in.Meta()
	m.Uid = "client-chosen-uid"
	m.Generation = 42
	m.CreationTimestamp = timestamppb.New(time.Unix(1000, 0))
	m.DeletionTimestamp = timestamppb.New(time.Unix(2000, 0))

	before := time.Now().Add(-time.Minute)
	out := create(t, c, in)
	after := time.Now().Add(time.Minute)

	om := out.Meta()
	if om.GetUid() == "" || om.GetUid() == "client-chosen-uid" {
		t.Errorf("uid = %q, want a server-generated uid", om.GetUid())
	}
	rev(t, om.GetResourceVersion())
	if om.GetGeneration() != 1 {
		t.Errorf("generation = %d, want 1", om.GetGeneration())
	}
	ct := om.GetCreationTimestamp().AsTime()
	if ct.Before(before) || ct.After(after) {
		t.Errorf("creationTimestamp = %v, want the server's current time", ct)
	}
	if om.GetDeletionTimestamp() != nil {
		t.Errorf("deletionTimestamp = %v, want unset on create", om.GetDeletionTimestamp())
	}
	if om.GetName() != "web" || om.GetNamespace() != "default" || om.GetLabels()["app"] != "web" {
		t.Errorf("metadata = %v, want the name, namespace and labels sent", om)
	}
	// Kubernetes defaults are applied by the pod strategy.
	if got := out.GetPod().GetSpec().GetRestartPolicy(); got != "Always" {
		t.Errorf("spec.restartPolicy = %q, want the default Always", got)
	}
	if got := out.GetPod().GetStatus().GetPhase(); got != "Pending" {
		t.Errorf("status.phase = %q, want Pending", got)
	}

	// Get returns exactly what Create returned.
	if got := get(t, c, "Pod", "default", "web"); !proto.Equal(got, out) {
		t.Errorf("Get = %v\nwant %v", got, out)
	}

	// A second create of the same name collides.
	_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newPod("default", "web", nil)})
	requireCode(t, err, codes.AlreadyExists, wording(c, `Pod "default/web" already exists`, `pods "web" already exists`))
	// The same name in another namespace is a different object.
	create(t, c, newNamespace("other"))
	if o := create(t, c, newPod("other", "web", nil)); o.Meta().GetUid() == om.GetUid() {
		t.Errorf("pods in two namespaces share uid %s", o.Meta().GetUid())
	}
}

func TestGetNotFoundAndScope(t *testing.T) { transports(t, testGetNotFoundAndScope) }

func testGetNotFoundAndScope(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)

	_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "absent"})
	requireCode(t, err, codes.NotFound, wording(c, `Pod "absent" not found in namespace "default"`, `pods "absent" not found`))
	_, err = c.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: "absent"})
	requireCode(t, err, codes.NotFound, wording(c, `Node "absent" not found`, `nodes "absent" not found`))
	if viaREST(c) {
		return // a REST URL carries the scope: there is no request shape to refuse
	}
	_, err = c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Name: "web"})
	requireCode(t, err, codes.InvalidArgument, "namespace: required for namespaced kind Pod")
	_, err = c.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Namespace: "default", Name: "n1"})
	requireCode(t, err, codes.InvalidArgument, "namespace: must be empty for cluster-scoped kind Node")
}

func TestSystemNamespacesExist(t *testing.T) {
	_, c := start(t)
	got := names(list(t, c, &kplanev1.ListRequest{Kind: "Namespace"}).GetItems())
	want := []string{"default", "kplane-node-lease", "kplane-system"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("namespaces = %v, want %v", got, want)
	}
}

func TestGenerateName(t *testing.T) { transports(t, testGenerateName) }

func testGenerateName(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	in := newPod("default", "", nil)
	in.Meta().GenerateName = "web-"
	a := create(t, c, in)
	b := create(t, c, in)
	for _, o := range []*kplanev1.Object{a, b} {
		n := o.Meta().GetName()
		if !strings.HasPrefix(n, "web-") || len(n) != len("web-")+5 {
			t.Errorf("generated name %q, want web- and a 5-character suffix", n)
		}
		if o.Meta().GetGenerateName() != "web-" {
			t.Errorf("generateName = %q, want it kept", o.Meta().GetGenerateName())
		}
		get(t, c, "Pod", "default", n)
	}
	if a.Meta().GetName() == b.Meta().GetName() {
		t.Errorf("two creates generated the same name %q", a.Meta().GetName())
	}
}

func TestCreateIntoMissingNamespace(t *testing.T) { transports(t, testCreateIntoMissingNamespace) }

func testCreateIntoMissingNamespace(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	_, err := c.Create(testCtx(t), &kplanev1.CreateRequest{Object: newPod("nope", "web", nil)})
	requireCode(t, err, codes.NotFound, wording(c, `namespace "nope" not found`, `namespaces "nope" not found`))
	if n := len(list(t, c, &kplanev1.ListRequest{Kind: "Pod"}).GetItems()); n != 0 {
		t.Fatalf("%d pods stored after a failed create", n)
	}
}

func TestClusterScopedKindIgnoresNamespace(t *testing.T) {
	transports(t, testClusterScopedKindIgnoresNamespace)
}

func testClusterScopedKindIgnoresNamespace(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	in := newNode("node-1")
	in.Meta().Namespace = "default" // ignored, as Kubernetes does
	out := create(t, c, in)
	if ns := out.Meta().GetNamespace(); ns != "" {
		t.Fatalf("created node has namespace %q, want none", ns)
	}
	got := get(t, c, "Node", "", "node-1")
	if !proto.Equal(got, out) {
		t.Fatalf("Get = %v, want %v", got, out)
	}
	// Update with a namespace set: ignored too.
	got.Meta().Namespace = "kplane-system"
	got.Meta().Labels = map[string]string{"zone": "a"}
	up := update(t, c, got)
	if up.Meta().GetNamespace() != "" || up.Meta().GetLabels()["zone"] != "a" {
		t.Fatalf("updated node = %v, want no namespace and the new label", up.Meta())
	}
	// A List of a cluster-scoped kind with a namespace lists them all.
	if n := len(list(t, c, &kplanev1.ListRequest{Kind: "Node", Namespace: "default"}).GetItems()); n != 1 {
		t.Fatalf("List Node in namespace default = %d items, want 1", n)
	}
}

func TestUpdateGeneration(t *testing.T) { transports(t, testUpdateGeneration) }

func testUpdateGeneration(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	p := create(t, c, newPod("default", "web", nil))

	// Metadata-only change: new resourceVersion, same generation.
	p.Meta().Labels = map[string]string{"app": "web"}
	p2 := update(t, c, p)
	if rev(t, p2.Meta().GetResourceVersion()) <= rev(t, p.Meta().GetResourceVersion()) {
		t.Errorf("resourceVersion did not advance: %s -> %s", p.Meta().GetResourceVersion(), p2.Meta().GetResourceVersion())
	}
	if p2.Meta().GetGeneration() != 1 {
		t.Errorf("generation after a label change = %d, want 1", p2.Meta().GetGeneration())
	}
	if p2.Meta().GetUid() != p.Meta().GetUid() || !proto.Equal(p2.Meta().GetCreationTimestamp(), p.Meta().GetCreationTimestamp()) {
		t.Errorf("uid or creationTimestamp changed on update")
	}

	// Spec change (a pod's image is mutable): generation 2.
	p2.GetPod().Spec.Containers[0].Image = "nginx:1.26"
	p3 := update(t, c, p2)
	if p3.Meta().GetGeneration() != 2 {
		t.Errorf("generation after an image change = %d, want 2", p3.Meta().GetGeneration())
	}
	// A client cannot set generation itself.
	p3.Meta().Generation = 99
	p3.Meta().Annotations = map[string]string{"note": "x"}
	if p4 := update(t, c, p3); p4.Meta().GetGeneration() != 2 {
		t.Errorf("generation after a client-set generation = %d, want 2", p4.Meta().GetGeneration())
	}

	rs := create(t, c, newReplicaSet("default", "rs", 1))
	rs.GetReplicaSet().Spec.Replicas = proto.Int32(3)
	if rs2 := update(t, c, rs); rs2.Meta().GetGeneration() != 2 || rs2.GetReplicaSet().GetSpec().GetReplicas() != 3 {
		t.Errorf("replica set after scaling: generation %d replicas %d, want 2 and 3",
			rs2.Meta().GetGeneration(), rs2.GetReplicaSet().GetSpec().GetReplicas())
	}
}

func TestUpdateAndStatusSeparation(t *testing.T) { transports(t, testUpdateAndStatusSeparation) }

func testUpdateAndStatusSeparation(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	p := create(t, c, newPod("default", "web", nil))

	// A conditional Update carrying a changed status is refused.
	changed := proto.Clone(p).(*kplanev1.Object)
	changed.GetPod().Status.Phase = "Running"
	changed.Meta().Labels = map[string]string{"app": "web"}
	_, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: changed})
	requireCode(t, err, codes.InvalidArgument, "status: may not be changed by Update; use UpdateStatus")
	if got := get(t, c, "Pod", "default", "web"); !proto.Equal(got, p) {
		t.Fatalf("refused update changed the pod: %v", got)
	}

	// An unconditional Update keeps the stored status and applies the rest.
	changed.Meta().ResourceVersion = ""
	up := update(t, c, changed)
	if up.GetPod().GetStatus().GetPhase() != "Pending" {
		t.Errorf("unconditional update set status.phase %q, want the stored Pending", up.GetPod().GetStatus().GetPhase())
	}
	if up.Meta().GetLabels()["app"] != "web" {
		t.Errorf("unconditional update lost the label change")
	}
	// A conditional Update without any status keeps the stored status.
	noStatus := proto.Clone(up).(*kplanev1.Object)
	noStatus.GetPod().Status = nil
	noStatus.Meta().Annotations = map[string]string{"a": "b"}
	up2 := update(t, c, noStatus)
	if up2.GetPod().GetStatus().GetPhase() != "Pending" {
		t.Errorf("update without status cleared it: %v", up2.GetPod().GetStatus())
	}
	// Over gRPC the reply is the stored bytes: exactly what Get reads.
	if got := get(t, c, "Pod", "default", "web"); !proto.Equal(got, up2) {
		t.Errorf("Get after Update = %v\nwant what Update returned, %v", got, up2)
	}

	// UpdateStatus writes status and ignores spec and metadata.
	st := proto.Clone(up2).(*kplanev1.Object)
	st.GetPod().Status.Phase = "Running"
	st.GetPod().Status.PodIp = "10.0.0.7"
	st.GetPod().Spec.Containers[0].Image = "evil:latest"
	st.Meta().Labels = map[string]string{"app": "changed"}
	st2 := updateStatus(t, c, st)
	if st2.GetPod().GetStatus().GetPhase() != "Running" || st2.GetPod().GetStatus().GetPodIp() != "10.0.0.7" {
		t.Errorf("UpdateStatus did not write the status: %v", st2.GetPod().GetStatus())
	}
	if img := st2.GetPod().GetSpec().GetContainers()[0].GetImage(); img != "nginx:1.25" {
		t.Errorf("UpdateStatus changed the image to %q", img)
	}
	if st2.Meta().GetLabels()["app"] != "web" {
		t.Errorf("UpdateStatus changed labels: %v", st2.Meta().GetLabels())
	}
	if got := get(t, c, "Pod", "default", "web"); !proto.Equal(got, st2) {
		t.Errorf("Get after UpdateStatus = %v\nwant what UpdateStatus returned, %v", got, st2)
	}
	if st2.Meta().GetGeneration() != up2.Meta().GetGeneration() {
		t.Errorf("UpdateStatus bumped generation to %d", st2.Meta().GetGeneration())
	}

	// UpdateStatus follows the same CAS rule.
	_, err = c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: st})
	requireCode(t, err, codes.Aborted, "the object has been modified")
	// And fails for kinds without a status.
	sec := create(t, c, newSecret("default", "s", nil))
	_, err = c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: sec})
	if viaREST(c) {
		// Kubernetes serves no status subresource for such a kind: 404.
		requireCode(t, err, codes.NotFound, "the server could not find the requested resource")
	} else {
		requireCode(t, err, codes.InvalidArgument, "kind Secret has no status")
	}
	// And for absent objects.
	_, err = c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: newPod("default", "absent", nil)})
	requireCode(t, err, codes.NotFound, wording(c, `Pod "absent" not found`, `pods "absent" not found`))
}

func TestNoopUpdateKeepsResourceVersion(t *testing.T) {
	transports(t, testNoopUpdateKeepsResourceVersion)
}

func testNoopUpdateKeepsResourceVersion(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	p := create(t, c, newPod("default", "web", map[string]string{"app": "web"}))
	before := list(t, c, &kplanev1.ListRequest{Kind: "Pod"}).GetResourceVersion()

	same := update(t, c, proto.Clone(p).(*kplanev1.Object))
	if !proto.Equal(same, p) {
		t.Fatalf("no-op update returned %v, want %v", same, p)
	}
	// Unconditional and status-only no-ops do not write either.
	uncond := proto.Clone(p).(*kplanev1.Object)
	uncond.Meta().ResourceVersion = ""
	update(t, c, uncond)
	updateStatus(t, c, proto.Clone(p).(*kplanev1.Object))

	after := list(t, c, &kplanev1.ListRequest{Kind: "Pod"}).GetResourceVersion()
	if before != after {
		t.Fatalf("store revision moved %s -> %s on no-op updates", before, after)
	}
}

func TestUpdateConflicts(t *testing.T) { transports(t, testUpdateConflicts) }

func testUpdateConflicts(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	p := create(t, c, newPod("default", "web", nil))
	fresh := proto.Clone(p).(*kplanev1.Object)
	fresh.Meta().Labels = map[string]string{"v": "1"}
	update(t, c, fresh)

	stale := proto.Clone(p).(*kplanev1.Object)
	stale.Meta().Labels = map[string]string{"v": "2"}
	_, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: stale})
	requireCode(t, err, codes.Aborted, "the object has been modified", "reread the object and try again")

	wrongUID := proto.Clone(p).(*kplanev1.Object)
	wrongUID.Meta().ResourceVersion = ""
	wrongUID.Meta().Uid = "not-the-uid"
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: wrongUID})
	requireCode(t, err, codes.Aborted, "uid not-the-uid does not match")

	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: newPod("default", "absent", nil)})
	requireCode(t, err, codes.NotFound, wording(c, `Pod "absent" not found`, `pods "absent" not found`))

	if got := get(t, c, "Pod", "default", "web"); got.Meta().GetLabels()["v"] != "1" {
		t.Fatalf("labels = %v after refused updates, want v=1", got.Meta().GetLabels())
	}
}

func TestUnknownKind(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	wantKinds := "known kinds: " + strings.Join(kplanev1.KindNames(), ", ")

	_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "HorizontalPodAutoscaler", Namespace: "default", Name: "x"})
	requireCode(t, err, codes.InvalidArgument, `unknown kind "HorizontalPodAutoscaler"`, wantKinds)
	_, err = c.List(ctx, &kplanev1.ListRequest{Kind: "pods"})
	requireCode(t, err, codes.InvalidArgument, `unknown kind "pods"`, wantKinds)
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "ConfigMap", Namespace: "default", Name: "x"})
	requireCode(t, err, codes.InvalidArgument, `unknown kind "ConfigMap"`, wantKinds)
	_, err = c.Get(ctx, &kplanev1.GetRequest{Namespace: "default", Name: "x"})
	requireCode(t, err, codes.InvalidArgument, "kind: required", wantKinds)
	w := watch(t, c, &kplanev1.WatchRequest{Kind: "HorizontalPodAutoscaler"})
	requireCode(t, w.recvErr(), codes.InvalidArgument, `unknown kind "HorizontalPodAutoscaler"`, wantKinds)
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: &kplanev1.Object{}})
	requireCode(t, err, codes.InvalidArgument, "exactly one kind must be set", wantKinds)
}

func TestEveryKindRoundTrips(t *testing.T) { transports(t, testEveryKindRoundTrips) }

func testEveryKindRoundTrips(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	objs := []*kplanev1.Object{
		newNamespace("team"),
		newNode("node-1"),
		newPod("team", "web", nil),
		newReplicaSet("team", "rs", 2),
		kplanev1.MustWrap(&kplanev1.ReplicationController{Metadata: meta("team", "rc", nil), Spec: &kplanev1.ReplicationControllerSpec{
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "rc"}}, Spec: podSpec()},
		}}),
		kplanev1.MustWrap(&kplanev1.Service{Metadata: meta("team", "svc", nil), Spec: &kplanev1.ServiceSpec{
			Selector: map[string]string{"app": "web"}, Ports: []*kplanev1.ServicePort{{Port: 80}},
		}}),
		kplanev1.MustWrap(&kplanev1.Endpoints{Metadata: meta("team", "svc", nil)}),
		kplanev1.MustWrap(&kplanev1.Job{Metadata: meta("team", "job", nil), Spec: &kplanev1.JobSpec{
			Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{RestartPolicy: "Never", Containers: podSpec().Containers}},
		}}),
		kplanev1.MustWrap(&kplanev1.PersistentVolume{Metadata: meta("", "pv", nil), Spec: &kplanev1.PersistentVolumeSpec{
			Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{"ReadWriteOnce"},
			HostPath: &kplanev1.HostPathVolumeSource{Path: "/tmp/pv"},
		}}),
		kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{Metadata: meta("team", "pvc", nil), Spec: &kplanev1.PersistentVolumeClaimSpec{
			AccessModes: []string{"ReadWriteOnce"},
			Resources:   &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}},
		}}),
		kplanev1.MustWrap(&kplanev1.StorageClass{Metadata: meta("", "fast", nil), Provisioner: "kplane.io/hostpath"}),
		kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: meta("", "high", nil), Value: 1000}),
		kplanev1.MustWrap(&kplanev1.PodDisruptionBudget{Metadata: meta("team", "web", nil), Spec: &kplanev1.PodDisruptionBudgetSpec{
			MaxUnavailable: kplanev1.IntOrStringFromString("25%"), Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}),
		kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: meta("team", "sa", nil)}),
		newSecret("team", "sec", map[string][]byte{"k": []byte("v")}),
		newLease("team", "lease"),
		newEvent("team", "ev"),
		kplanev1.MustWrap(&kplanev1.CronJob{Metadata: meta("team", "cron", nil), Spec: &kplanev1.CronJobSpec{
			Schedule: "@hourly", JobTemplate: &kplanev1.JobTemplateSpec{Spec: &kplanev1.JobSpec{
				Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{RestartPolicy: "OnFailure", Containers: podSpec().Containers}},
			}},
		}}),
		newDeployment("team", "deploy", 2),
		kplanev1.MustWrap(&kplanev1.ControllerRevision{Metadata: meta("team", "db-7c9f", nil), Data: []byte("snapshot"), Revision: 1}),
		newStatefulSet("team", "db", 2),
		kplanev1.MustWrap(&kplanev1.DaemonSet{Metadata: meta("team", "logs", nil), Spec: &kplanev1.DaemonSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "logs"}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "logs"}}, Spec: podSpec()},
		}}),
		kplanev1.MustWrap(&kplanev1.Role{Metadata: meta("team", "reader", nil), Rules: []*kplanev1.PolicyRule{
			{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}),
		kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: meta("", "reader", nil), Rules: []*kplanev1.PolicyRule{
			{ApiGroups: []string{"apps"}, Resources: []string{"deployments/scale"}, Verbs: []string{"get"}, ResourceNames: []string{"web"}}}}),
		kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: meta("team", "reader", nil),
			RoleRef:  &kplanev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
			Subjects: []*kplanev1.Subject{{Kind: "ServiceAccount", Name: "sa", Namespace: "team"}}}),
		kplanev1.MustWrap(&kplanev1.ClusterRoleBinding{Metadata: meta("", "reader", nil),
			RoleRef:  &kplanev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "reader"},
			Subjects: []*kplanev1.Subject{{Kind: "Group", ApiGroup: "rbac.authorization.k8s.io", Name: "devs"}}}),
	}
	if len(objs) != len(kplanev1.KindNames()) {
		t.Fatalf("test covers %d kinds, the API has %d: add the new kind here", len(objs), len(kplanev1.KindNames()))
	}
	for _, o := range objs {
		t.Run(o.KindName(), func(t *testing.T) {
			out := create(t, c, o)
			k := kplanev1.LookupKind(o.KindName())
			ns := ""
			if k.Namespaced {
				ns = "team"
			}
			got := get(t, c, k.Name, ns, out.Meta().GetName())
			if !proto.Equal(got, out) {
				t.Fatalf("Get = %v, want %v", got, out)
			}
			items := list(t, c, &kplanev1.ListRequest{Kind: k.Name, Namespace: ns}).GetItems()
			found := false
			for _, it := range items {
				found = found || proto.Equal(it, out)
			}
			if !found {
				t.Fatalf("List %s does not contain the created object", k.Name)
			}
		})
	}
}

// TestTimestampsStoredAtKubernetesPrecision: the store keeps a Time to the
// second and a MicroTime to the microsecond, as Kubernetes does, so JSON
// shows exactly what is stored; a rewrite that differs below that
// precision is no change at all.
func TestTimestampsStoredAtKubernetesPrecision(t *testing.T) {
	_, c := start(t)
	at := time.Date(2026, 12, 2, 17, 44, 3, 123456789, time.UTC)
	lease := create(t, c, kplanev1.MustWrap(&kplanev1.Lease{
		Metadata: &kplanev1.ObjectMeta{Name: "l", Namespace: "default"},
		Spec:     &kplanev1.LeaseSpec{HolderIdentity: "a", LeaseDurationSeconds: 15, RenewTime: timestamppb.New(at)},
	}))
	if got := lease.GetLease().GetSpec().GetRenewTime().AsTime(); !got.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("renewTime stored as %v, want %v", got, at.Truncate(time.Microsecond))
	}
	if n := lease.Meta().GetCreationTimestamp().GetNanos(); n != 0 {
		t.Errorf("creationTimestamp keeps %d ns below the second", n)
	}

	pod := create(t, c, newPod("default", "web", nil))
	pod.GetPod().Status = &kplanev1.PodStatus{Phase: "Running", StartTime: timestamppb.New(at)}
	pod = updateStatus(t, c, pod)
	if got := pod.GetPod().GetStatus().GetStartTime().AsTime(); !got.Equal(at.Truncate(time.Second)) {
		t.Errorf("startTime stored as %v, want %v", got, at.Truncate(time.Second))
	}
	// Nanoseconds more are no change: no write, same resourceVersion.
	again := proto.Clone(pod).(*kplanev1.Object)
	again.GetPod().Status.StartTime = timestamppb.New(at.Add(400 * time.Millisecond))
	if got := updateStatus(t, c, again); got.Meta().GetResourceVersion() != pod.Meta().GetResourceVersion() {
		t.Errorf("a sub-second difference was written: resourceVersion %s -> %s", pod.Meta().GetResourceVersion(), got.Meta().GetResourceVersion())
	}
}
