package strategy

import (
	"github.com/kplane/kplane/pkg/validation"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

var unhealthyPodEvictionPolicies = []string{kplanev1.UnhealthyPodEvictionIfHealthyBudget, kplanev1.UnhealthyPodEvictionAlwaysAllow}

// validatePodDisruptionBudget checks a policy/v1 PodDisruptionBudget:
// exactly one of minAvailable and maxUnavailable, each a non-negative
// number or a percent of at most 100%, a valid selector and a known
// unhealthyPodEvictionPolicy. Status (written by the disruption
// controller and the eviction subresource) must be non-negative.
func validatePodDisruptionBudget(pdb *kplanev1.PodDisruptionBudget) validation.ErrorList {
	var errs validation.ErrorList
	s := pdb.GetSpec()
	if s == nil {
		errs.Required("spec", "one of minAvailable or maxUnavailable must be set")
		return errs
	}
	switch {
	case s.MinAvailable != nil && s.MaxUnavailable != nil:
		errs.Invalid("spec", "minAvailable and maxUnavailable", "minAvailable and maxUnavailable cannot be both set")
	case s.MinAvailable == nil && s.MaxUnavailable == nil:
		errs.Required("spec.minAvailable", "one of minAvailable or maxUnavailable must be set")
	}
	if s.MinAvailable != nil {
		validateIntOrPercent(s.MinAvailable, "spec.minAvailable", true, &errs)
	}
	if s.MaxUnavailable != nil {
		validateIntOrPercent(s.MaxUnavailable, "spec.maxUnavailable", true, &errs)
	}
	if s.Selector != nil {
		errs.AddAll(validation.ValidateLabelSelector(s.Selector, "spec.selector"))
	}
	if s.UnhealthyPodEvictionPolicy != nil {
		oneOf(&errs, "spec.unhealthyPodEvictionPolicy", s.GetUnhealthyPodEvictionPolicy(), unhealthyPodEvictionPolicies...)
	}
	if st := pdb.GetStatus(); st != nil {
		errs.NonNegative("status.observedGeneration", st.ObservedGeneration)
		errs.NonNegative("status.disruptionsAllowed", int64(st.DisruptionsAllowed))
		errs.NonNegative("status.currentHealthy", int64(st.CurrentHealthy))
		errs.NonNegative("status.desiredHealthy", int64(st.DesiredHealthy))
		errs.NonNegative("status.expectedPods", int64(st.ExpectedPods))
		for name := range st.DisruptedPods {
			validateName(&errs, "status.disruptedPods", name, true, validation.IsDNS1123Subdomain)
		}
		errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
	}
	return errs
}
