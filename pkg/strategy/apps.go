package strategy

import (
	"strconv"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// ---- ControllerRevision

func validateControllerRevision(cr *kplanev1.ControllerRevision) validation.ErrorList {
	var errs validation.ErrorList
	errs.NonNegative("revision", cr.GetRevision())
	return errs
}

// validateControllerRevisionUpdate keeps the snapshot fixed: a revision
// is a record of what ran; only its metadata (owner references, the
// revision number a rollback moves forward) may change, as in Kubernetes.
func validateControllerRevisionUpdate(cr, old *kplanev1.ControllerRevision) validation.ErrorList {
	var errs validation.ErrorList
	if string(cr.GetData()) != string(old.GetData()) {
		errs.Immutable("data", "<snapshot>")
	}
	return errs
}

// ---- StatefulSet

func defaultStatefulSet(ss *kplanev1.StatefulSet) {
	if ss.Spec == nil {
		ss.Spec = &kplanev1.StatefulSetSpec{}
	}
	s := ss.Spec
	if s.Replicas == nil {
		s.Replicas = ptr[int32](1)
	}
	if s.PodManagementPolicy == "" {
		s.PodManagementPolicy = kplanev1.PodManagementOrderedReady
	}
	if s.UpdateStrategy == nil {
		s.UpdateStrategy = &kplanev1.StatefulSetUpdateStrategy{}
	}
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = kplanev1.UpdateStrategyRollingUpdate
	}
	if s.UpdateStrategy.Type == kplanev1.UpdateStrategyRollingUpdate {
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &kplanev1.RollingUpdateStatefulSetStrategy{}
		}
		ru := s.UpdateStrategy.RollingUpdate
		if ru.Partition == nil {
			ru.Partition = ptr[int32](0)
		}
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = kplanev1.IntOrStringFromInt32(1)
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = ptr[int32](kplanev1.DefaultRevisionHistoryLimit)
	}
	if s.PersistentVolumeClaimRetentionPolicy == nil {
		s.PersistentVolumeClaimRetentionPolicy = &kplanev1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	rp := s.PersistentVolumeClaimRetentionPolicy
	if rp.WhenDeleted == "" {
		rp.WhenDeleted = kplanev1.RetentionPolicyRetain
	}
	if rp.WhenScaled == "" {
		rp.WhenScaled = kplanev1.RetentionPolicyRetain
	}
	for _, t := range s.VolumeClaimTemplates {
		defaultPersistentVolumeClaim(t)
	}
	defaultTemplate(s.Template)
}

func validateStatefulSet(ss *kplanev1.StatefulSet) validation.ErrorList {
	var errs validation.ErrorList
	s := ss.Spec
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	if s.Replicas != nil {
		errs.NonNegative("spec.replicas", int64(*s.Replicas))
	}
	errs.NonNegative("spec.minReadySeconds", int64(s.MinReadySeconds))
	if s.RevisionHistoryLimit != nil {
		errs.NonNegative("spec.revisionHistoryLimit", int64(*s.RevisionHistoryLimit))
	}
	if s.ServiceName != "" {
		validateName(&errs, "spec.serviceName", s.ServiceName, false, validation.IsDNS1123Label)
	}
	if s.PodManagementPolicy != "" {
		oneOf(&errs, "spec.podManagementPolicy", s.PodManagementPolicy, kplanev1.PodManagementOrderedReady, kplanev1.PodManagementParallel)
	}
	validateSelectorMatchesTemplate(s.Selector, s.Template, "spec", &errs)
	validateTemplate(withClaimVolumes(s.Template, s.VolumeClaimTemplates), "spec.template", []string{"Always"}, &errs)
	if ts := s.GetTemplate().GetSpec(); ts != nil && ts.ActiveDeadlineSeconds != nil {
		errs.Forbidden("spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds is not supported for pods of a StatefulSet")
	}
	validateStatefulSetUpdateStrategy(s.UpdateStrategy, &errs)
	if rp := s.PersistentVolumeClaimRetentionPolicy; rp != nil {
		const p = "spec.persistentVolumeClaimRetentionPolicy"
		oneOf(&errs, child(p, "whenDeleted"), rp.WhenDeleted, kplanev1.RetentionPolicyDelete, kplanev1.RetentionPolicyRetain)
		oneOf(&errs, child(p, "whenScaled"), rp.WhenScaled, kplanev1.RetentionPolicyDelete, kplanev1.RetentionPolicyRetain)
	}
	validateVolumeClaimTemplates(s.VolumeClaimTemplates, &errs)
	if st := ss.Status; st != nil {
		errs.NonNegative("status.observedGeneration", st.ObservedGeneration)
		errs.NonNegative("status.replicas", int64(st.Replicas))
		errs.NonNegative("status.readyReplicas", int64(st.ReadyReplicas))
		errs.NonNegative("status.currentReplicas", int64(st.CurrentReplicas))
		errs.NonNegative("status.updatedReplicas", int64(st.UpdatedReplicas))
		errs.NonNegative("status.availableReplicas", int64(st.AvailableReplicas))
		if st.CollisionCount != nil {
			errs.NonNegative("status.collisionCount", int64(*st.CollisionCount))
		}
		errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
	}
	return errs
}

// withClaimVolumes is the template as its pods will have it: each claim
// template becomes a volume of its name (statefulsetctl points it at the
// pod's own claim), so a container may mount it. A copy when anything is
// added.
func withClaimVolumes(t *kplanev1.PodTemplateSpec, claims []*kplanev1.PersistentVolumeClaim) *kplanev1.PodTemplateSpec {
	if t.GetSpec() == nil || len(claims) == 0 {
		return t
	}
	c := proto.Clone(t).(*kplanev1.PodTemplateSpec)
	have := map[string]bool{}
	for _, v := range c.Spec.Volumes {
		have[v.GetName()] = true
	}
	for _, ct := range claims {
		name := ct.GetMetadata().GetName()
		if name == "" || have[name] {
			continue
		}
		c.Spec.Volumes = append(c.Spec.Volumes, &kplanev1.Volume{Name: name,
			PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: name}})
	}
	return c
}

// validateVolumeClaimTemplates checks each template as the claim it will
// become (named, a valid claim spec) and that its name does not collide
// with another template or with a volume the pod template already has:
// the claim is mounted as the pod volume of the template's name.
func validateVolumeClaimTemplates(ts []*kplanev1.PersistentVolumeClaim, errs *validation.ErrorList) {
	seen := map[string]bool{}
	for i, t := range ts {
		p := "spec.volumeClaimTemplates[" + strconv.Itoa(i) + "]"
		name := t.GetMetadata().GetName()
		validateName(errs, p+".metadata.name", name, true, validation.IsDNS1123Subdomain)
		if name != "" && seen[name] {
			errs.Duplicate(p+".metadata.name", name)
		}
		seen[name] = true
		for _, e := range validatePersistentVolumeClaim(t) {
			e.Path = p + "." + e.Path
			*errs = append(*errs, e)
		}
	}
}

func validateStatefulSetUpdateStrategy(st *kplanev1.StatefulSetUpdateStrategy, errs *validation.ErrorList) {
	if st == nil {
		return
	}
	if !oneOf(errs, "spec.updateStrategy.type", st.Type, kplanev1.UpdateStrategyOnDelete, kplanev1.UpdateStrategyRollingUpdate) {
		return
	}
	ru := st.RollingUpdate
	if st.Type == kplanev1.UpdateStrategyOnDelete {
		if ru != nil {
			errs.Forbidden("spec.updateStrategy.rollingUpdate", "only allowed for updateStrategy 'RollingUpdate'")
		}
		return
	}
	if ru == nil {
		return
	}
	const p = "spec.updateStrategy.rollingUpdate"
	if ru.Partition != nil {
		errs.NonNegative(child(p, "partition"), int64(*ru.Partition))
	}
	if ru.MaxUnavailable != nil && validateIntOrPercent(ru.MaxUnavailable, child(p, "maxUnavailable"), true, errs) && isZero(ru.MaxUnavailable) {
		errs.Invalid(child(p, "maxUnavailable"), ru.MaxUnavailable.Text(), "must be greater than 0")
	}
}

// validateStatefulSetUpdate allows, as apps/v1 does, changes to replicas,
// template, updateStrategy, persistentVolumeClaimRetentionPolicy,
// minReadySeconds and revisionHistoryLimit only: the selector, the
// Service, the claim templates and the management policy define the
// identities and cannot move under running pods.
func validateStatefulSetUpdate(ss, old *kplanev1.StatefulSet) validation.ErrorList {
	var errs validation.ErrorList
	rest := proto.Clone(old.GetSpec()).(*kplanev1.StatefulSetSpec)
	n := ss.GetSpec()
	if rest == nil || n == nil {
		return errs
	}
	rest.Replicas = n.Replicas
	rest.Template = n.Template
	rest.UpdateStrategy = n.UpdateStrategy
	rest.PersistentVolumeClaimRetentionPolicy = n.PersistentVolumeClaimRetentionPolicy
	rest.MinReadySeconds = n.MinReadySeconds
	rest.RevisionHistoryLimit = n.RevisionHistoryLimit
	if !proto.Equal(rest, n) {
		errs.Forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'template', 'updateStrategy', "+
			"'persistentVolumeClaimRetentionPolicy', 'minReadySeconds' and 'revisionHistoryLimit' are forbidden")
	}
	return errs
}

// statefulSetScale is the StatefulSet's scale subresource.
var statefulSetScale = scaleFuncs[*kplanev1.StatefulSet]{
	read: func(ss *kplanev1.StatefulSet) (int32, int32, *kplanev1.LabelSelector) {
		return ss.GetSpec().GetReplicas(), ss.GetStatus().GetReplicas(), ss.GetSpec().GetSelector()
	},
	write: func(ss *kplanev1.StatefulSet, n int32) {
		if ss.Spec == nil {
			ss.Spec = &kplanev1.StatefulSetSpec{}
		}
		ss.Spec.Replicas = &n
	},
}

// ---- DaemonSet

func defaultDaemonSet(ds *kplanev1.DaemonSet) {
	if ds.Spec == nil {
		ds.Spec = &kplanev1.DaemonSetSpec{}
	}
	s := ds.Spec
	if s.UpdateStrategy == nil {
		s.UpdateStrategy = &kplanev1.DaemonSetUpdateStrategy{}
	}
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = kplanev1.UpdateStrategyRollingUpdate
	}
	if s.UpdateStrategy.Type == kplanev1.UpdateStrategyRollingUpdate {
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &kplanev1.RollingUpdateDaemonSet{}
		}
		ru := s.UpdateStrategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = kplanev1.IntOrStringFromInt32(1)
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = kplanev1.IntOrStringFromInt32(0)
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = ptr[int32](kplanev1.DefaultRevisionHistoryLimit)
	}
	defaultTemplate(s.Template)
}

func validateDaemonSet(ds *kplanev1.DaemonSet) validation.ErrorList {
	var errs validation.ErrorList
	s := ds.Spec
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	errs.NonNegative("spec.minReadySeconds", int64(s.MinReadySeconds))
	if s.RevisionHistoryLimit != nil {
		errs.NonNegative("spec.revisionHistoryLimit", int64(*s.RevisionHistoryLimit))
	}
	validateSelectorMatchesTemplate(s.Selector, s.Template, "spec", &errs)
	validateTemplate(s.Template, "spec.template", []string{"Always"}, &errs)
	if ts := s.GetTemplate().GetSpec(); ts != nil && ts.ActiveDeadlineSeconds != nil {
		errs.Forbidden("spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds is not supported for pods of a DaemonSet")
	}
	if st := s.UpdateStrategy; st != nil &&
		oneOf(&errs, "spec.updateStrategy.type", st.Type, kplanev1.UpdateStrategyOnDelete, kplanev1.UpdateStrategyRollingUpdate) {
		ru := st.RollingUpdate
		const p = "spec.updateStrategy.rollingUpdate"
		switch {
		case st.Type == kplanev1.UpdateStrategyOnDelete && ru != nil:
			errs.Forbidden(p, "only allowed for updateStrategy 'RollingUpdate'")
		case ru != nil:
			surgeOK := validateIntOrPercent(ru.MaxSurge, child(p, "maxSurge"), true, &errs)
			unavOK := validateIntOrPercent(ru.MaxUnavailable, child(p, "maxUnavailable"), true, &errs)
			if surgeOK && unavOK && isZero(ru.MaxSurge) && isZero(ru.MaxUnavailable) {
				errs.Invalid(child(p, "maxUnavailable"), ru.MaxUnavailable.Text(), "may not be 0 when `maxSurge` is 0")
			}
		}
	}
	if st := ds.Status; st != nil {
		errs.NonNegative("status.currentNumberScheduled", int64(st.CurrentNumberScheduled))
		errs.NonNegative("status.numberMisscheduled", int64(st.NumberMisscheduled))
		errs.NonNegative("status.desiredNumberScheduled", int64(st.DesiredNumberScheduled))
		errs.NonNegative("status.numberReady", int64(st.NumberReady))
		errs.NonNegative("status.observedGeneration", st.ObservedGeneration)
		errs.NonNegative("status.updatedNumberScheduled", int64(st.UpdatedNumberScheduled))
		errs.NonNegative("status.numberAvailable", int64(st.NumberAvailable))
		errs.NonNegative("status.numberUnavailable", int64(st.NumberUnavailable))
		if st.CollisionCount != nil {
			errs.NonNegative("status.collisionCount", int64(*st.CollisionCount))
		}
		errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
	}
	return errs
}

// validateDaemonSetUpdate keeps the selector fixed (apps/v1).
func validateDaemonSetUpdate(ds, old *kplanev1.DaemonSet) validation.ErrorList {
	var errs validation.ErrorList
	if !proto.Equal(ds.GetSpec().GetSelector(), old.GetSpec().GetSelector()) {
		errs.Immutable("spec.selector", ds.GetSpec().GetSelector())
	}
	return errs
}
