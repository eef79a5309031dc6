package validation

import (
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestFormats(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name string
		fn   func(string) []string
		good []string
		bad  []string
	}{
		{"IsDNS1123Label", IsDNS1123Label,
			[]string{"a", "abc", "a-b", "0", "1a", long(63)},
			[]string{"", "A", "a_b", "a.b", "-a", "a-", long(64), "a b"}},
		{"IsDNS1035Label", IsDNS1035Label,
			[]string{"a", "abc-1", long(63)},
			[]string{"", "1a", "A", "a-", long(64)}},
		{"IsDNS1123Subdomain", IsDNS1123Subdomain,
			[]string{"a", "a.b", "example.com", "a-1.b-2", strings.Repeat("a.", 126) + "a"},
			[]string{"", ".a", "a.", "a..b", "A.b", "a_b", "-a.b", strings.Repeat("a.", 127) + "a"}},
		{"IsQualifiedName", IsQualifiedName,
			[]string{"app", "App_1.x-y", "example.com/app", "a/b", long(63), "kubernetes.io/service-account.name"},
			[]string{"", "/a", "a/", "a/b/c", "-a", "a-", "a b", long(64), "Example.com/a", "example.com/" + long(64), "a_/b"}},
		{"IsValidLabelValue", IsValidLabelValue,
			[]string{"", "a", "A_b.c-D", long(63)},
			[]string{"-a", "a-", "a b", "a/b", long(64)}},
		{"IsEnvVarName", IsEnvVarName,
			[]string{"A", "MY_VAR", "my.var-1", "_x"},
			[]string{"", "1A", "A B", "A=B", ".", ".."}},
		{"IsConfigKey", IsConfigKey,
			[]string{"a", ".dockercfg", "tls.crt", "A_b-c"},
			[]string{"", ".", "..", "a/b", "a b", long(254)}},
		{"IsIANASvcName", IsIANASvcName,
			[]string{"http", "web-80", "a1"},
			[]string{"", "80", "-http", "http-", "a--b", "HTTP", "abcdefghijklmnop"}},
		{"IsValidIP", IsValidIP,
			[]string{"10.0.0.1", "::1", "2001:db8::ffff"},
			[]string{"", "10.0.0", "10.0.0.256", "fe80::1%eth0", "host"}},
		{"IsValidCIDR", IsValidCIDR,
			[]string{"10.0.0.0/24", "2001:db8::/64"},
			[]string{"", "10.0.0.0", "10.0.0.0/33"}},
	}
	for _, c := range cases {
		for _, s := range c.good {
			if msgs := c.fn(s); len(msgs) != 0 {
				t.Errorf("%s(%q) = %v, want valid", c.name, s, msgs)
			}
		}
		for _, s := range c.bad {
			if msgs := c.fn(s); len(msgs) == 0 {
				t.Errorf("%s(%q) is valid, want an error", c.name, s)
			}
		}
	}
	if len(IsValidPortNum(0)) == 0 || len(IsValidPortNum(65536)) == 0 || len(IsValidPortNum(1)) != 0 || len(IsValidPortNum(65535)) != 0 {
		t.Error("IsValidPortNum bounds")
	}
}

func TestErrorList(t *testing.T) {
	var l ErrorList
	if l.Err() != nil {
		t.Fatal("empty list should be a nil error")
	}
	l.Required("spec.containers[0].image", "")
	l.Invalid("metadata.name", "Bad", "msg")
	l.NotSupported("spec.restartPolicy", "Sometimes", []string{"Always", "Never"})
	l.Duplicate("spec.containers[1].name", "web")
	l.Forbidden("spec", "no")
	l.NotFound("spec.containers[0].volumeMounts[0].name", "data")
	l.NonNegative("spec.replicas", -1)
	l.NonNegative("spec.replicas", 0) // no error
	l.Positive("spec.x", 0)
	l.Immutable("spec.selector", map[string]string{"b": "2", "a": "1"})
	l.Invalid("spec.template", &kplanev1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, "x")
	want := []string{
		"spec.containers[0].image: Required value",
		`metadata.name: Invalid value: "Bad": msg`,
		`spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never"`,
		`spec.containers[1].name: Duplicate value: "web"`,
		"spec: Forbidden: no",
		`spec.containers[0].volumeMounts[0].name: Not found: "data"`,
		"spec.replicas: must be greater than or equal to 0",
		"spec.x: must be greater than 0",
		`spec.selector: Invalid value: {"a":"1","b":"2"}: field is immutable`,
		`spec.template: Invalid value: {"matchLabels":{"a":"b"}}: x`,
	}
	if len(l) != len(want) {
		t.Fatalf("got %d errors: %v", len(l), l)
	}
	for i, w := range want {
		if l[i].Error() != w {
			t.Errorf("error %d = %q, want %q", i, l[i].Error(), w)
		}
	}
	if got := l.Err().Error(); !strings.HasPrefix(got, want[0]+"; "+want[1]) {
		t.Errorf("joined = %q", got)
	}
	if Key("metadata.labels", "app") != `metadata.labels["app"]` || Index("x", 3) != "x[3]" || Child("", "a") != "a" || Child("a", "b") != "a.b" {
		t.Error("path helpers")
	}
}

// errorsAt returns "path: detail" strings for assertions.
func errorsAt(l ErrorList) []string {
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.Error()
	}
	return out
}

func TestValidateObjectMeta(t *testing.T) {
	big := strings.Repeat("x", TotalAnnotationSizeLimit)
	cases := []struct {
		name       string
		meta       *kplanev1.ObjectMeta
		namespaced bool
		want       []string // exact errors; empty means valid
	}{
		{"valid namespaced", &kplanev1.ObjectMeta{Name: "web", Namespace: "default",
			Labels: map[string]string{"app": "web", "example.com/tier": ""}, Annotations: map[string]string{"Note": "anything goes: \n"},
			Finalizers: []string{"kubernetes", "example.com/cleanup"},
			OwnerReferences: []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Uid: "u1", Controller: true},
				{Kind: "Job", Name: "j", Uid: "u2"}}}, true, nil},
		{"valid cluster-scoped", &kplanev1.ObjectMeta{Name: "node-1.example.com"}, false, nil},
		{"generateName only", &kplanev1.ObjectMeta{GenerateName: "web-", Namespace: "default"}, true, nil},
		{"nil meta", nil, false, []string{"metadata.name: Required value: name or generateName is required"}},
		{"no name", &kplanev1.ObjectMeta{Namespace: "default"}, true,
			[]string{"metadata.name: Required value: name or generateName is required"}},
		{"bad name", &kplanev1.ObjectMeta{Name: "Web_1"}, false,
			[]string{`metadata.name: Invalid value: "Web_1": ` + IsDNS1123Subdomain("Web_1")[0]}},
		{"bad generateName", &kplanev1.ObjectMeta{GenerateName: "Web-"}, false,
			[]string{`metadata.generateName: Invalid value: "Web-": ` + IsDNS1123Subdomain("Weba")[0]}},
		{"namespace missing", &kplanev1.ObjectMeta{Name: "a"}, true, []string{"metadata.namespace: Required value"}},
		{"namespace bad", &kplanev1.ObjectMeta{Name: "a", Namespace: "a.b"}, true,
			[]string{`metadata.namespace: Invalid value: "a.b": ` + IsDNS1123Label("a.b")[0]}},
		{"namespace on cluster-scoped", &kplanev1.ObjectMeta{Name: "a", Namespace: "x"}, false,
			[]string{"metadata.namespace: Forbidden: not allowed on this type"}},
		{"bad label key", &kplanev1.ObjectMeta{Name: "a", Labels: map[string]string{"a/b/c": "x"}}, false,
			[]string{`metadata.labels: Invalid value: "a/b/c": a qualified name may contain at most one '/'`}},
		{"bad label value", &kplanev1.ObjectMeta{Name: "a", Labels: map[string]string{"app": "-x"}}, false,
			[]string{`metadata.labels["app"]: Invalid value: "-x": ` + IsValidLabelValue("-x")[0]}},
		{"bad annotation key", &kplanev1.ObjectMeta{Name: "a", Annotations: map[string]string{"a b": "x"}}, false,
			[]string{`metadata.annotations: Invalid value: "a b": ` + IsQualifiedName("a b")[0]}},
		{"annotations too big", &kplanev1.ObjectMeta{Name: "a", Annotations: map[string]string{"a": big}}, false,
			[]string{"metadata.annotations: Too long: may not be more than 262144 bytes"}},
		{"owner reference fields", &kplanev1.ObjectMeta{Name: "a", OwnerReferences: []*kplanev1.OwnerReference{{}}}, false,
			[]string{"metadata.ownerReferences[0].kind: Required value", "metadata.ownerReferences[0].name: Required value",
				"metadata.ownerReferences[0].uid: Required value"}},
		{"two controllers", &kplanev1.ObjectMeta{Name: "a", OwnerReferences: []*kplanev1.OwnerReference{
			{Kind: "A", Name: "a", Uid: "1", Controller: true}, {Kind: "B", Name: "b", Uid: "2", Controller: true}}}, false,
			[]string{`metadata.ownerReferences: Invalid value: "A/a, B/b": at most one owner reference may set controller=true`}},
		{"finalizers", &kplanev1.ObjectMeta{Name: "a", Finalizers: []string{"x", "bad finalizer", "x"}}, false,
			[]string{`metadata.finalizers[1]: Invalid value: "bad finalizer": ` + IsQualifiedName("bad finalizer")[0],
				`metadata.finalizers[2]: Duplicate value: "x"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := errorsAt(ValidateObjectMeta(c.meta, c.namespaced, IsDNS1123Subdomain, "metadata"))
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

func TestValidateObjectMetaUpdate(t *testing.T) {
	old := &kplanev1.ObjectMeta{Name: "a", Namespace: "x"}
	if errs := ValidateObjectMetaUpdate(&kplanev1.ObjectMeta{Name: "a", Namespace: "x", Labels: map[string]string{"l": "v"}}, old, "metadata"); len(errs) != 0 {
		t.Errorf("label change rejected: %v", errs)
	}
	got := errorsAt(ValidateObjectMetaUpdate(&kplanev1.ObjectMeta{Name: "b", Namespace: "y"}, old, "metadata"))
	want := []string{`metadata.name: Invalid value: "b": field is immutable`, `metadata.namespace: Invalid value: "y": field is immutable`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %v", got)
	}
}

func TestValidateLabelSelector(t *testing.T) {
	ls := &kplanev1.LabelSelector{
		MatchLabels: map[string]string{"-bad": "x"},
		MatchExpressions: []*kplanev1.LabelSelectorRequirement{
			{Key: "a", Operator: "In"},
			{Key: "b", Operator: "Exists", Values: []string{"x"}},
			{Key: "c", Operator: "Equals"},
			{Key: "d", Operator: "NotIn", Values: []string{"ok", "-no"}},
			{Key: "e", Operator: "DoesNotExist"},
		},
	}
	got := errorsAt(ValidateLabelSelector(ls, "spec.selector"))
	want := []string{
		`spec.selector.matchLabels: Invalid value: "-bad": ` + IsQualifiedName("-bad")[0],
		"spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
		"spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
		`spec.selector.matchExpressions[2].operator: Unsupported value: "Equals": supported values: "In", "NotIn", "Exists", "DoesNotExist"`,
		`spec.selector.matchExpressions[3].values[1]: Invalid value: "-no": ` + IsValidLabelValue("-no")[0],
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if len(ValidateLabelSelector(nil, "x")) != 0 {
		t.Error("nil selector is not this function's concern")
	}
}

func TestAppendSortedKeys(t *testing.T) {
	m := map[string]int{"b": 1, "c": 2, "a": 3}
	if got := AppendSortedKeys([]string{"z"}, m); strings.Join(got, ",") != "z,a,b,c" {
		t.Fatalf("AppendSortedKeys = %v, want z then the keys in order", got)
	}
	allocs := testing.AllocsPerRun(100, func() {
		var buf [8]string
		if len(AppendSortedKeys(buf[:0], m)) != 3 {
			t.Fatal("keys lost")
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendSortedKeys into a stack array allocated %v times", allocs)
	}
}
