package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validDeployment() *kplanev1.Deployment {
	return &kplanev1.Deployment{Metadata: meta("default", "web"), Spec: &kplanev1.DeploymentSpec{
		Replicas: ptr[int32](3),
		Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: template(map[string]string{"app": "web"}, ""),
	}}
}

func TestDeploymentDefaults(t *testing.T) {
	d := defaulted(&kplanev1.Deployment{Spec: &kplanev1.DeploymentSpec{Template: &kplanev1.PodTemplateSpec{}}})
	s := d.Spec
	ru := s.GetStrategy().GetRollingUpdate()
	if s.GetReplicas() != 1 || s.Strategy.Type != "RollingUpdate" || ru.GetMaxSurge().Text() != "25%" ||
		ru.GetMaxUnavailable().Text() != "25%" || s.GetRevisionHistoryLimit() != 10 || s.GetProgressDeadlineSeconds() != 600 ||
		s.Template.Spec.GetRestartPolicy() != "Always" {
		t.Errorf("defaults: %v", s)
	}
	re := defaulted(&kplanev1.Deployment{Spec: &kplanev1.DeploymentSpec{Strategy: &kplanev1.DeploymentStrategy{Type: "Recreate"},
		Replicas: ptr[int32](0), RevisionHistoryLimit: ptr[int32](0)}})
	if re.Spec.Strategy.RollingUpdate != nil || re.Spec.GetReplicas() != 0 || re.Spec.GetRevisionHistoryLimit() != 0 {
		t.Errorf("Recreate defaults: %v", re.Spec)
	}
	half := defaulted(&kplanev1.Deployment{Spec: &kplanev1.DeploymentSpec{Strategy: &kplanev1.DeploymentStrategy{
		RollingUpdate: &kplanev1.RollingUpdateDeployment{MaxSurge: kplanev1.IntOrStringFromInt32(0)}}}})
	if half.Spec.Strategy.RollingUpdate.MaxSurge.Text() != "0" || half.Spec.Strategy.RollingUpdate.MaxUnavailable.Text() != "25%" {
		t.Errorf("partial rollingUpdate defaults: %v", half.Spec.Strategy)
	}
}

func rolling(surge, unav *kplanev1.IntOrString) *kplanev1.DeploymentStrategy {
	return &kplanev1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDeployment{MaxSurge: surge, MaxUnavailable: unav}}
}

func TestDeploymentValidate(t *testing.T) {
	i, s := kplanev1.IntOrStringFromInt32, kplanev1.IntOrStringFromString
	checkValidate(t, "Deployment", validDeployment, []tc[*kplanev1.Deployment]{
		{"negative replicas", func(d *kplanev1.Deployment) { d.Spec.Replicas = ptr[int32](-1) },
			[]string{"spec.replicas: must be greater than or equal to 0"}},
		{"no selector", func(d *kplanev1.Deployment) { d.Spec.Selector = nil }, []string{"spec.selector: Required value"}},
		{"selector does not match", func(d *kplanev1.Deployment) { d.Spec.Selector.MatchLabels["app"] = "db" },
			[]string{`spec.template.metadata.labels: Invalid value: {"app":"web"}: selector does not match template labels`}},
		{"no template", func(d *kplanev1.Deployment) { d.Spec.Template = nil }, []string{"spec.template: Required value"}},
		{"template restart policy", func(d *kplanev1.Deployment) { d.Spec.Template.Spec.RestartPolicy = "OnFailure" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"`}},
		{"bad strategy type", func(d *kplanev1.Deployment) { d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "Rolling"} },
			[]string{`spec.strategy.type: Unsupported value: "Rolling": supported values: "Recreate", "RollingUpdate"`}},
		{"recreate with rollingUpdate", func(d *kplanev1.Deployment) {
			d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "Recreate", RollingUpdate: &kplanev1.RollingUpdateDeployment{}}
		}, []string{"spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"}},
		{"recreate", func(d *kplanev1.Deployment) { d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "Recreate"} }, nil},
		{"both zero", func(d *kplanev1.Deployment) { d.Spec.Strategy = rolling(i(0), s("0%")) },
			[]string{"spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0"}},
		{"surge zero", func(d *kplanev1.Deployment) { d.Spec.Strategy = rolling(i(0), i(1)) }, nil},
		{"surge above 100% is fine", func(d *kplanev1.Deployment) { d.Spec.Strategy = rolling(s("200%"), i(0)) }, nil},
		{"unavailable above 100%", func(d *kplanev1.Deployment) { d.Spec.Strategy = rolling(i(1), s("101%")) },
			[]string{`spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "101%": must not be greater than 100%`}},
		{"negative surge", func(d *kplanev1.Deployment) { d.Spec.Strategy = rolling(i(-1), i(1)) },
			[]string{"spec.strategy.rollingUpdate.maxSurge: must be greater than or equal to 0"}},
		{"not a percent", func(d *kplanev1.Deployment) { d.Spec.Strategy = rolling(s("25"), i(1)) },
			[]string{`spec.strategy.rollingUpdate.maxSurge: Invalid value: "25": must be an integer or a percentage (e.g. '25%')`}},
		{"negative history", func(d *kplanev1.Deployment) { d.Spec.RevisionHistoryLimit = ptr[int32](-1) },
			[]string{"spec.revisionHistoryLimit: must be greater than or equal to 0"}},
		{"deadline not above minReadySeconds", func(d *kplanev1.Deployment) {
			d.Spec.MinReadySeconds = 10
			d.Spec.ProgressDeadlineSeconds = ptr[int32](10)
		}, []string{"spec.progressDeadlineSeconds: Invalid value: 10: must be greater than minReadySeconds"}},
		{"zero deadline", func(d *kplanev1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr[int32](0) },
			[]string{"spec.progressDeadlineSeconds: Invalid value: 0: must be greater than 0"}},
		{"negative status", func(d *kplanev1.Deployment) { d.Status = &kplanev1.DeploymentStatus{UpdatedReplicas: -1} },
			[]string{"status.updatedReplicas: must be greater than or equal to 0"}},
		{"no spec", func(d *kplanev1.Deployment) { d.Spec = nil }, []string{"spec.selector: Required value", "spec.template: Required value"}},
	})
}

func TestDeploymentUpdate(t *testing.T) {
	checkUpdate(t, "Deployment", validDeployment, []utc[*kplanev1.Deployment]{
		{"image", func(d *kplanev1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "web:2" }, nil},
		{"selector", func(d *kplanev1.Deployment) {
			d.Spec.Selector.MatchLabels["x"] = "y"
			d.Spec.Template.Metadata.Labels["x"] = "y"
		}, []string{`spec.selector: Invalid value: {"matchLabels":{"app":"web","x":"y"}}: field is immutable`}},
	})
}

func TestScale(t *testing.T) {
	for _, c := range []struct {
		obj      *kplanev1.Object
		selector string
	}{
		{kplanev1.MustWrap(validDeployment()), "app=web"},
		{kplanev1.MustWrap(validReplicaSet()), "app=web,tier in (edge,front)"},
		{kplanev1.MustWrap(validRC()), "app=web"},
	} {
		kind := c.obj.KindName()
		sc, ok := For(kind).(Scaler)
		if !ok {
			t.Fatalf("%s has no scale subresource", kind)
		}
		sc.SetReplicas(c.obj, 7)
		s, err := sc.Scale(c.obj)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if s.Spec.Replicas != 7 || s.Status.Selector != c.selector || s.Metadata.Name != c.obj.Meta().Name {
			t.Errorf("%s scale: %v", kind, s)
		}
	}
	for _, k := range []string{"Pod", "Job", "Service"} {
		if _, ok := For(k).(Scaler); ok {
			t.Errorf("%s has a scale subresource", k)
		}
	}
}
