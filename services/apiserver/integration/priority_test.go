package integration_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Pods are resolved to their class's priority at admission: a named
// class, the globalDefault class when none is named, the built-in system
// classes; a missing class or a contradicting priority is refused and
// nothing is written; only one class may be the global default.
func TestPriorityAdmission(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	never := kplanev1.PreemptNever
	pod := func(name, class string, mods ...func(*kplanev1.Pod)) (*kplanev1.Pod, error) {
		o := newPod("default", name, nil)
		o.GetPod().Spec.PriorityClassName = class
		for _, m := range mods {
			m(o.GetPod())
		}
		resp, err := c.Create(ctx, &kplanev1.CreateRequest{Object: o})
		return resp.GetObject().GetPod(), err
	}
	check := func(p *kplanev1.Pod, err error, class string, prio int32, policy string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if s := p.GetSpec(); s.GetPriorityClassName() != class || s.GetPriority() != prio || s.GetPreemptionPolicy() != policy {
			t.Fatalf("pod %s: class %q priority %d policy %q, want %q %d %q", p.GetMetadata().GetName(),
				s.GetPriorityClassName(), s.GetPriority(), s.GetPreemptionPolicy(), class, prio, policy)
		}
	}
	p, err := pod("none", "")
	check(p, err, "", 0, kplanev1.PreemptLowerPriority)

	create(t, c, kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "high"}, Value: 1000}))
	create(t, c, kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "polite"}, Value: 500, PreemptionPolicy: &never}))
	p, err = pod("high", "high")
	check(p, err, "high", 1000, kplanev1.PreemptLowerPriority)
	p, err = pod("polite", "polite")
	check(p, err, "polite", 500, kplanev1.PreemptNever)
	p, err = pod("critical", kplanev1.SystemClusterCritical)
	check(p, err, kplanev1.SystemClusterCritical, 2000000000, kplanev1.PreemptLowerPriority)
	p, err = pod("same", "high", func(p *kplanev1.Pod) { p.Spec.Priority = 1000 })
	check(p, err, "high", 1000, kplanev1.PreemptLowerPriority)

	_, err = pod("missing", "nope")
	requireCode(t, err, codes.PermissionDenied, `pods "missing" is forbidden: no PriorityClass with name nope was found`)
	_, err = pod("contradicts", "high", func(p *kplanev1.Pod) { p.Spec.Priority = 7 })
	requireCode(t, err, codes.PermissionDenied, "the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000")
	_, err = pod("policy", "high", func(p *kplanev1.Pod) { p.Spec.PreemptionPolicy = &never })
	requireCode(t, err, codes.PermissionDenied, "the string value of PreemptionPolicy (Never) must not be provided")
	for _, name := range []string{"missing", "contradicts", "policy"} {
		_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
		requireCode(t, err, codes.NotFound)
	}

	// The global default applies to pods that name no class.
	create(t, c, kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "standard"}, Value: 100, GlobalDefault: true}))
	p, err = pod("defaulted", "")
	check(p, err, "standard", 100, kplanev1.PreemptLowerPriority)
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "other"}, Value: 1, GlobalDefault: true})})
	requireCode(t, err, codes.PermissionDenied, "PriorityClass standard is already marked as default. Only one default can exist")
	hi, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "PriorityClass", Name: "high"})
	if err != nil {
		t.Fatal(err)
	}
	hi.GetObject().GetPriorityClass().GlobalDefault = true
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: hi.GetObject()})
	requireCode(t, err, codes.PermissionDenied, "Only one default can exist")
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "huge"}, Value: 2000000000})})
	requireCode(t, err, codes.InvalidArgument, "maximum allowed value of a user defined priority is 1000000000")
}
