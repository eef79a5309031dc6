package strategy

import (
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/rollout"
	"github.com/kplane/kplane/pkg/validation"
)

// Deployment defaults, as in Kubernetes' apps/v1.
const (
	defaultRevisionHistoryLimit    = 10
	defaultProgressDeadlineSeconds = 600
	defaultMaxSurge                = "25%"
	defaultMaxUnavailable          = "25%"
)

func defaultDeployment(d *kplanev1.Deployment) {
	if d.Spec == nil {
		d.Spec = &kplanev1.DeploymentSpec{}
	}
	s := d.Spec
	if s.Replicas == nil {
		s.Replicas = ptr[int32](1)
	}
	if s.Strategy == nil {
		s.Strategy = &kplanev1.DeploymentStrategy{}
	}
	if s.Strategy.Type == "" {
		s.Strategy.Type = kplanev1.DeploymentStrategyRollingUpdate
	}
	if s.Strategy.Type == kplanev1.DeploymentStrategyRollingUpdate {
		if s.Strategy.RollingUpdate == nil {
			s.Strategy.RollingUpdate = &kplanev1.RollingUpdateDeployment{}
		}
		ru := s.Strategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = kplanev1.IntOrStringFromString(defaultMaxUnavailable)
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = kplanev1.IntOrStringFromString(defaultMaxSurge)
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = ptr[int32](defaultRevisionHistoryLimit)
	}
	if s.ProgressDeadlineSeconds == nil {
		s.ProgressDeadlineSeconds = ptr[int32](defaultProgressDeadlineSeconds)
	}
	defaultTemplate(s.Template)
}

func validateDeployment(d *kplanev1.Deployment) validation.ErrorList {
	var errs validation.ErrorList
	s := d.Spec
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
	if s.ProgressDeadlineSeconds != nil {
		pd := *s.ProgressDeadlineSeconds
		if pd <= 0 {
			errs.Invalid("spec.progressDeadlineSeconds", pd, "must be greater than 0")
		} else if pd <= s.MinReadySeconds {
			errs.Invalid("spec.progressDeadlineSeconds", pd, "must be greater than minReadySeconds")
		}
	}
	validateSelectorMatchesTemplate(s.Selector, s.Template, "spec", &errs)
	validateTemplate(s.Template, "spec.template", []string{"Always"}, &errs)
	if ts := s.GetTemplate().GetSpec(); ts != nil && ts.ActiveDeadlineSeconds != nil {
		errs.Forbidden("spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds is not supported for pods of a Deployment")
	}
	validateDeploymentStrategy(s.Strategy, &errs)
	validateDeploymentStatus(d.Status, &errs)
	return errs
}

func validateDeploymentStrategy(st *kplanev1.DeploymentStrategy, errs *validation.ErrorList) {
	if st == nil {
		return
	}
	if !oneOf(errs, "spec.strategy.type", st.Type, kplanev1.DeploymentStrategyRecreate, kplanev1.DeploymentStrategyRollingUpdate) {
		return
	}
	ru := st.RollingUpdate
	if st.Type == kplanev1.DeploymentStrategyRecreate {
		if ru != nil {
			errs.Forbidden("spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'")
		}
		return
	}
	if ru == nil {
		return
	}
	const p = "spec.strategy.rollingUpdate"
	surgeOK := validateIntOrPercent(ru.MaxSurge, child(p, "maxSurge"), false, errs)
	unavOK := validateIntOrPercent(ru.MaxUnavailable, child(p, "maxUnavailable"), true, errs)
	if surgeOK && unavOK && isZero(ru.MaxSurge) && isZero(ru.MaxUnavailable) {
		errs.Invalid(child(p, "maxUnavailable"), ru.MaxUnavailable.Text(), "may not be 0 when `maxSurge` is 0")
	}
}

// validateIntOrPercent checks a non-negative number or "N%" (at most 100%
// when atMost100: more than every pod unavailable means nothing).
func validateIntOrPercent(v *kplanev1.IntOrString, path string, atMost100 bool, errs *validation.ErrorList) bool {
	if !v.IsString() {
		if v.GetIntVal() < 0 {
			errs.NonNegative(path, int64(v.GetIntVal()))
			return false
		}
		return true
	}
	n, ok := rollout.ParsePercent(v.GetStrVal())
	if !ok {
		errs.Invalid(path, v.GetStrVal(), "must be an integer or a percentage (e.g. '25%')")
		return false
	}
	if atMost100 && n > 100 {
		errs.Invalid(path, v.GetStrVal(), "must not be greater than 100%")
		return false
	}
	return true
}

func isZero(v *kplanev1.IntOrString) bool {
	if v.IsString() {
		n, _ := rollout.ParsePercent(v.GetStrVal())
		return n == 0
	}
	return v.GetIntVal() == 0
}

func validateDeploymentStatus(st *kplanev1.DeploymentStatus, errs *validation.ErrorList) {
	if st == nil {
		return
	}
	errs.NonNegative("status.observedGeneration", st.ObservedGeneration)
	errs.NonNegative("status.replicas", int64(st.Replicas))
	errs.NonNegative("status.updatedReplicas", int64(st.UpdatedReplicas))
	errs.NonNegative("status.readyReplicas", int64(st.ReadyReplicas))
	errs.NonNegative("status.availableReplicas", int64(st.AvailableReplicas))
	errs.NonNegative("status.unavailableReplicas", int64(st.UnavailableReplicas))
	if st.CollisionCount != nil {
		errs.NonNegative("status.collisionCount", int64(*st.CollisionCount))
	}
	errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
}

// validateDeploymentUpdate keeps the selector fixed (apps/v1): a changed
// selector would orphan every ReplicaSet the Deployment owns.
func validateDeploymentUpdate(d, old *kplanev1.Deployment) validation.ErrorList {
	var errs validation.ErrorList
	if !proto.Equal(d.GetSpec().GetSelector(), old.GetSpec().GetSelector()) {
		errs.Immutable("spec.selector", d.GetSpec().GetSelector())
	}
	return errs
}

// deploymentScale is the Deployment's scale subresource.
var deploymentScale = scaleFuncs[*kplanev1.Deployment]{
	read: func(d *kplanev1.Deployment) (int32, int32, *kplanev1.LabelSelector) {
		return d.GetSpec().GetReplicas(), d.GetStatus().GetReplicas(), d.GetSpec().GetSelector()
	},
	write: func(d *kplanev1.Deployment, n int32) {
		if d.Spec == nil {
			d.Spec = &kplanev1.DeploymentSpec{}
		}
		d.Spec.Replicas = &n
	},
}
