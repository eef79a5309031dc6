package labels

import (
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestParseCanonical(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"", ""},
		{"   ", ""},
		{"app=web", "app=web"},
		{"app==web", "app=web"},
		{" app = web ", "app=web"},
		{"tier!=db", "tier!=db"},
		{"app=", "app="},
		{"app=,tier=db", "app=,tier=db"},
		{"env in (b,a)", "env in (a,b)"},
		{"env in(a , b,a)", "env in (a,b)"},
		{"env notin (prod)", "env notin (prod)"},
		{"legacy", "legacy"},
		{"!legacy", "!legacy"},
		{"! legacy", "!legacy"},
		{"tier=db,app=web", "app=web,tier=db"},
		{"app=web,!legacy,env in (a,b)", "app=web,env in (a,b),!legacy"},
		{"example.com/app=web", "example.com/app=web"},
		{"in=x", "in=x"},
		{"in in (in)", "in in (in)"},
		{"notin notin (a)", "notin notin (a)"},
		{"a=b,a=b", "a=b"},
		{"a=b,a!=c", "a!=c,a=b"},
		{"\tapp\n=\rweb", "app=web"},
		{"A_b.c-D=X_y.z-1", "A_b.c-D=X_y.z-1"},
	}
	for _, c := range cases {
		sel, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if got := sel.String(); got != c.want {
			t.Errorf("Parse(%q).String() = %q, want %q", c.in, got, c.want)
		}
		if sel.Empty() != (c.want == "") {
			t.Errorf("Parse(%q).Empty() = %v", c.in, sel.Empty())
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"x in (a,)", "unable to parse requirement: found ')', expected: identifier at position 8"},
		{"env in ()", "found ')', expected: identifier at position 8"},
		{"app=web,", "found end of string, expected: identifier or '!' at position 8"},
		{",app=web", "found ',', expected: identifier or '!' at position 0"},
		{"app=web,,x", "found ',', expected: identifier or '!' at position 8"},
		{"env in a", "found identifier \"a\", expected: '(' at position 7"},
		{"env in (a", "found end of string, expected: ',' or ')' at position 9"},
		{"env in (a b)", "found identifier \"b\", expected: ',' or ')' at position 10"},
		{"env foo (a)", "found identifier \"foo\", expected: '=', '==', '!=', 'in', 'notin', ',' or end of string at position 4"},
		{"app=web tier=db", "found identifier \"tier\", expected: ',' or end of string at position 8"},
		{"app=(web)", "found '(', expected: identifier at position 4"},
		{"!", "found end of string, expected: identifier at position 1"},
		{"!a=b", "found '=', expected: ',' or end of string at position 2"},
		{"a b", "found identifier \"b\", expected: '=', '==', '!=', 'in', 'notin', ',' or end of string at position 2"},
		{"=web", "found '=', expected: identifier or '!' at position 0"},
		{"app=web=x", "found '=', expected: ',' or end of string at position 7"},
		{"a==b==c", "found '==', expected: ',' or end of string at position 4"},
		{"app=we b", "expected: ',' or end of string at position 7"},
		{"-app=web", "invalid label key \"-app\""},
		{"x=y,app in (ok,bad-)", "(e.g. 'MyValue', 'my_value' or '12345') at position 4"},
		{"a/b/c=d", "invalid label key \"a/b/c\""},
		{"Example.com/app=web", "invalid label key \"Example.com/app\""},
		{strings.Repeat("k", 64) + "=v", "name part must be no more than 63 characters at position 0"},
		{"app=" + strings.Repeat("v", 64), "invalid label value"},
		{"app=-web", "invalid label value \"-web\" for key \"app\""},
		{"x=y,app in (ok,bad-)", "invalid label value \"bad-\" for key \"app\""},
	}
	for _, c := range cases {
		sel, err := Parse(c.in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want error containing %q", c.in, sel.String(), c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) error = %q, want it to contain %q", c.in, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), "unable to parse requirement: ") {
			t.Errorf("Parse(%q) error = %q, want the 'unable to parse requirement' prefix", c.in, err)
		}
	}
}

func TestMatches(t *testing.T) {
	lbls := map[string]string{"app": "web", "tier": "frontend", "env": "prod", "empty": ""}
	cases := []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"app=web", true},
		{"app==web", true},
		{"app=db", false},
		{"app!=db", true},
		{"app!=web", false},
		{"missing!=x", true}, // != matches an absent key
		{"missing=x", false},
		{"env in (prod,staging)", true},
		{"env in (dev)", false},
		{"missing in (a)", false},
		{"env notin (dev)", true},
		{"env notin (prod)", false},
		{"missing notin (a)", true},
		{"app", true},
		{"missing", false},
		{"!missing", true},
		{"!app", false},
		{"empty=", true},
		{"empty", true},
		{"missing=", false},
		{"app=web,tier=frontend", true},
		{"app=web,tier=backend", false},
		{"app=web,!legacy,env in (prod)", true},
	}
	for _, c := range cases {
		sel, err := Parse(c.sel)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.sel, err)
		}
		if got := sel.Matches(lbls); got != c.want {
			t.Errorf("%q.Matches(%v) = %v, want %v", c.sel, lbls, got, c.want)
		}
	}
	// A nil label set has no keys.
	if sel, _ := Parse("!app,x!=y"); !sel.Matches(nil) {
		t.Error("!app,x!=y should match nil labels")
	}
}

func TestEverythingNothing(t *testing.T) {
	if !Everything().Matches(map[string]string{"a": "b"}) || !Everything().Empty() || Everything().String() != "" {
		t.Error("Everything should match everything, be empty and print as \"\"")
	}
	if Nothing().Matches(nil) || Nothing().Matches(map[string]string{"a": "b"}) || Nothing().Empty() {
		t.Error("Nothing should match nothing and not be empty")
	}
}

func TestSelectorFromSet(t *testing.T) {
	sel := SelectorFromSet(map[string]string{"tier": "db", "app": "web"})
	if got := sel.String(); got != "app=web,tier=db" {
		t.Errorf("String = %q", got)
	}
	if !sel.Matches(map[string]string{"app": "web", "tier": "db", "x": "y"}) {
		t.Error("superset should match")
	}
	if sel.Matches(map[string]string{"app": "web"}) {
		t.Error("subset should not match")
	}
	if !SelectorFromSet(nil).Empty() || !SelectorFromSet(nil).Matches(map[string]string{"a": "b"}) {
		t.Error("empty set selects everything")
	}
	if _, err := ValidatedSelectorFromSet(map[string]string{"bad key": "x"}); err == nil {
		t.Error("ValidatedSelectorFromSet accepted an invalid key")
	}
	if s, err := ValidatedSelectorFromSet(map[string]string{"app": "web"}); err != nil || s.String() != "app=web" {
		t.Errorf("ValidatedSelectorFromSet = %v, %v", s, err)
	}
}

func TestFromLabelSelector(t *testing.T) {
	cases := []struct {
		name    string
		ls      *kplanev1.LabelSelector
		want    string // canonical form; "<nothing>" for Nothing
		wantErr string
	}{
		{name: "nil matches nothing", ls: nil, want: "<nothing>"},
		{name: "empty matches everything", ls: &kplanev1.LabelSelector{}, want: ""},
		{name: "matchLabels", ls: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, want: "app=web"},
		{name: "all operators", ls: &kplanev1.LabelSelector{
			MatchLabels: map[string]string{"app": "web"},
			MatchExpressions: []*kplanev1.LabelSelectorRequirement{
				{Key: "env", Operator: "In", Values: []string{"prod", "dev"}},
				{Key: "tier", Operator: "NotIn", Values: []string{"db"}},
				{Key: "track", Operator: "Exists"},
				{Key: "legacy", Operator: "DoesNotExist"},
			},
		}, want: "app=web,env in (dev,prod),!legacy,tier notin (db),track"},
		{name: "bad operator", ls: &kplanev1.LabelSelector{MatchExpressions: []*kplanev1.LabelSelectorRequirement{
			{Key: "a", Operator: "Equals", Values: []string{"b"}}}},
			wantErr: `matchExpressions[0]: operator "Equals" is not one of In, NotIn, Exists, DoesNotExist`},
		{name: "in without values", ls: &kplanev1.LabelSelector{MatchExpressions: []*kplanev1.LabelSelectorRequirement{
			{Key: "a", Operator: "In"}}},
			wantErr: "matchExpressions[0]: key \"a\": for 'in' and 'notin' the set of values must not be empty"},
		{name: "exists with values", ls: &kplanev1.LabelSelector{MatchExpressions: []*kplanev1.LabelSelectorRequirement{
			{Key: "a", Operator: "Exists", Values: []string{"x"}}}},
			wantErr: "values must be empty"},
		{name: "bad matchLabels key", ls: &kplanev1.LabelSelector{MatchLabels: map[string]string{"-a": "b"}},
			wantErr: `matchLabels: invalid label key "-a"`},
		{name: "bad matchLabels value", ls: &kplanev1.LabelSelector{MatchLabels: map[string]string{"a": "b c"}},
			wantErr: `matchLabels: invalid label value "b c"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel, err := FromLabelSelector(c.ls)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "<nothing>" {
				if sel.Matches(map[string]string{}) || sel.Empty() {
					t.Fatal("nil selector should match nothing")
				}
				return
			}
			if sel.String() != c.want {
				t.Fatalf("String = %q, want %q", sel.String(), c.want)
			}
			again, err := Parse(sel.String())
			if err != nil || again.String() != c.want {
				t.Fatalf("reparse = %v, %v", again, err)
			}
		})
	}
}

func TestRequirements(t *testing.T) {
	sel, err := Parse("b=1,a in (x)")
	if err != nil {
		t.Fatal(err)
	}
	reqs, ok := Requirements(sel)
	if !ok || len(reqs) != 2 || reqs[0].Key != "a" || reqs[0].Operator != In || reqs[1].Key != "b" || reqs[1].Values[0] != "1" {
		t.Fatalf("Requirements = %+v, %v", reqs, ok)
	}
	if _, ok := Requirements(Nothing()); ok {
		t.Fatal("Nothing has no requirement list")
	}
}

// FuzzParse checks that Parse never panics and that the canonical form of
// a parsed selector parses again to the same selector.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "app=web", "a==b,c!=d", "env in (a,b)", "x notin (y)", "!legacy", "k",
		"example.com/a=b", "a=,b", "in in (in)", "x in (a,)", "(", "!!a", "a=b=c", " a , b "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			var pe *ParseError
			if !asParseError(err, &pe) || pe.Pos < 0 || pe.Pos > len(s) {
				t.Fatalf("Parse(%q): bad error %v", s, err)
			}
			return
		}
		canon := sel.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its String %q does not parse: %v", s, canon, err)
		}
		if again.String() != canon {
			t.Fatalf("canonical form not stable: %q -> %q -> %q", s, canon, again.String())
		}
		if sel.Empty() != again.Empty() {
			t.Fatalf("Empty differs for %q", s)
		}
		// Both must agree on label sets built from the selector's own
		// keys and values.
		reqs, _ := Requirements(sel)
		for _, r := range reqs {
			for _, lbls := range []map[string]string{nil, {r.Key: ""}, {r.Key: "v"}, {r.Key: firstOr(r.Values)}} {
				if sel.Matches(lbls) != again.Matches(lbls) {
					t.Fatalf("%q and %q disagree on %v", s, canon, lbls)
				}
			}
		}
	})
}

func firstOr(vs []string) string {
	if len(vs) == 0 {
		return "x"
	}
	return vs[0]
}

func asParseError(err error, target **ParseError) bool {
	pe, ok := err.(*ParseError)
	if ok {
		*target = pe
	}
	return ok
}
