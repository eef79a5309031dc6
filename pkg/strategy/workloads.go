package strategy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/pkg/validation"
)

// Job defaults and limits, as in Kubernetes.
const (
	defaultBackoffLimit      = 6
	maxPodFailurePolicyRules = 20
	maxSuccessPolicyRules    = 20
	maxExitCodeValues        = 255
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
// completions is a work queue); backoffLimit 6 (the largest int32 when
// backoffLimitPerIndex is set: the per-index limit governs then);
// completionMode NonIndexed; podReplacementPolicy Failed with a
// podFailurePolicy, TerminatingOrFailed otherwise; a pod condition
// pattern's status True.
//
// Selector: when it is unset and manualSelector is not true, the template
// gets the labels controller-uid=<uid> and
// batch.kubernetes.io/controller-uid=<uid> (the store assigns the uid
// before defaulting), plus job-name=<name> and
// batch.kubernetes.io/job-name=<name> when the name is a valid label
// value, and the selector requires batch.kubernetes.io/controller-uid:
// a Job never selects a namesake's pods. Defaulted without a uid (no
// store), the selector requires batch.kubernetes.io/job-name, or is the
// template's labels for a Job without a usable name; with none of those
// it stays unset and validation asks for it.
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
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = ptr[int32](math.MaxInt32)
		} else {
			s.BackoffLimit = ptr[int32](defaultBackoffLimit)
		}
	}
	if s.CompletionMode == "" {
		s.CompletionMode = kplanev1.JobCompletionNonIndexed
	}
	if s.Suspend == nil {
		s.Suspend = ptr(false)
	}
	if s.PodReplacementPolicy == nil {
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = ptr(kplanev1.JobPodReplacementFailed)
		} else {
			s.PodReplacementPolicy = ptr(kplanev1.JobPodReplacementTerminatingOrFailed)
		}
	}
	for _, r := range s.GetPodFailurePolicy().GetRules() {
		for _, pat := range r.GetOnPodConditions() {
			if pat.Status == "" {
				pat.Status = kplanev1.ConditionTrue
			}
		}
	}
	if s.Selector == nil && !s.GetManualSelector() && s.Template != nil {
		name, uid := j.GetMetadata().GetName(), j.GetMetadata().GetUid()
		t := s.Template
		nameOK := name != "" && len(validation.IsValidLabelValue(name)) == 0
		if nameOK || uid != "" {
			if t.Metadata == nil {
				t.Metadata = &kplanev1.ObjectMeta{}
			}
			if t.Metadata.Labels == nil {
				t.Metadata.Labels = map[string]string{}
			}
		}
		if nameOK {
			t.Metadata.Labels[kplanev1.LabelJobNameLegacy] = name
			t.Metadata.Labels[kplanev1.LabelJobName] = name
		}
		switch {
		case uid != "":
			t.Metadata.Labels[kplanev1.LabelControllerUIDLegacy] = uid
			t.Metadata.Labels[kplanev1.LabelControllerUID] = uid
			s.Selector = &kplanev1.LabelSelector{MatchLabels: map[string]string{kplanev1.LabelControllerUID: uid}}
		case nameOK:
			s.Selector = &kplanev1.LabelSelector{MatchLabels: map[string]string{kplanev1.LabelJobName: name}}
		default:
			if tl := t.GetMetadata().GetLabels(); len(tl) > 0 {
				s.Selector = &kplanev1.LabelSelector{MatchLabels: maps.Clone(tl)}
			}
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
	if oneOf(&errs, "spec.completionMode", s.CompletionMode, kplanev1.JobCompletionNonIndexed, kplanev1.JobCompletionIndexed) &&
		s.CompletionMode == kplanev1.JobCompletionIndexed && s.Completions == nil {
		errs.Required("spec.completions", "when completion mode is Indexed")
	}
	validateSelectorMatchesTemplate(s.Selector, s.Template, "spec", &errs)
	validateTemplate(s.Template, "spec.template", []string{kplanev1.RestartPolicyOnFailure, kplanev1.RestartPolicyNever}, &errs)
	validateJobFailureFields(s, &errs)
	validateSuccessPolicy(s, &errs)
	if st := j.Status; st != nil {
		errs.NonNegative("status.active", int64(st.Active))
		errs.NonNegative("status.succeeded", int64(st.Succeeded))
		errs.NonNegative("status.failed", int64(st.Failed))
		if st.Ready != nil {
			errs.NonNegative("status.ready", int64(*st.Ready))
		}
		if st.Terminating != nil {
			errs.NonNegative("status.terminating", int64(*st.Terminating))
		}
		errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
	}
	return errs
}

// validateJobFailureFields checks backoffLimitPerIndex, maxFailedIndexes,
// podReplacementPolicy and podFailurePolicy, and how they combine.
func validateJobFailureFields(s *kplanev1.JobSpec, errs *validation.ErrorList) {
	indexed := s.CompletionMode == kplanev1.JobCompletionIndexed
	if s.BackoffLimitPerIndex != nil {
		errs.NonNegative("spec.backoffLimitPerIndex", int64(*s.BackoffLimitPerIndex))
		if !indexed {
			errs.Forbidden("spec.backoffLimitPerIndex", "requires indexed completion mode")
		}
	}
	if s.MaxFailedIndexes != nil {
		errs.NonNegative("spec.maxFailedIndexes", int64(*s.MaxFailedIndexes))
		if s.BackoffLimitPerIndex == nil {
			errs.Required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified")
		}
		if s.Completions != nil && *s.MaxFailedIndexes > *s.Completions {
			errs.Invalid("spec.maxFailedIndexes", *s.MaxFailedIndexes, "must be less than or equal to completions")
		}
	}
	if s.PodReplacementPolicy != nil {
		if oneOf(errs, "spec.podReplacementPolicy", *s.PodReplacementPolicy,
			kplanev1.JobPodReplacementTerminatingOrFailed, kplanev1.JobPodReplacementFailed) &&
			s.PodFailurePolicy != nil && *s.PodReplacementPolicy != kplanev1.JobPodReplacementFailed {
			errs.NotSupported("spec.podReplacementPolicy", *s.PodReplacementPolicy, []string{kplanev1.JobPodReplacementFailed})
		}
	}
	fp := s.PodFailurePolicy
	if fp == nil {
		return
	}
	if rp := s.GetTemplate().GetSpec().GetRestartPolicy(); rp != "" && rp != kplanev1.RestartPolicyNever {
		errs.Invalid("spec.template.spec.restartPolicy", rp, "only \"Never\" is supported when podFailurePolicy is specified")
	}
	if len(fp.Rules) > maxPodFailurePolicyRules {
		errs.TooLong("spec.podFailurePolicy.rules", maxPodFailurePolicyRules)
	}
	actions := []string{kplanev1.PodFailurePolicyActionFailJob, kplanev1.PodFailurePolicyActionFailIndex,
		kplanev1.PodFailurePolicyActionIgnore, kplanev1.PodFailurePolicyActionCount}
	for i, r := range fp.Rules {
		rp := validation.Index("spec.podFailurePolicy.rules", i)
		if r.Action == "" {
			errs.Required(child(rp, "action"), "")
		} else if oneOf(errs, child(rp, "action"), r.Action, actions...) &&
			r.Action == kplanev1.PodFailurePolicyActionFailIndex && s.BackoffLimitPerIndex == nil {
			errs.Forbidden(child(rp, "action"), "FailIndex requires backoffLimitPerIndex")
		}
		switch {
		case r.OnExitCodes == nil && len(r.OnPodConditions) == 0:
			errs.Invalid(rp, "", "specifying one of OnExitCodes and OnPodConditions is required")
		case r.OnExitCodes != nil && len(r.OnPodConditions) > 0:
			errs.Invalid(rp, "", "specifying both OnExitCodes and OnPodConditions is not supported")
		case r.OnExitCodes != nil:
			validateOnExitCodes(r.OnExitCodes, child(rp, "onExitCodes"), errs)
		default:
			for k, pat := range r.OnPodConditions {
				pp := validation.Index(child(rp, "onPodConditions"), k)
				if pat.Type == "" {
					errs.Required(child(pp, "type"), "")
				}
				oneOf(errs, child(pp, "status"), pat.Status, kplanev1.ConditionTrue, kplanev1.ConditionFalse, kplanev1.ConditionUnknown)
			}
		}
	}
}

func validateOnExitCodes(ec *kplanev1.PodFailurePolicyOnExitCodesRequirement, path string, errs *validation.ErrorList) {
	oneOf(errs, child(path, "operator"), ec.Operator, kplanev1.PodFailurePolicyOpIn, kplanev1.PodFailurePolicyOpNotIn)
	vp := child(path, "values")
	switch {
	case len(ec.Values) == 0:
		errs.Required(vp, "at least one value is required")
	case len(ec.Values) > maxExitCodeValues:
		errs.TooLong(vp, maxExitCodeValues)
	}
	seen := map[int32]bool{}
	for i, v := range ec.Values {
		switch {
		case v == 0 && ec.Operator == kplanev1.PodFailurePolicyOpIn:
			errs.Invalid(validation.Index(vp, i), v, "must not be 0 for the In operator")
		case seen[v]:
			errs.Duplicate(validation.Index(vp, i), v)
		case i > 0 && v < ec.Values[i-1]:
			errs.Invalid(validation.Index(vp, i), v, "must be ordered")
		}
		seen[v] = true
	}
}

// validateSuccessPolicy: Indexed only; each rule names succeededIndexes
// (in range) or succeededCount (positive, at most completions) or both.
func validateSuccessPolicy(s *kplanev1.JobSpec, errs *validation.ErrorList) {
	sp := s.SuccessPolicy
	if sp == nil {
		return
	}
	if s.CompletionMode != kplanev1.JobCompletionIndexed {
		errs.Invalid("spec.successPolicy", "", "requires indexed completion mode")
		return
	}
	if len(sp.Rules) == 0 {
		errs.Required("spec.successPolicy.rules", "at least one rule is required")
	}
	if len(sp.Rules) > maxSuccessPolicyRules {
		errs.TooLong("spec.successPolicy.rules", maxSuccessPolicyRules)
	}
	completions := s.GetCompletions()
	for i, r := range sp.Rules {
		rp := validation.Index("spec.successPolicy.rules", i)
		if r.SucceededIndexes == nil && r.SucceededCount == nil {
			errs.Required(rp, "at least one of succeededCount or succeededIndexes must be specified")
			continue
		}
		n := completions
		if r.SucceededIndexes != nil {
			set, err := parseIndexList(*r.SucceededIndexes, completions)
			if err != nil {
				errs.Invalid(child(rp, "succeededIndexes"), *r.SucceededIndexes, err.Error())
				continue
			}
			n = set
		}
		if r.SucceededCount != nil {
			switch {
			case *r.SucceededCount <= 0:
				errs.Invalid(child(rp, "succeededCount"), *r.SucceededCount, "must be greater than 0")
			case *r.SucceededCount > n:
				errs.Invalid(child(rp, "succeededCount"), *r.SucceededCount,
					fmt.Sprintf("must be less than or equal to %d (the number of indexes the rule names)", n))
			}
		}
	}
}

// parseIndexList checks a "1,3-5" index list against [0, completions) and
// returns how many indexes it names.
func parseIndexList(s string, completions int32) (int32, error) {
	var n int32
	prev := int64(-1)
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.ParseInt(lo, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 32); err != nil {
				return 0, fmt.Errorf("%q is not a number", hi)
			}
		}
		switch {
		case a < 0 || b >= int64(completions):
			return 0, fmt.Errorf("index %q is out of range [0, %d)", item, completions)
		case b < a:
			return 0, fmt.Errorf("range %q is reversed", item)
		case a <= prev:
			return 0, fmt.Errorf("%q is not in increasing order", item)
		}
		prev = b
		n += int32(b - a + 1)
	}
	return n, nil
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
	if !proto.Equal(s.GetPodFailurePolicy(), o.GetPodFailurePolicy()) {
		errs.Immutable("spec.podFailurePolicy", s.GetPodFailurePolicy())
	}
	if !proto.Equal(s.GetSuccessPolicy(), o.GetSuccessPolicy()) {
		errs.Immutable("spec.successPolicy", s.GetSuccessPolicy())
	}
	if (s.BackoffLimitPerIndex == nil) != (o.BackoffLimitPerIndex == nil) || s.GetBackoffLimitPerIndex() != o.GetBackoffLimitPerIndex() {
		errs.Immutable("spec.backoffLimitPerIndex", s.GetBackoffLimitPerIndex())
	}
	return errs
}
