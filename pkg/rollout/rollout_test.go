package rollout

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func pct(s string) *kplanev1.IntOrString { return kplanev1.IntOrStringFromString(s) }
func num(v int32) *kplanev1.IntOrString  { return kplanev1.IntOrStringFromInt32(v) }

func TestFenceposts(t *testing.T) {
	for _, c := range []struct {
		name                string
		surge, unavailable  *kplanev1.IntOrString
		replicas            int32
		wantSurge, wantUnav int32
		wantErr             string
	}{
		{"defaults of 10", pct("25%"), pct("25%"), 10, 3, 2, ""},
		{"defaults of 4", pct("25%"), pct("25%"), 4, 1, 1, ""},
		{"defaults of 1: surge rounds up, unavailable down", pct("25%"), pct("25%"), 1, 1, 0, ""},
		{"defaults of 1000", pct("25%"), pct("25%"), 1000, 250, 250, ""},
		{"numbers", num(2), num(1), 10, 2, 1, ""},
		{"numbers above replicas are kept", num(20), num(15), 10, 20, 15, ""},
		{"percent of 0 replicas", pct("25%"), pct("25%"), 0, 0, 1, ""},
		{"0% surge, 10% of 5 rounds down to 0: unavailable becomes 1", pct("0%"), pct("10%"), 5, 0, 1, ""},
		{"100% surge", pct("100%"), num(0), 7, 7, 0, ""},
		{"33% of 10", pct("33%"), pct("33%"), 10, 4, 3, ""},
		{"nil values are 0, then unavailable 1", nil, nil, 3, 0, 1, ""},
		{"bad surge", pct("x%"), num(1), 10, 0, 0, `maxSurge: invalid value "x%": must be an integer or a percentage (e.g. '25%')`},
		{"bad unavailable", num(1), pct("12"), 10, 0, 0, `maxUnavailable: invalid value "12": must be an integer or a percentage (e.g. '25%')`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, u, err := Fenceposts(c.surge, c.unavailable, c.replicas)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || s != c.wantSurge || u != c.wantUnav {
				t.Fatalf("Fenceposts = %d, %d, %v; want %d, %d", s, u, err, c.wantSurge, c.wantUnav)
			}
		})
	}
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]int{"0%": 0, "25%": 25, "100%": 100, "250%": 250} {
		if v, ok := ParsePercent(in); !ok || v != want {
			t.Errorf("ParsePercent(%q) = %d, %v", in, v, ok)
		}
	}
	for _, in := range []string{"", "%", "25", "-5%", "+5%", "2.5%", "a%", "25 %"} {
		if _, ok := ParsePercent(in); ok {
			t.Errorf("ParsePercent(%q) accepted", in)
		}
	}
}

func TestScaleUpDown(t *testing.T) {
	for _, c := range []struct {
		replicas, surge, unav, current, available int32
		up, down                                  int32
	}{
		{10, 2, 1, 10, 10, 2, 1},
		{10, 2, 1, 12, 10, 0, 1},
		{10, 2, 1, 12, 9, 0, 0},
		{10, 2, 1, 13, 8, 0, 0}, // over the bound (a scale-down): never negative
		{10, 0, 3, 10, 10, 0, 3},
	} {
		if got := MaxScaleUp(c.replicas, c.surge, c.current); got != c.up {
			t.Errorf("MaxScaleUp(%d,%d,%d) = %d, want %d", c.replicas, c.surge, c.current, got, c.up)
		}
		if got := MaxScaleDown(c.replicas, c.unav, c.available); got != c.down {
			t.Errorf("MaxScaleDown(%d,%d,%d) = %d, want %d", c.replicas, c.unav, c.available, got, c.down)
		}
	}
}

func tmpl(image string, labels map[string]string) *kplanev1.PodTemplateSpec {
	return &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: labels},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: image}}}}
}

func TestTemplateHash(t *testing.T) {
	a := TemplateHash(tmpl("a", map[string]string{"app": "web"}), nil)
	if a != TemplateHash(tmpl("a", map[string]string{"app": "web"}), nil) {
		t.Fatal("equal templates hash differently")
	}
	if a == TemplateHash(tmpl("b", map[string]string{"app": "web"}), nil) {
		t.Fatal("different images hash alike")
	}
	withLabel := tmpl("a", map[string]string{"app": "web", kplanev1.LabelPodTemplateHash: a})
	if TemplateHash(withLabel, nil) != a {
		t.Fatal("the pod-template-hash label changes the hash")
	}
	one := int32(1)
	if TemplateHash(tmpl("a", map[string]string{"app": "web"}), &one) == a {
		t.Fatal("collisionCount does not change the hash")
	}
	for _, ch := range a {
		if !containsRune(safeAlphabet, ch) {
			t.Fatalf("hash %q has %q outside the safe alphabet", a, ch)
		}
	}
	if !TemplatesEqual(withLabel, tmpl("a", map[string]string{"app": "web"})) {
		t.Fatal("TemplatesEqual sees the hash label")
	}
}

func containsRune(s string, r rune) bool {
	for _, c := range s {
		if c == r {
			return true
		}
	}
	return false
}

func TestRevisions(t *testing.T) {
	m := &kplanev1.ObjectMeta{}
	if Revision(m) != 0 {
		t.Fatal("no annotation is not revision 0")
	}
	if !SetRevision(m, 1) || Revision(m) != 1 {
		t.Fatal("SetRevision 1")
	}
	if SetRevision(m, 1) {
		t.Fatal("same revision reported as a change")
	}
	SetRevision(m, 3)
	SetRevision(m, 5)
	if Revision(m) != 5 || m.Annotations[kplanev1.AnnotationDeploymentRevisionHistory] != "1,3" {
		t.Fatalf("annotations %v", m.Annotations)
	}
	other := &kplanev1.ObjectMeta{Annotations: map[string]string{kplanev1.AnnotationDeploymentRevision: "7"}}
	bad := &kplanev1.ObjectMeta{Annotations: map[string]string{kplanev1.AnnotationDeploymentRevision: "x"}}
	if MaxRevision(m, other, bad, nil) != 7 || Revision(bad) != 0 {
		t.Fatal("MaxRevision")
	}
}

func TestProportional(t *testing.T) {
	for _, c := range []struct {
		sizes []int32
		delta int32
		want  []int32
	}{
		{[]int32{5, 5}, 4, []int32{2, 2}},
		{[]int32{5, 5}, 3, []int32{2, 1}},          // leftover to the largest, first among equals
		{[]int32{8, 2}, 5, []int32{4, 1}},          // 4, 1 exactly
		{[]int32{7, 3}, 5, []int32{4, 1}},          // floors 3, 1; leftover to the larger
		{[]int32{6, 4}, -5, []int32{-3, -2}},       // scale down proportionally
		{[]int32{1, 1, 1}, -2, []int32{-1, -1, 0}}, // truncation, then the first largest
		{[]int32{0, 0}, 3, []int32{3, 0}},          // nothing to be proportional to
		{[]int32{2, 0}, -5, []int32{-2, 0}},        // never below 0
		{[]int32{10, 10, 0}, 1, []int32{1, 0, 0}},  // a zero-size set gets nothing
		{[]int32{750, 500}, -250, []int32{-150, -100}},
	} {
		got := Proportional(c.sizes, c.delta)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("Proportional(%v, %d) = %v, want %v", c.sizes, c.delta, got, c.want)
				break
			}
		}
		var sum, total int32
		for i, g := range got {
			sum += g
			total += c.sizes[i]
		}
		if sum != c.delta && total+c.delta >= 0 {
			t.Errorf("Proportional(%v, %d) sums to %d", c.sizes, c.delta, sum)
		}
	}
}
