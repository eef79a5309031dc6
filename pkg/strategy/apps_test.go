package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validStatefulSet() *kplanev1.StatefulSet {
	return &kplanev1.StatefulSet{Metadata: meta("default", "db"), Spec: &kplanev1.StatefulSetSpec{
		Replicas:    ptr[int32](3),
		ServiceName: "db",
		Selector:    &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Template:    template(map[string]string{"app": "db"}, ""),
		VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Metadata: &kplanev1.ObjectMeta{Name: "data"},
			Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"},
				Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}}}},
	}}
}

func validDaemonSet() *kplanev1.DaemonSet {
	return &kplanev1.DaemonSet{Metadata: meta("default", "logs"), Spec: &kplanev1.DaemonSetSpec{
		Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "logs"}},
		Template: template(map[string]string{"app": "logs"}, ""),
	}}
}

func TestStatefulSetDefaults(t *testing.T) {
	ss := defaulted(&kplanev1.StatefulSet{Spec: &kplanev1.StatefulSetSpec{Template: &kplanev1.PodTemplateSpec{},
		VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Spec: &kplanev1.PersistentVolumeClaimSpec{}}}}})
	s := ss.Spec
	ru := s.GetUpdateStrategy().GetRollingUpdate()
	if s.GetReplicas() != 1 || s.PodManagementPolicy != "OrderedReady" || s.UpdateStrategy.Type != "RollingUpdate" ||
		ru.GetPartition() != 0 || ru.Partition == nil || ru.GetMaxUnavailable().Text() != "1" || s.GetRevisionHistoryLimit() != 10 ||
		s.PersistentVolumeClaimRetentionPolicy.WhenDeleted != "Retain" || s.PersistentVolumeClaimRetentionPolicy.WhenScaled != "Retain" ||
		s.Template.Spec.GetRestartPolicy() != "Always" || s.VolumeClaimTemplates[0].Spec.VolumeMode != "Filesystem" {
		t.Errorf("defaults: %v", s)
	}
	od := defaulted(&kplanev1.StatefulSet{Spec: &kplanev1.StatefulSetSpec{UpdateStrategy: &kplanev1.StatefulSetUpdateStrategy{Type: "OnDelete"},
		Replicas: ptr[int32](0)}})
	if od.Spec.UpdateStrategy.RollingUpdate != nil || od.Spec.GetReplicas() != 0 {
		t.Errorf("OnDelete defaults: %v", od.Spec)
	}
}

func TestStatefulSetValidate(t *testing.T) {
	i, s := kplanev1.IntOrStringFromInt32, kplanev1.IntOrStringFromString
	ru := func(ss *kplanev1.StatefulSet) *kplanev1.RollingUpdateStatefulSetStrategy {
		ss.Spec.UpdateStrategy = &kplanev1.StatefulSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateStatefulSetStrategy{}}
		return ss.Spec.UpdateStrategy.RollingUpdate
	}
	checkValidate(t, "StatefulSet", validStatefulSet, []tc[*kplanev1.StatefulSet]{
		{"negative replicas", func(ss *kplanev1.StatefulSet) { ss.Spec.Replicas = ptr[int32](-1) },
			[]string{"spec.replicas: must be greater than or equal to 0"}},
		{"no selector", func(ss *kplanev1.StatefulSet) { ss.Spec.Selector = nil }, []string{"spec.selector: Required value"}},
		{"selector does not match", func(ss *kplanev1.StatefulSet) { ss.Spec.Selector.MatchLabels["app"] = "web" },
			[]string{`spec.template.metadata.labels: Invalid value: {"app":"db"}: selector does not match template labels`}},
		{"template restart policy", func(ss *kplanev1.StatefulSet) { ss.Spec.Template.Spec.RestartPolicy = "Never" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`}},
		{"bad policy", func(ss *kplanev1.StatefulSet) { ss.Spec.PodManagementPolicy = "Ordered" },
			[]string{`spec.podManagementPolicy: Unsupported value: "Ordered": supported values: "OrderedReady", "Parallel"`}},
		{"bad service name", func(ss *kplanev1.StatefulSet) { ss.Spec.ServiceName = "Db_1" },
			[]string{`spec.serviceName: Invalid value: "Db_1": ...`}},
		{"bad strategy type", func(ss *kplanev1.StatefulSet) {
			ss.Spec.UpdateStrategy = &kplanev1.StatefulSetUpdateStrategy{Type: "Rolling"}
		}, []string{`spec.updateStrategy.type: Unsupported value: "Rolling": supported values: "OnDelete", "RollingUpdate"`}},
		{"OnDelete with rollingUpdate", func(ss *kplanev1.StatefulSet) {
			ss.Spec.UpdateStrategy = &kplanev1.StatefulSetUpdateStrategy{Type: "OnDelete", RollingUpdate: &kplanev1.RollingUpdateStatefulSetStrategy{}}
		}, []string{"spec.updateStrategy.rollingUpdate: Forbidden: only allowed for updateStrategy 'RollingUpdate'"}},
		{"negative partition", func(ss *kplanev1.StatefulSet) { ru(ss).Partition = ptr[int32](-2) },
			[]string{"spec.updateStrategy.rollingUpdate.partition: must be greater than or equal to 0"}},
		{"zero maxUnavailable", func(ss *kplanev1.StatefulSet) { ru(ss).MaxUnavailable = i(0) },
			[]string{`spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "0": must be greater than 0`}},
		{"zero percent maxUnavailable", func(ss *kplanev1.StatefulSet) { ru(ss).MaxUnavailable = s("0%") },
			[]string{`spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "0%": must be greater than 0`}},
		{"bad percent", func(ss *kplanev1.StatefulSet) { ru(ss).MaxUnavailable = s("half") },
			[]string{`spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "half": must be an integer or a percentage (e.g. '25%')`}},
		{"percent maxUnavailable", func(ss *kplanev1.StatefulSet) { ru(ss).MaxUnavailable = s("50%") }, nil},
		{"bad retention", func(ss *kplanev1.StatefulSet) {
			ss.Spec.PersistentVolumeClaimRetentionPolicy = &kplanev1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Keep", WhenScaled: "Delete"}
		}, []string{`spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: "Keep": supported values: "Delete", "Retain"`}},
		{"unnamed claim template", func(ss *kplanev1.StatefulSet) { ss.Spec.VolumeClaimTemplates[0].Metadata = nil },
			[]string{"spec.volumeClaimTemplates[0].metadata.name: Required value"}},
		{"duplicate claim template", func(ss *kplanev1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates = append(ss.Spec.VolumeClaimTemplates, ss.Spec.VolumeClaimTemplates[0])
		}, []string{`spec.volumeClaimTemplates[1].metadata.name: Duplicate value: "data"`}},
		{"claim template without storage", func(ss *kplanev1.StatefulSet) { ss.Spec.VolumeClaimTemplates[0].Spec.Resources = nil },
			[]string{"spec.volumeClaimTemplates[0].spec.resources.requests[\"storage\"]: Required value"}},
		{"mounts its claim", func(ss *kplanev1.StatefulSet) {
			ss.Spec.Template.Spec.Containers[0].VolumeMounts = []*kplanev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, nil},
		{"mounts an unknown volume", func(ss *kplanev1.StatefulSet) {
			ss.Spec.Template.Spec.Containers[0].VolumeMounts = []*kplanev1.VolumeMount{{Name: "logs", MountPath: "/logs"}}
		}, []string{`spec.template.spec.containers[0].volumeMounts[0].name: Not found: "logs"`}},
		{"negative status", func(ss *kplanev1.StatefulSet) { ss.Status = &kplanev1.StatefulSetStatus{ReadyReplicas: -1} },
			[]string{"status.readyReplicas: must be greater than or equal to 0"}},
	})
}

func TestStatefulSetUpdate(t *testing.T) {
	checkUpdate(t, "StatefulSet", validStatefulSet, []utc[*kplanev1.StatefulSet]{
		{"replicas, template, strategy", func(ss *kplanev1.StatefulSet) {
			ss.Spec.Replicas = ptr[int32](5)
			ss.Spec.Template.Spec.Containers[0].Image = "db:2"
			ss.Spec.UpdateStrategy.RollingUpdate.Partition = ptr[int32](2)
			ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = "Delete"
		}, nil},
		{"selector", func(ss *kplanev1.StatefulSet) {
			ss.Spec.Selector.MatchLabels["tier"] = "x"
			ss.Spec.Template.Metadata.Labels["tier"] = "x"
		}, []string{"spec: Forbidden: updates to statefulset spec for fields other than ..."}},
		{"service name", func(ss *kplanev1.StatefulSet) { ss.Spec.ServiceName = "other" },
			[]string{"spec: Forbidden: updates to statefulset spec for fields other than ..."}},
		{"claim templates", func(ss *kplanev1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests["storage"] = "2Gi"
		}, []string{"spec: Forbidden: updates to statefulset spec for fields other than ..."}},
		{"pod management policy", func(ss *kplanev1.StatefulSet) { ss.Spec.PodManagementPolicy = "Parallel" },
			[]string{"spec: Forbidden: updates to statefulset spec for fields other than ..."}},
	})
}

func TestStatefulSetScale(t *testing.T) {
	ss := defaulted(validStatefulSet())
	ss.Metadata.ResourceVersion = "7"
	ss.Status = &kplanev1.StatefulSetStatus{Replicas: 2}
	obj := kplanev1.MustWrap(ss)
	sc, ok := For("StatefulSet").(Scaler)
	if !ok {
		t.Fatal("StatefulSet strategy is not a Scaler")
	}
	got, err := sc.Scale(obj)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas != 3 || got.Status.Replicas != 2 || got.Status.Selector != "app=db" || got.Metadata.ResourceVersion != "7" {
		t.Errorf("scale: %v", got)
	}
	sc.SetReplicas(obj, 0)
	if obj.GetStatefulSet().Spec.GetReplicas() != 0 || obj.GetStatefulSet().Spec.Replicas == nil {
		t.Errorf("SetReplicas(0): %v", obj.GetStatefulSet().Spec.Replicas)
	}
	if _, ok := For("DaemonSet").(Scaler); ok {
		t.Error("DaemonSet has no scale subresource")
	}
}

func TestDaemonSetDefaults(t *testing.T) {
	ds := defaulted(&kplanev1.DaemonSet{Spec: &kplanev1.DaemonSetSpec{Template: &kplanev1.PodTemplateSpec{}}})
	s := ds.Spec
	ru := s.GetUpdateStrategy().GetRollingUpdate()
	if s.UpdateStrategy.Type != "RollingUpdate" || ru.GetMaxUnavailable().Text() != "1" || ru.GetMaxSurge().Text() != "0" ||
		s.GetRevisionHistoryLimit() != 10 || s.Template.Spec.GetRestartPolicy() != "Always" {
		t.Errorf("defaults: %v", s)
	}
}

func TestDaemonSetValidate(t *testing.T) {
	i, s := kplanev1.IntOrStringFromInt32, kplanev1.IntOrStringFromString
	ru := func(surge, unav *kplanev1.IntOrString) *kplanev1.DaemonSetUpdateStrategy {
		return &kplanev1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDaemonSet{MaxSurge: surge, MaxUnavailable: unav}}
	}
	checkValidate(t, "DaemonSet", validDaemonSet, []tc[*kplanev1.DaemonSet]{
		{"no selector", func(ds *kplanev1.DaemonSet) { ds.Spec.Selector = nil }, []string{"spec.selector: Required value"}},
		{"no template", func(ds *kplanev1.DaemonSet) { ds.Spec.Template = nil }, []string{"spec.template: Required value"}},
		{"template restart policy", func(ds *kplanev1.DaemonSet) { ds.Spec.Template.Spec.RestartPolicy = "OnFailure" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"`}},
		{"bad strategy type", func(ds *kplanev1.DaemonSet) {
			ds.Spec.UpdateStrategy = &kplanev1.DaemonSetUpdateStrategy{Type: "Recreate"}
		},
			[]string{`spec.updateStrategy.type: Unsupported value: "Recreate": supported values: "OnDelete", "RollingUpdate"`}},
		{"OnDelete with rollingUpdate", func(ds *kplanev1.DaemonSet) {
			ds.Spec.UpdateStrategy = &kplanev1.DaemonSetUpdateStrategy{Type: "OnDelete", RollingUpdate: &kplanev1.RollingUpdateDaemonSet{}}
		}, []string{"spec.updateStrategy.rollingUpdate: Forbidden: only allowed for updateStrategy 'RollingUpdate'"}},
		{"both zero", func(ds *kplanev1.DaemonSet) { ds.Spec.UpdateStrategy = ru(i(0), s("0%")) },
			[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0"}},
		{"surge over 100%", func(ds *kplanev1.DaemonSet) { ds.Spec.UpdateStrategy = ru(s("150%"), i(0)) },
			[]string{`spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: "150%": must not be greater than 100%`}},
		{"negative unavailable", func(ds *kplanev1.DaemonSet) { ds.Spec.UpdateStrategy = ru(i(1), i(-1)) },
			[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable: must be greater than or equal to 0"}},
		{"surge only", func(ds *kplanev1.DaemonSet) { ds.Spec.UpdateStrategy = ru(i(1), i(0)) }, nil},
		{"negative status", func(ds *kplanev1.DaemonSet) { ds.Status = &kplanev1.DaemonSetStatus{NumberReady: -1} },
			[]string{"status.numberReady: must be greater than or equal to 0"}},
	})
	checkUpdate(t, "DaemonSet", validDaemonSet, []utc[*kplanev1.DaemonSet]{
		{"template", func(ds *kplanev1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "logs:2" }, nil},
		{"selector", func(ds *kplanev1.DaemonSet) {
			ds.Spec.Selector.MatchLabels["tier"] = "x"
			ds.Spec.Template.Metadata.Labels["tier"] = "x"
		}, []string{`spec.selector: Invalid value: ...`}},
	})
}

func TestControllerRevision(t *testing.T) {
	valid := func() *kplanev1.ControllerRevision {
		return &kplanev1.ControllerRevision{Metadata: meta("default", "db-5d4f"), Data: []byte{1, 2}, Revision: 1}
	}
	checkValidate(t, "ControllerRevision", valid, []tc[*kplanev1.ControllerRevision]{
		{"negative revision", func(cr *kplanev1.ControllerRevision) { cr.Revision = -1 },
			[]string{"revision: must be greater than or equal to 0"}},
	})
	checkUpdate(t, "ControllerRevision", valid, []utc[*kplanev1.ControllerRevision]{
		{"revision moves forward", func(cr *kplanev1.ControllerRevision) { cr.Revision = 4 }, nil},
		{"data", func(cr *kplanev1.ControllerRevision) { cr.Data = []byte{3} }, []string{"data: Invalid value: ..."}},
	})
}
