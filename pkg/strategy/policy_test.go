package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validPDB() *kplanev1.PodDisruptionBudget {
	return &kplanev1.PodDisruptionBudget{Metadata: meta("d", "web"), Spec: &kplanev1.PodDisruptionBudgetSpec{
		MinAvailable: kplanev1.IntOrStringFromInt32(2),
		Selector:     &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}}
}

func TestPodDisruptionBudget(t *testing.T) {
	checkValidate(t, "PodDisruptionBudget", validPDB, []tc[*kplanev1.PodDisruptionBudget]{
		{"maxUnavailable instead", func(p *kplanev1.PodDisruptionBudget) {
			p.Spec.MinAvailable, p.Spec.MaxUnavailable = nil, kplanev1.IntOrStringFromString("25%")
		}, nil},
		{"percent", func(p *kplanev1.PodDisruptionBudget) { p.Spec.MinAvailable = kplanev1.IntOrStringFromString("100%") }, nil},
		{"empty selector selects all", func(p *kplanev1.PodDisruptionBudget) { p.Spec.Selector = &kplanev1.LabelSelector{} }, nil},
		{"AlwaysAllow", func(p *kplanev1.PodDisruptionBudget) { p.Spec.UnhealthyPodEvictionPolicy = ptr("AlwaysAllow") }, nil},
		{"no spec", func(p *kplanev1.PodDisruptionBudget) { p.Spec = nil },
			[]string{"spec: Required value: one of minAvailable or maxUnavailable must be set"}},
		{"neither", func(p *kplanev1.PodDisruptionBudget) { p.Spec.MinAvailable = nil },
			[]string{"spec.minAvailable: Required value: one of minAvailable or maxUnavailable must be set"}},
		{"both", func(p *kplanev1.PodDisruptionBudget) { p.Spec.MaxUnavailable = kplanev1.IntOrStringFromInt32(1) },
			[]string{`spec: Invalid value: "minAvailable and maxUnavailable": minAvailable and maxUnavailable cannot be both set`}},
		{"negative", func(p *kplanev1.PodDisruptionBudget) { p.Spec.MinAvailable = kplanev1.IntOrStringFromInt32(-1) },
			[]string{"spec.minAvailable: must be greater than or equal to 0"}},
		{"bad percent", func(p *kplanev1.PodDisruptionBudget) { p.Spec.MinAvailable = kplanev1.IntOrStringFromString("half") },
			[]string{`spec.minAvailable: Invalid value: "half": must be an integer or a percentage (e.g. '25%')`}},
		{"over 100%", func(p *kplanev1.PodDisruptionBudget) {
			p.Spec.MinAvailable, p.Spec.MaxUnavailable = nil, kplanev1.IntOrStringFromString("150%")
		}, []string{`spec.maxUnavailable: Invalid value: "150%": must not be greater than 100%`}},
		{"selector", func(p *kplanev1.PodDisruptionBudget) {
			p.Spec.Selector.MatchExpressions = []*kplanev1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}
		}, []string{"spec.selector.matchExpressions[0].operator: ..."}},
		{"policy", func(p *kplanev1.PodDisruptionBudget) { p.Spec.UnhealthyPodEvictionPolicy = ptr("Sometimes") },
			[]string{`spec.unhealthyPodEvictionPolicy: Unsupported value: "Sometimes": supported values: "IfHealthyBudget", "AlwaysAllow"`}},
		{"status", func(p *kplanev1.PodDisruptionBudget) {
			p.Status = &kplanev1.PodDisruptionBudgetStatus{DisruptionsAllowed: -1}
		}, []string{"status.disruptionsAllowed: must be greater than or equal to 0"}},
	})
}
