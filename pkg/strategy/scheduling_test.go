package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validPriorityClass() *kplanev1.PriorityClass {
	return &kplanev1.PriorityClass{Metadata: meta("", "high-priority"), Value: 1000000, Description: "for the important things"}
}

func TestPriorityClass(t *testing.T) {
	if pc := defaulted(validPriorityClass()); pc.GetPreemptionPolicy() != "PreemptLowerPriority" {
		t.Errorf("default preemptionPolicy = %q", pc.GetPreemptionPolicy())
	}
	checkValidate(t, "PriorityClass", validPriorityClass, []tc[*kplanev1.PriorityClass]{
		{"Never", func(p *kplanev1.PriorityClass) { p.PreemptionPolicy = ptr("Never") }, nil},
		{"negative is fine", func(p *kplanev1.PriorityClass) { p.Value = -5 }, nil},
		{"too high", func(p *kplanev1.PriorityClass) { p.Value = 1000000001 },
			[]string{"value: Forbidden: maximum allowed value of a user defined priority is 1000000000"}},
		{"system prefix", func(p *kplanev1.PriorityClass) { p.Metadata.Name = "system-mine" },
			[]string{"metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only"}},
		{"policy", func(p *kplanev1.PriorityClass) { p.PreemptionPolicy = ptr("Sometimes") },
			[]string{`preemptionPolicy: Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never"`}},
	})
	checkUpdate(t, "PriorityClass", validPriorityClass, []utc[*kplanev1.PriorityClass]{
		{"description", func(p *kplanev1.PriorityClass) { p.Description = "changed" }, nil},
		{"globalDefault", func(p *kplanev1.PriorityClass) { p.GlobalDefault = true }, nil},
		{"value", func(p *kplanev1.PriorityClass) { p.Value = 5 }, []string{"value: Forbidden: may not be changed in an update."}},
		{"policy", func(p *kplanev1.PriorityClass) { p.PreemptionPolicy = ptr("Never") }, []string{"preemptionPolicy: Forbidden: may not be changed in an update."}},
	})
}
