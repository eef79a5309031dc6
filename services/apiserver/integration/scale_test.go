package integration_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func newDeployment(ns, name string, replicas int32) *kplanev1.Object {
	lbl := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.Deployment{
		Metadata: meta(ns, name, nil),
		Spec: &kplanev1.DeploymentSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: lbl},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: lbl}, Spec: podSpec()},
		},
	})
}

func newStatefulSet(ns, name string, replicas int32) *kplanev1.Object {
	lbl := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.StatefulSet{
		Metadata: meta(ns, name, nil),
		Spec: &kplanev1.StatefulSetSpec{
			Replicas:    proto.Int32(replicas),
			ServiceName: name,
			Selector:    &kplanev1.LabelSelector{MatchLabels: lbl},
			Template:    &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: lbl}, Spec: podSpec()},
		},
	})
}

// TestScaleSubresource: GetScale and UpdateScale serve every kind with
// spec.replicas the same way; an update changes spec.replicas only
// (generation +1), a stale resourceVersion is Aborted, bad input is
// refused with the field named and nothing is written.
func TestScaleSubresource(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	rc := kplanev1.MustWrap(&kplanev1.ReplicationController{Metadata: meta("default", "rc", nil), Spec: &kplanev1.ReplicationControllerSpec{
		Replicas: proto.Int32(2),
		Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "rc", "tier": "a"}}, Spec: podSpec()},
	}})
	for _, o := range []*kplanev1.Object{newDeployment("default", "web", 3), newReplicaSet("default", "rs", 3), rc, newStatefulSet("default", "db", 3)} {
		kind := o.KindName()
		t.Run(kind, func(t *testing.T) {
			stored := create(t, c, o)
			name := stored.Meta().Name
			got, err := c.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: kind, Namespace: "default", Name: name})
			must(t, err, "GetScale")
			s := got.GetScale()
			wantSel := "app=" + name
			if kind == "ReplicationController" {
				wantSel = "app=rc,tier=a"
			}
			if s.GetMetadata().GetName() != name || s.GetMetadata().GetUid() != stored.Meta().Uid ||
				s.GetMetadata().GetResourceVersion() != stored.Meta().ResourceVersion ||
				s.GetSpec().GetReplicas() != map[string]int32{"Deployment": 3, "ReplicaSet": 3, "ReplicationController": 2, "StatefulSet": 3}[kind] ||
				s.GetStatus().GetSelector() != wantSel {
				t.Fatalf("GetScale = %v", s)
			}

			up, err := c.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: kind, Scale: &kplanev1.Scale{
				Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: s.Metadata.ResourceVersion},
				Spec:     &kplanev1.ScaleSpec{Replicas: 5},
			}})
			must(t, err, "UpdateScale")
			if up.GetScale().GetSpec().GetReplicas() != 5 || up.GetScale().GetMetadata().GetResourceVersion() == s.Metadata.ResourceVersion {
				t.Fatalf("UpdateScale = %v", up.GetScale())
			}
			after := get(t, c, kind, "default", name)
			if after.Meta().Generation != stored.Meta().Generation+1 {
				t.Fatalf("generation %d after scale, was %d", after.Meta().Generation, stored.Meta().Generation)
			}
			sc := proto.Clone(after).(*kplanev1.Object)
			// Only spec.replicas changed.
			switch kind {
			case "Deployment":
				if sc.GetDeployment().Spec.GetReplicas() != 5 {
					t.Fatal("replicas not written")
				}
				sc.GetDeployment().Spec.Replicas = proto.Int32(3)
				if !proto.Equal(sc.GetDeployment().Spec, stored.GetDeployment().Spec) {
					t.Fatal("scale changed more than spec.replicas")
				}
			case "ReplicaSet":
				if sc.GetReplicaSet().Spec.GetReplicas() != 5 {
					t.Fatal("replicas not written")
				}
			case "ReplicationController":
				if sc.GetReplicationController().Spec.GetReplicas() != 5 {
					t.Fatal("replicas not written")
				}
			case "StatefulSet":
				if sc.GetStatefulSet().Spec.GetReplicas() != 5 {
					t.Fatal("replicas not written")
				}
				sc.GetStatefulSet().Spec.Replicas = proto.Int32(3)
				if !proto.Equal(sc.GetStatefulSet().Spec, stored.GetStatefulSet().Spec) {
					t.Fatal("scale changed more than spec.replicas")
				}
			}

			// Stale resourceVersion: Aborted, nothing written.
			_, err = c.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: kind, Scale: &kplanev1.Scale{
				Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: s.Metadata.ResourceVersion},
				Spec:     &kplanev1.ScaleSpec{Replicas: 9},
			}})
			requireCode(t, err, codes.Aborted, "the object has been modified")
			// Negative replicas: InvalidArgument naming the field.
			_, err = c.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: kind, Scale: &kplanev1.Scale{
				Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
				Spec:     &kplanev1.ScaleSpec{Replicas: -1},
			}})
			requireCode(t, err, codes.InvalidArgument, "spec.replicas", "must be greater than or equal to 0")
			if final := get(t, c, kind, "default", name); final.Meta().ResourceVersion != after.Meta().ResourceVersion {
				t.Fatal("a refused scale wrote the object")
			}
		})
	}

	_, err := c.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: "Pod", Namespace: "default", Name: "x"})
	requireCode(t, err, codes.InvalidArgument, "kind Pod has no scale subresource")
	_, err = c.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: "DaemonSet", Namespace: "default", Name: "x"})
	requireCode(t, err, codes.InvalidArgument, "kind DaemonSet has no scale subresource")
	_, err = c.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: "Widget", Namespace: "default", Name: "x"})
	requireCode(t, err, codes.InvalidArgument)
	_, err = c.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: "Deployment", Namespace: "default", Name: "missing"})
	requireCode(t, err, codes.NotFound, `Deployment "missing" not found`)
	_, err = c.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: "Deployment", Scale: &kplanev1.Scale{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "missing"}, Spec: &kplanev1.ScaleSpec{Replicas: 1}}})
	requireCode(t, err, codes.NotFound)
	_, err = c.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: "Deployment"})
	requireCode(t, err, codes.InvalidArgument, "scale: required")
}

// TestDeploymentValidationThroughStore: a bad Deployment is refused with
// the field path and nothing is stored; the selector is immutable.
func TestDeploymentValidationThroughStore(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	bad := newDeployment("default", "bad", 1)
	bad.GetDeployment().Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDeployment{
		MaxSurge: kplanev1.IntOrStringFromInt32(0), MaxUnavailable: kplanev1.IntOrStringFromString("0%")}}
	_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: bad})
	requireCode(t, err, codes.InvalidArgument, "spec.strategy.rollingUpdate.maxUnavailable", "may not be 0 when `maxSurge` is 0")
	requireNotFound(t, c, "Deployment", "default", "bad")

	d := create(t, c, newDeployment("default", "web", 1))
	ds := d.GetDeployment().Spec
	if ds.GetStrategy().GetRollingUpdate().GetMaxSurge().Text() != "25%" || ds.GetRevisionHistoryLimit() != 10 || ds.GetProgressDeadlineSeconds() != 600 {
		t.Fatalf("defaults not stored: %v", ds)
	}
	d.GetDeployment().Spec.Selector.MatchLabels["x"] = "y"
	d.GetDeployment().Spec.Template.Metadata.Labels["x"] = "y"
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: d})
	requireCode(t, err, codes.InvalidArgument, "spec.selector", "field is immutable")
}

// TestStatefulSetValidationThroughStore: a bad StatefulSet is refused
// with the field path and nothing is stored; the fields that define the
// identities (serviceName, volumeClaimTemplates) cannot change.
func TestStatefulSetValidationThroughStore(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	bad := newStatefulSet("default", "bad", 1)
	bad.GetStatefulSet().Spec.PodManagementPolicy = "Sometimes"
	_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: bad})
	requireCode(t, err, codes.InvalidArgument, "spec.podManagementPolicy", `Unsupported value: "Sometimes"`)
	_, err = c.Get(ctx, &kplanev1.GetRequest{Kind: "StatefulSet", Namespace: "default", Name: "bad"})
	requireCode(t, err, codes.NotFound)

	stored := create(t, c, newStatefulSet("default", "db", 1))
	if ss := stored.GetStatefulSet(); ss.Spec.PodManagementPolicy != "OrderedReady" ||
		ss.Spec.UpdateStrategy.GetRollingUpdate().GetPartition() != 0 || ss.Spec.PersistentVolumeClaimRetentionPolicy.GetWhenScaled() != "Retain" {
		t.Fatalf("stored without defaults: %v", ss.Spec)
	}
	up := proto.Clone(stored).(*kplanev1.Object)
	up.GetStatefulSet().Spec.ServiceName = "other"
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: up})
	requireCode(t, err, codes.InvalidArgument, "spec: Forbidden: updates to statefulset spec for fields other than")
	if got := get(t, c, "StatefulSet", "default", "db"); got.Meta().ResourceVersion != stored.Meta().ResourceVersion {
		t.Fatal("a refused update wrote the object")
	}
}
