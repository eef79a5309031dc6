package strategy

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/pkg/validation"
)

// Job defaults, as in Kubernetes.
const (
	defaultBackoffLimit   = 6
	completionNonIndexed  = "NonIndexed"
	completionIndexed     = "Indexed"
	jobNameLabel          = "job-name"
	jobNameLabelQualified = "batch.kubernetes.io/job-name"
)

func defaultTemplate(t *kplanev1.PodTemplateSpec) {
	if t == nil {
		return
	}
	if t.Spec == nil {
		t.Spec = &kplanev1.PodSpec{}
	}
	defaultPodSpec(t.Spec)
}

func defaultReplicaSet(rs *kplanev1.ReplicaSet) {
	if rs.Spec == nil {
		rs.Spec = &kplanev1.ReplicaSetSpec{}
	}
	if rs.Spec.Replicas == nil {
		rs.Spec.Replicas = ptr[int32](1)
	}
	defaultTemplate(rs.Spec.Template)
}

// defaultReplicationController also derives the selector, and the
// controller's own labels, from the template's labels when they are unset,
// as Kubernetes does for the v1 ReplicationController.
func defaultReplicationController(rc *kplanev1.ReplicationController) {
	if rc.Spec == nil {
		rc.Spec = &kplanev1.ReplicationControllerSpec{}
	}
	if rc.Spec.Replicas == nil {
		rc.Spec.Replicas = ptr[int32](1)
	}
	if t := rc.Spec.Template; t != nil && len(t.GetMetadata().GetLabels()) > 0 {
		tl := t.GetMetadata().GetLabels()
		if len(rc.Spec.Selector) == 0 {
			rc.Spec.Selector = maps.Clone(tl)
		}
		if rc.Metadata == nil {
			rc.Metadata = &kplanev1.ObjectMeta{}
		}
		if len(rc.Metadata.Labels) == 0 {
			rc.Metadata.Labels = maps.Clone(tl)
		}
	}
	defaultTemplate(rc.Spec.Template)
}

// defaultJob follows Kubernetes: parallelism 1; completions 1 only when
// both completions and parallelism are unset (a set parallelism without
// completions is a work queue); backoffLimit 6; completionMode NonIndexed.
//
// Selector: Kubernetes generates one from a controller-uid label, but the
// uid is not known before the store writes the object. Instead, when the
// selector is unset and manualSelector is not true, the template gets the
// labels job-name=<name> and batch.kubernetes.io/job-name=<name> and the
// selector requires batch.kubernetes.io/job-name=<name>. Without a usable
// name (generateName only, or longer than a label value allows) the
// selector is the template's labels, and with none of those it stays unset
// and validation asks for it.
func defaultJob(j *kplanev1.Job) {
	if j.Spec == nil {
		j.Spec = &kplanev1.JobSpec{}
	}
	s := j.Spec
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions = ptr[int32](1)
	}
	if s.Parallelism == nil {
		s.Parallelism = ptr[int32](1)
	}
	if s.BackoffLimit == nil {
		s.BackoffLimit = ptr[int32](defaultBackoffLimit)
	}
	if s.CompletionMode == "" {
		s.CompletionMode = completionNonIndexed
	}
	if s.Suspend == nil {
		s.Suspend = ptr(false)
	}
	if s.Selector == nil && !s.GetManualSelector() && s.Template != nil {
		name := j.GetMetadata().GetName()
		if t := s.Template; name != "" && len(validation.IsValidLabelValue(name)) == 0 {
			if t.Metadata == nil {
				t.Metadata = &kplanev1.ObjectMeta{}
			}
			if t.Metadata.Labels == nil {
				t.Metadata.Labels = map[string]string{}
			}
			t.Metadata.Labels[jobNameLabel] = name
			t.Metadata.Labels[jobNameLabelQualified] = name
			s.Selector = &kplanev1.LabelSelector{MatchLabels: map[string]string{jobNameLabelQualified: name}}
		} else if tl := t.GetMetadata().GetLabels(); len(tl) > 0 {
			s.Selector = &kplanev1.LabelSelector{MatchLabels: maps.Clone(tl)}
		}
	}
	defaultTemplate(s.Template)
}

// validateTemplate checks a controller's pod template: labels and
// annotations of its metadata, its pod spec, and the restart policies the
// controller supports.
func validateTemplate(t *kplanev1.PodTemplateSpec, path string, allowed []string, errs *validation.ErrorList) {
	if t == nil {
		errs.Required(path, "")
		return
	}
	mp := child(path, "metadata")
	errs.AddAll(validation.ValidateLabels(t.GetMetadata().GetLabels(), child(mp, "labels")))
	errs.AddAll(validation.ValidateAnnotations(t.GetMetadata().GetAnnotations(), child(mp, "annotations")))
	sp := child(path, "spec")
	if t.Spec == nil {
		errs.Required(sp, "")
		return
	}
	errs.AddAll(validatePodSpec(t.Spec, sp))
	if t.Spec.RestartPolicy != "" {
		// validatePodSpec already reports values outside the enum.
		if !slices.Contains(allowed, t.Spec.RestartPolicy) && slices.Contains(restartPolicies, t.Spec.RestartPolicy) {
			errs.NotSupported(child(sp, "restartPolicy"), t.Spec.RestartPolicy, allowed)
		}
	}
}

// validateSelectorMatchesTemplate checks a set-based selector: present,
// not empty, well formed, and selecting the template's labels (otherwise
// the controller would create pods it does not own, forever).
func validateSelectorMatchesTemplate(ls *kplanev1.LabelSelector, t *kplanev1.PodTemplateSpec, path string, errs *validation.ErrorList) {
	sp := child(path, "selector")
	if ls == nil {
		errs.Required(sp, "")
		return
	}
	if len(ls.GetMatchLabels()) == 0 && len(ls.GetMatchExpressions()) == 0 {
		errs.Invalid(sp, ls, "empty selector is invalid: it would select every pod in the namespace")
		return
	}
	before := len(*errs)
	errs.AddAll(validation.ValidateLabelSelector(ls, sp))
	if len(*errs) > before || t == nil {
		return
	}
	sel, err := labels.FromLabelSelector(ls)
	if err != nil {
		errs.Invalid(sp, ls, err.Error())
		return
	}
	tl := t.GetMetadata().GetLabels()
	if !sel.Matches(tl) {
		errs.Invalid(child(path, "template.metadata.labels"), tl, "selector does not match template labels")
	}
}

func validateReplicaSet(rs *kplanev1.ReplicaSet) validation.ErrorList {
	var errs validation.ErrorList
	s := rs.Spec
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	if s.Replicas != nil {
		errs.NonNegative("spec.replicas", int64(*s.Replicas))
	}
	errs.NonNegative("spec.minReadySeconds", int64(s.MinReadySeconds))
	validateSelectorMatchesTemplate(s.Selector, s.Template, "spec", &errs)
	validateTemplate(s.Template, "spec.template", []string{"Always"}, &errs)
	if ts := s.GetTemplate().GetSpec(); ts != nil && ts.ActiveDeadlineSeconds != nil {
		errs.Forbidden("spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds is not supported for pods of a ReplicaSet")
	}
	validateReplicaStatus(rs.Status, &errs)
	return errs
}

func validateReplicaStatus(st *kplanev1.ReplicaSetStatus, errs *validation.ErrorList) {
	if st == nil {
		return
	}
	errs.NonNegative("status.replicas", int64(st.Replicas))
	errs.NonNegative("status.fullyLabeledReplicas", int64(st.FullyLabeledReplicas))
	errs.NonNegative("status.readyReplicas", int64(st.ReadyReplicas))
	errs.NonNegative("status.availableReplicas", int64(st.AvailableReplicas))
	errs.NonNegative("status.observedGeneration", st.ObservedGeneration)
	errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
}

// validateReplicaSetUpdate keeps the selector fixed: changing it would
// orphan the pods the set already owns (apps/v1 semantics).
func validateReplicaSetUpdate(rs, old *kplanev1.ReplicaSet) validation.ErrorList {
	var errs validation.ErrorList
	if !proto.Equal(rs.GetSpec().GetSelector(), old.GetSpec().GetSelector()) {
		errs.Immutable("spec.selector", rs.GetSpec().GetSelector())
	}
	return errs
}

func validateReplicationController(rc *kplanev1.ReplicationController) validation.ErrorList {
	var errs validation.ErrorList
	s := rc.Spec
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	if s.Replicas != nil {
		errs.NonNegative("spec.replicas", int64(*s.Replicas))
	}
	errs.NonNegative("spec.minReadySeconds", int64(s.MinReadySeconds))
	if len(s.Selector) == 0 {
		errs.Required("spec.selector", "")
	} else {
		before := len(errs)
		errs.AddAll(validation.ValidateLabels(s.Selector, "spec.selector"))
		if len(errs) == before && s.Template != nil {
			tl := s.Template.GetMetadata().GetLabels()
			if !labels.SelectorFromSet(s.Selector).Matches(tl) {
				errs.Invalid("spec.template.metadata.labels", tl, "selector does not match template labels")
			}
		}
	}
	validateTemplate(s.Template, "spec.template", []string{"Always"}, &errs)
	if ts := s.GetTemplate().GetSpec(); ts != nil && ts.ActiveDeadlineSeconds != nil {
		errs.Forbidden("spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds is not supported for pods of a ReplicationController")
	}
	validateReplicaStatus(rc.Status, &errs)
	return errs
}

func validateJob(j *kplanev1.Job) validation.ErrorList {
	var errs validation.ErrorList
	s := j.Spec
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	if s.Parallelism != nil {
		errs.NonNegative("spec.parallelism", int64(*s.Parallelism))
	}
	if s.Completions != nil {
		errs.NonNegative("spec.completions", int64(*s.Completions))
	}
	if s.BackoffLimit != nil {
		errs.NonNegative("spec.backoffLimit", int64(*s.BackoffLimit))
	}
	if s.ActiveDeadlineSeconds != nil {
		errs.Positive("spec.activeDeadlineSeconds", *s.ActiveDeadlineSeconds)
	}
	if s.TtlSecondsAfterFinished != nil {
		errs.NonNegative("spec.ttlSecondsAfterFinished", int64(*s.TtlSecondsAfterFinished))
	}
	if oneOf(&errs, "spec.completionMode", s.CompletionMode, completionNonIndexed, completionIndexed) &&
		s.CompletionMode == completionIndexed && s.Completions == nil {
		errs.Required("spec.completions", "when completion mode is Indexed")
	}
	validateSelectorMatchesTemplate(s.Selector, s.Template, "spec", &errs)
	validateTemplate(s.Template, "spec.template", []string{"OnFailure", "Never"}, &errs)
	if st := j.Status; st != nil {
		errs.NonNegative("status.active", int64(st.Active))
		errs.NonNegative("status.succeeded", int64(st.Succeeded))
		errs.NonNegative("status.failed", int64(st.Failed))
		errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
	}
	return errs
}

// validateJobUpdate keeps what identifies the job's pods and work fixed:
// selector, template, completions and completion mode.
func validateJobUpdate(j, old *kplanev1.Job) validation.ErrorList {
	var errs validation.ErrorList
	s, o := j.GetSpec(), old.GetSpec()
	if s == nil {
		s = &kplanev1.JobSpec{}
	}
	if o == nil {
		o = &kplanev1.JobSpec{}
	}
	if !proto.Equal(s.GetSelector(), o.GetSelector()) {
		errs.Immutable("spec.selector", s.GetSelector())
	}
	if !proto.Equal(s.GetTemplate(), o.GetTemplate()) {
		errs.Immutable("spec.template", s.GetTemplate())
	}
	if (s.Completions == nil) != (o.Completions == nil) || s.GetCompletions() != o.GetCompletions() {
		errs.Immutable("spec.completions", s.GetCompletions())
	}
	if s.GetCompletionMode() != o.GetCompletionMode() {
		errs.Immutable("spec.completionMode", s.GetCompletionMode())
	}
	return errs
}
