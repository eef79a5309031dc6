package strategy

import (
	"math"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func template(labels map[string]string, restart string) *kplanev1.PodTemplateSpec {
	spec := validPodSpec()
	spec.RestartPolicy = restart
	return &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: labels}, Spec: spec}
}

func validReplicaSet() *kplanev1.ReplicaSet {
	return &kplanev1.ReplicaSet{Metadata: meta("default", "web"), Spec: &kplanev1.ReplicaSetSpec{
		Replicas: ptr[int32](3),
		Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"},
			MatchExpressions: []*kplanev1.LabelSelectorRequirement{{Key: "tier", Operator: "In", Values: []string{"front", "edge"}}}},
		Template: template(map[string]string{"app": "web", "tier": "front"}, ""),
	}}
}

func TestReplicaSetDefaults(t *testing.T) {
	rs := defaulted(&kplanev1.ReplicaSet{Spec: &kplanev1.ReplicaSetSpec{Template: &kplanev1.PodTemplateSpec{}}})
	if rs.Spec.GetReplicas() != 1 || rs.Spec.Template.Spec.GetRestartPolicy() != "Always" ||
		rs.Spec.Template.Spec.GetTerminationGracePeriodSeconds() != 30 {
		t.Errorf("defaults: %v", rs.Spec)
	}
	if rs.Spec.Selector != nil {
		t.Error("apps/v1 ReplicaSet selector must not be defaulted")
	}
	zero := defaulted(&kplanev1.ReplicaSet{Spec: &kplanev1.ReplicaSetSpec{Replicas: ptr[int32](0)}})
	if zero.Spec.GetReplicas() != 0 {
		t.Error("explicit replicas 0 overwritten")
	}
}

func TestReplicaSetValidate(t *testing.T) {
	checkValidate(t, "ReplicaSet", validReplicaSet, []tc[*kplanev1.ReplicaSet]{
		{"negative replicas", func(rs *kplanev1.ReplicaSet) { rs.Spec.Replicas = ptr[int32](-1) },
			[]string{"spec.replicas: must be greater than or equal to 0"}},
		{"zero replicas", func(rs *kplanev1.ReplicaSet) { rs.Spec.Replicas = ptr[int32](0) }, nil},
		{"negative minReadySeconds", func(rs *kplanev1.ReplicaSet) { rs.Spec.MinReadySeconds = -1 },
			[]string{"spec.minReadySeconds: must be greater than or equal to 0"}},
		{"no selector", func(rs *kplanev1.ReplicaSet) { rs.Spec.Selector = nil }, []string{"spec.selector: Required value"}},
		{"empty selector", func(rs *kplanev1.ReplicaSet) { rs.Spec.Selector = &kplanev1.LabelSelector{} },
			[]string{"spec.selector: Invalid value: {}: empty selector is invalid: it would select every pod in the namespace"}},
		{"selector does not match", func(rs *kplanev1.ReplicaSet) { rs.Spec.Selector.MatchLabels["app"] = "db" },
			[]string{`spec.template.metadata.labels: Invalid value: {"app":"web","tier":"front"}: selector does not match template labels`}},
		{"expression does not match", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Metadata.Labels["tier"] = "back" },
			[]string{`spec.template.metadata.labels: Invalid value: {"app":"web","tier":"back"}: selector does not match template labels`}},
		{"bad selector operator", func(rs *kplanev1.ReplicaSet) { rs.Spec.Selector.MatchExpressions[0].Operator = "Equals" },
			[]string{`spec.selector.matchExpressions[0].operator: Unsupported value: "Equals": supported values: "In", "NotIn", "Exists", "DoesNotExist"`}},
		{"bad selector key", func(rs *kplanev1.ReplicaSet) { rs.Spec.Selector.MatchLabels["-x"] = "y" },
			[]string{`spec.selector.matchLabels: Invalid value: "-x": ...`}},
		{"no template", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template = nil }, []string{"spec.template: Required value"}},
		{"template restart policy", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Spec.RestartPolicy = "Never" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`}},
		{"template image", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Spec.Containers[0].Image = "" },
			[]string{"spec.template.spec.containers[0].image: Required value"}},
		{"template containers", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Spec.Containers = nil },
			[]string{"spec.template.spec.containers: Required value"}},
		{"template label value", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Metadata.Labels["x"] = "-" },
			[]string{`spec.template.metadata.labels["x"]: Invalid value: "-": ...`}},
		{"template deadline", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Spec.ActiveDeadlineSeconds = ptr[int64](5) },
			[]string{"spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds is not supported for pods of a ReplicaSet"}},
		{"negative status", func(rs *kplanev1.ReplicaSet) { rs.Status = &kplanev1.ReplicaSetStatus{ReadyReplicas: -1} },
			[]string{"status.readyReplicas: must be greater than or equal to 0"}},
		{"no spec", func(rs *kplanev1.ReplicaSet) { rs.Spec = nil },
			[]string{"spec.selector: Required value", "spec.template: Required value"}},
	})
}

func TestReplicaSetUpdate(t *testing.T) {
	checkUpdate(t, "ReplicaSet", validReplicaSet, []utc[*kplanev1.ReplicaSet]{
		{"scale", func(rs *kplanev1.ReplicaSet) { rs.Spec.Replicas = ptr[int32](10) }, nil},
		{"new image", func(rs *kplanev1.ReplicaSet) { rs.Spec.Template.Spec.Containers[0].Image = "nginx:2" }, nil},
		{"selector", func(rs *kplanev1.ReplicaSet) {
			rs.Spec.Selector.MatchExpressions = nil
		}, []string{`spec.selector: Invalid value: {"matchLabels":{"app":"web"}}: field is immutable`}},
	})
}

func validRC() *kplanev1.ReplicationController {
	return &kplanev1.ReplicationController{Metadata: meta("default", "web"), Spec: &kplanev1.ReplicationControllerSpec{
		Replicas: ptr[int32](2),
		Selector: map[string]string{"app": "web"},
		Template: template(map[string]string{"app": "web", "v": "1"}, "Always"),
	}}
}

func TestReplicationControllerDefaults(t *testing.T) {
	rc := defaulted(&kplanev1.ReplicationController{Metadata: meta("default", "web"), Spec: &kplanev1.ReplicationControllerSpec{
		Template: template(map[string]string{"app": "web"}, "")}})
	if rc.Spec.GetReplicas() != 1 || rc.Spec.Selector["app"] != "web" || len(rc.Spec.Selector) != 1 ||
		rc.Metadata.Labels["app"] != "web" || rc.Spec.Template.Spec.RestartPolicy != "Always" {
		t.Errorf("defaults: %v %v", rc.Metadata, rc.Spec)
	}
	// Set selector and labels are kept.
	rc = defaulted(&kplanev1.ReplicationController{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"own": "x"}},
		Spec: &kplanev1.ReplicationControllerSpec{Selector: map[string]string{"app": "web"},
			Template: template(map[string]string{"app": "web", "v": "2"}, "")}})
	if len(rc.Spec.Selector) != 1 || rc.Metadata.Labels["own"] != "x" || len(rc.Metadata.Labels) != 1 {
		t.Errorf("explicit values overwritten: %v %v", rc.Metadata, rc.Spec)
	}
}

func TestReplicationControllerValidate(t *testing.T) {
	checkValidate(t, "ReplicationController", validRC, []tc[*kplanev1.ReplicationController]{
		{"negative replicas", func(rc *kplanev1.ReplicationController) { rc.Spec.Replicas = ptr[int32](-5) },
			[]string{"spec.replicas: must be greater than or equal to 0"}},
		{"selector defaulted from template", func(rc *kplanev1.ReplicationController) { rc.Spec.Selector = nil }, nil},
		{"no selector and no labels", func(rc *kplanev1.ReplicationController) {
			rc.Spec.Selector = nil
			rc.Spec.Template.Metadata = nil
		}, []string{"spec.selector: Required value"}},
		{"mismatch", func(rc *kplanev1.ReplicationController) { rc.Spec.Selector["app"] = "db" },
			[]string{`spec.template.metadata.labels: Invalid value: {"app":"web","v":"1"}: selector does not match template labels`}},
		{"bad selector", func(rc *kplanev1.ReplicationController) { rc.Spec.Selector["app"] = "a b" },
			[]string{`spec.selector["app"]: Invalid value: "a b": ...`}},
		{"restart policy", func(rc *kplanev1.ReplicationController) { rc.Spec.Template.Spec.RestartPolicy = "OnFailure" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"`}},
		{"no template", func(rc *kplanev1.ReplicationController) { rc.Spec.Template = nil }, []string{"spec.template: Required value"}},
	})
	// A ReplicationController's selector may change (unlike a ReplicaSet's).
	checkUpdate(t, "ReplicationController", validRC, []utc[*kplanev1.ReplicationController]{
		{"selector", func(rc *kplanev1.ReplicationController) { rc.Spec.Selector["v"] = "1" }, nil},
	})
}

func validJob() *kplanev1.Job {
	return &kplanev1.Job{Metadata: meta("default", "pi"), Spec: &kplanev1.JobSpec{
		Completions: ptr[int32](5),
		Parallelism: ptr[int32](2),
		Selector:    &kplanev1.LabelSelector{MatchLabels: map[string]string{"job": "pi"}},
		Template:    template(map[string]string{"job": "pi"}, "Never"),
	}}
}

func TestJobDefaults(t *testing.T) {
	j := defaulted(&kplanev1.Job{Metadata: meta("default", "pi"), Spec: &kplanev1.JobSpec{
		Template: template(map[string]string{"app": "pi"}, "OnFailure")}})
	s := j.Spec
	if s.GetCompletions() != 1 || s.GetParallelism() != 1 || s.GetBackoffLimit() != 6 || s.CompletionMode != "NonIndexed" ||
		s.Suspend == nil || *s.Suspend {
		t.Errorf("defaults: %v", s)
	}
	tl := s.Template.Metadata.Labels
	if tl["job-name"] != "pi" || tl["batch.kubernetes.io/job-name"] != "pi" || tl["app"] != "pi" {
		t.Errorf("template labels: %v", tl)
	}
	if len(s.Selector.MatchLabels) != 1 || s.Selector.MatchLabels["batch.kubernetes.io/job-name"] != "pi" {
		t.Errorf("selector: %v", s.Selector)
	}
	if errs := For("Job").Validate(kplanev1.MustWrap(j)); len(errs) != 0 {
		t.Errorf("defaulted job invalid: %v", errs)
	}
	// Parallelism without completions is a work queue: completions stay unset.
	j = defaulted(&kplanev1.Job{Spec: &kplanev1.JobSpec{Parallelism: ptr[int32](3)}})
	if j.Spec.Completions != nil || j.Spec.GetParallelism() != 3 {
		t.Errorf("work queue defaults: %v", j.Spec)
	}
	// Completions without parallelism: parallelism 1.
	j = defaulted(&kplanev1.Job{Spec: &kplanev1.JobSpec{Completions: ptr[int32](4)}})
	if j.Spec.GetCompletions() != 4 || j.Spec.GetParallelism() != 1 {
		t.Errorf("fixed completion defaults: %v", j.Spec)
	}
	// Without a name the selector falls back to the template's labels.
	j = defaulted(&kplanev1.Job{Metadata: &kplanev1.ObjectMeta{GenerateName: "pi-"}, Spec: &kplanev1.JobSpec{
		Template: template(map[string]string{"app": "pi"}, "Never")}})
	if j.Spec.Selector.GetMatchLabels()["app"] != "pi" || len(j.Spec.Template.Metadata.Labels) != 1 {
		t.Errorf("generateName fallback: %v", j.Spec.Selector)
	}
	// manualSelector: nothing is generated.
	j = defaulted(&kplanev1.Job{Metadata: meta("d", "pi"), Spec: &kplanev1.JobSpec{ManualSelector: ptr(true),
		Template: template(map[string]string{"app": "pi"}, "Never")}})
	if j.Spec.Selector != nil {
		t.Errorf("manual selector generated: %v", j.Spec.Selector)
	}
}

func ignore42() *kplanev1.PodFailurePolicy {
	return &kplanev1.PodFailurePolicy{Rules: []*kplanev1.PodFailurePolicyRule{{Action: "Ignore",
		OnExitCodes: &kplanev1.PodFailurePolicyOnExitCodesRequirement{Operator: "In", Values: []int32{42}}}}}
}

func TestJobDefaultsWithUID(t *testing.T) {
	m := meta("default", "pi")
	m.Uid = "1234-5678"
	j := defaulted(&kplanev1.Job{Metadata: m, Spec: &kplanev1.JobSpec{
		Template: template(map[string]string{"app": "pi"}, "Never"), PodFailurePolicy: ignore42()}})
	s := j.Spec
	tl := s.Template.Metadata.Labels
	if tl["controller-uid"] != "1234-5678" || tl["batch.kubernetes.io/controller-uid"] != "1234-5678" || tl["batch.kubernetes.io/job-name"] != "pi" {
		t.Errorf("template labels: %v", tl)
	}
	if len(s.Selector.MatchLabels) != 1 || s.Selector.MatchLabels["batch.kubernetes.io/controller-uid"] != "1234-5678" {
		t.Errorf("selector: %v", s.Selector)
	}
	if s.GetPodReplacementPolicy() != "Failed" {
		t.Errorf("podReplacementPolicy with a failure policy = %q, want Failed", s.GetPodReplacementPolicy())
	}
	j = defaulted(&kplanev1.Job{Metadata: meta("d", "pi"), Spec: &kplanev1.JobSpec{CompletionMode: "Indexed", Completions: ptr[int32](3),
		BackoffLimitPerIndex: ptr[int32](1), Template: template(nil, "Never")}})
	if j.Spec.GetBackoffLimit() != math.MaxInt32 || j.Spec.GetPodReplacementPolicy() != "TerminatingOrFailed" {
		t.Errorf("per-index defaults: backoffLimit %d, podReplacementPolicy %q", j.Spec.GetBackoffLimit(), j.Spec.GetPodReplacementPolicy())
	}
}

func TestJobValidate(t *testing.T) {
	checkValidate(t, "Job", validJob, []tc[*kplanev1.Job]{
		{"restart policy Always", func(j *kplanev1.Job) { j.Spec.Template.Spec.RestartPolicy = "Always" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"`}},
		{"restart policy unset", func(j *kplanev1.Job) { j.Spec.Template.Spec.RestartPolicy = "" },
			[]string{`spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"`}},
		{"OnFailure", func(j *kplanev1.Job) { j.Spec.Template.Spec.RestartPolicy = "OnFailure" }, nil},
		{"negative parallelism", func(j *kplanev1.Job) { j.Spec.Parallelism = ptr[int32](-1) },
			[]string{"spec.parallelism: must be greater than or equal to 0"}},
		{"negative completions", func(j *kplanev1.Job) { j.Spec.Completions = ptr[int32](-1) },
			[]string{"spec.completions: must be greater than or equal to 0"}},
		{"negative backoff", func(j *kplanev1.Job) { j.Spec.BackoffLimit = ptr[int32](-1) },
			[]string{"spec.backoffLimit: must be greater than or equal to 0"}},
		{"zero deadline", func(j *kplanev1.Job) { j.Spec.ActiveDeadlineSeconds = ptr[int64](0) },
			[]string{"spec.activeDeadlineSeconds: must be greater than 0"}},
		{"negative ttl", func(j *kplanev1.Job) { j.Spec.TtlSecondsAfterFinished = ptr[int32](-1) },
			[]string{"spec.ttlSecondsAfterFinished: must be greater than or equal to 0"}},
		{"completion mode", func(j *kplanev1.Job) { j.Spec.CompletionMode = "Sometimes" },
			[]string{`spec.completionMode: Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"`}},
		{"indexed without completions", func(j *kplanev1.Job) { j.Spec.CompletionMode = "Indexed"; j.Spec.Completions = nil },
			[]string{"spec.completions: Required value: when completion mode is Indexed"}},
		{"manual selector missing", func(j *kplanev1.Job) { j.Spec.Selector = nil; j.Spec.ManualSelector = ptr(true) },
			[]string{"spec.selector: Required value"}},
		{"selector mismatch", func(j *kplanev1.Job) { j.Spec.Selector.MatchLabels["job"] = "other" },
			[]string{`spec.template.metadata.labels: Invalid value: {"job":"pi"}: selector does not match template labels`}},
		{"no template", func(j *kplanev1.Job) { j.Spec.Template = nil }, []string{"spec.template: Required value"}},
		{"negative status", func(j *kplanev1.Job) { j.Status = &kplanev1.JobStatus{Failed: -1} },
			[]string{"status.failed: must be greater than or equal to 0"}},
		{"negative terminating", func(j *kplanev1.Job) { j.Status = &kplanev1.JobStatus{Terminating: ptr[int32](-1)} },
			[]string{"status.terminating: must be greater than or equal to 0"}},
		{"per-index limit on NonIndexed", func(j *kplanev1.Job) { j.Spec.BackoffLimitPerIndex = ptr[int32](1) },
			[]string{"spec.backoffLimitPerIndex: Forbidden: requires indexed completion mode"}},
		{"negative per-index limit", func(j *kplanev1.Job) { j.Spec.CompletionMode = "Indexed"; j.Spec.BackoffLimitPerIndex = ptr[int32](-1) },
			[]string{"spec.backoffLimitPerIndex: must be greater than or equal to 0"}},
		{"maxFailedIndexes without per-index limit", func(j *kplanev1.Job) { j.Spec.CompletionMode = "Indexed"; j.Spec.MaxFailedIndexes = ptr[int32](1) },
			[]string{"spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"}},
		{"maxFailedIndexes above completions", func(j *kplanev1.Job) {
			j.Spec.CompletionMode = "Indexed"
			j.Spec.BackoffLimitPerIndex = ptr[int32](1)
			j.Spec.MaxFailedIndexes = ptr[int32](6)
		}, []string{"spec.maxFailedIndexes: Invalid value: 6: must be less than or equal to completions"}},
		{"replacement policy", func(j *kplanev1.Job) { j.Spec.PodReplacementPolicy = ptr("Sometimes") },
			[]string{`spec.podReplacementPolicy: Unsupported value: "Sometimes": supported values: "TerminatingOrFailed", "Failed"`}},
		{"failure policy with TerminatingOrFailed", func(j *kplanev1.Job) {
			j.Spec.PodReplacementPolicy = ptr("TerminatingOrFailed")
			j.Spec.PodFailurePolicy = ignore42()
		}, []string{`spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"`}},
		{"failure policy ok", func(j *kplanev1.Job) { j.Spec.PodFailurePolicy = ignore42() }, nil},
		{"failure policy with OnFailure", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.Template.Spec.RestartPolicy = "OnFailure"
		}, []string{`spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`}},
		{"failure policy action", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.PodFailurePolicy.Rules[0].Action = "Retry"
		},
			[]string{`spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: "FailJob", "FailIndex", "Ignore", "Count"`}},
		{"FailIndex without per-index limit", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.PodFailurePolicy.Rules[0].Action = "FailIndex"
		},
			[]string{"spec.podFailurePolicy.rules[0].action: Forbidden: FailIndex requires backoffLimitPerIndex"}},
		{"exit code 0 with In", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.PodFailurePolicy.Rules[0].OnExitCodes.Values = []int32{0}
		},
			[]string{"spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator"}},
		{"exit code operator", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.PodFailurePolicy.Rules[0].OnExitCodes.Operator = "Is"
		},
			[]string{`spec.podFailurePolicy.rules[0].onExitCodes.operator: Unsupported value: "Is": supported values: "In", "NotIn"`}},
		{"rule without requirement", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.PodFailurePolicy.Rules[0].OnExitCodes = nil
		},
			[]string{`spec.podFailurePolicy.rules[0]: Invalid value: "": specifying one of OnExitCodes and OnPodConditions is required`}},
		{"condition without type", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = &kplanev1.PodFailurePolicy{Rules: []*kplanev1.PodFailurePolicyRule{{Action: "Ignore",
				OnPodConditions: []*kplanev1.PodFailurePolicyOnPodConditionsPattern{{Status: "True"}}}}}
		}, []string{"spec.podFailurePolicy.rules[0].onPodConditions[0].type: Required value"}},
		{"success policy on NonIndexed", func(j *kplanev1.Job) {
			j.Spec.SuccessPolicy = &kplanev1.SuccessPolicy{Rules: []*kplanev1.SuccessPolicyRule{{SucceededCount: ptr[int32](1)}}}
		}, []string{`spec.successPolicy: Invalid value: "": requires indexed completion mode`}},
		{"success policy index out of range", func(j *kplanev1.Job) {
			j.Spec.CompletionMode = "Indexed"
			j.Spec.SuccessPolicy = &kplanev1.SuccessPolicy{Rules: []*kplanev1.SuccessPolicyRule{{SucceededIndexes: ptr("0,2-7")}}}
		}, []string{`spec.successPolicy.rules[0].succeededIndexes: Invalid value: "0,2-7": index "2-7" is out of range [0, 5)`}},
		{"success policy count too high", func(j *kplanev1.Job) {
			j.Spec.CompletionMode = "Indexed"
			j.Spec.SuccessPolicy = &kplanev1.SuccessPolicy{Rules: []*kplanev1.SuccessPolicyRule{{SucceededIndexes: ptr("1-2"), SucceededCount: ptr[int32](3)}}}
		}, []string{"spec.successPolicy.rules[0].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes the rule names)"}},
		{"success policy ok", func(j *kplanev1.Job) {
			j.Spec.CompletionMode = "Indexed"
			j.Spec.SuccessPolicy = &kplanev1.SuccessPolicy{Rules: []*kplanev1.SuccessPolicyRule{{SucceededIndexes: ptr("0,2-4"), SucceededCount: ptr[int32](2)}}}
		}, nil},
	})
}

func TestJobUpdate(t *testing.T) {
	checkUpdate(t, "Job", validJob, []utc[*kplanev1.Job]{
		{"pod failure policy", func(j *kplanev1.Job) {
			j.Spec.PodFailurePolicy = ignore42()
			j.Spec.PodReplacementPolicy = ptr("Failed")
		},
			[]string{`spec.podFailurePolicy: Invalid value: {"rules":[{"action":"Ignore","onExitCodes":{"operator":"In","values":[42]}}]}: field is immutable`}},
		{"parallelism", func(j *kplanev1.Job) { j.Spec.Parallelism = ptr[int32](4) }, nil},
		{"suspend", func(j *kplanev1.Job) { j.Spec.Suspend = ptr(true) }, nil},
		// The value repeated back is the template, shortened.
		{"template", func(j *kplanev1.Job) { j.Spec.Template.Spec.Containers[0].Image = "x:2" },
			[]string{"spec.template: Invalid value: {..."}},
		{"selector", func(j *kplanev1.Job) {
			j.Spec.Selector.MatchExpressions = []*kplanev1.LabelSelectorRequirement{{Key: "job", Operator: "Exists"}}
		}, []string{`spec.selector: Invalid value: {"matchLabels":{"job":"pi"},"matchExpressions":[{"key":"job","operator":"Exists"}]}: field is immutable`}},
		{"completions", func(j *kplanev1.Job) { j.Spec.Completions = ptr[int32](6) },
			[]string{"spec.completions: Invalid value: 6: field is immutable"}},
		{"completion mode", func(j *kplanev1.Job) { j.Spec.CompletionMode = "Indexed" },
			[]string{`spec.completionMode: Invalid value: "Indexed": field is immutable`}},
	})
}
