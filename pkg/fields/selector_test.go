package fields

import (
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func pod(ns, name, node, phase string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name},
		Spec:     &kplanev1.PodSpec{NodeName: node, Priority: 5},
		Status:   &kplanev1.PodStatus{Phase: phase},
	})
}

func TestParseAndMatch(t *testing.T) {
	running := pod("default", "web-1", "n1", "Running")
	pending := pod("kube", "web-2", "", "Pending")
	bare := kplanev1.MustWrap(&kplanev1.Pod{}) // no metadata, spec or status at all
	cases := []struct {
		sel                    string
		canon                  string
		running, pending, bare bool
	}{
		{"", "", true, true, true},
		{"metadata.name=web-1", "metadata.name=web-1", true, false, false},
		{"metadata.name==web-1", "metadata.name=web-1", true, false, false},
		{" metadata.name = web-1 ", "metadata.name=web-1", true, false, false},
		{"metadata.namespace!=default", "metadata.namespace!=default", false, true, true},
		{"spec.nodeName=n1", "spec.nodeName=n1", true, false, false},
		{"spec.nodeName=", "spec.nodeName=", false, true, true},
		{"spec.nodeName!=", "spec.nodeName!=", true, false, false},
		{"status.phase=Running", "status.phase=Running", true, false, false},
		{"status.phase!=Running,status.phase!=Succeeded", "status.phase!=Running,status.phase!=Succeeded", false, true, true},
		{"metadata.namespace=default,spec.nodeName=n1", "metadata.namespace=default,spec.nodeName=n1", true, false, false},
		{"spec.priority=5", "spec.priority=5", true, true, false},
		{"spec.priority=05", "spec.priority=5", true, true, false},
		{"spec.priority=", "spec.priority=0", false, false, true},
		{"spec.priority=0", "spec.priority=0", false, false, true},
		{"metadata.generation=0", "metadata.generation=0", true, true, true},
		{"spec.terminationGracePeriodSeconds=0", "spec.terminationGracePeriodSeconds=0", true, true, true},
	}
	for _, c := range cases {
		sel, err := ParseSelector("Pod", c.sel)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", c.sel, err)
			continue
		}
		if sel.String() != c.canon {
			t.Errorf("ParseSelector(%q).String() = %q, want %q", c.sel, sel.String(), c.canon)
		}
		for _, o := range []struct {
			obj  *kplanev1.Object
			want bool
		}{{running, c.running}, {pending, c.pending}, {bare, c.bare}} {
			if got := sel.Matches(o.obj); got != o.want {
				t.Errorf("%q.Matches(%s) = %v, want %v", c.sel, o.obj.Key(), got, o.want)
			}
		}
	}
}

func TestOtherKinds(t *testing.T) {
	node := kplanev1.MustWrap(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n1"}, Spec: &kplanev1.NodeSpec{Unschedulable: true}})
	sel, err := ParseSelector("Node", "spec.unschedulable=true,metadata.name=n1")
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(node) {
		t.Error("node should match")
	}
	// A selector for one kind never matches another kind.
	if sel.Matches(pod("", "n1", "", "")) {
		t.Error("a Node selector matched a Pod")
	}
	if !Everything().Matches(node) || !Everything().Empty() {
		t.Error("Everything should match")
	}
	sel, err = ParseSelector("Node", "spec.unschedulable=")
	if err != nil || sel.String() != "spec.unschedulable=false" || sel.Matches(node) {
		t.Errorf("empty bool value: %v %v", sel, err)
	}
	ev := kplanev1.MustWrap(&kplanev1.Event{Metadata: &kplanev1.ObjectMeta{Namespace: "d", Name: "e"},
		InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Name: "web"}, Reason: "Started"})
	sel, err = ParseSelector("Event", "involvedObject.kind=Pod,involvedObject.name=web,reason=Started")
	if err != nil || !sel.Matches(ev) {
		t.Errorf("event selector: %v %v", sel, err)
	}
	sc := kplanev1.MustWrap(&kplanev1.StorageClass{Provisioner: "kplane.io/hostpath"})
	sel, err = ParseSelector("StorageClass", "provisioner=kplane.io/hostpath")
	if err != nil || !sel.Matches(sc) {
		t.Errorf("storage class selector: %v %v", sel, err)
	}
}

func TestRequirements(t *testing.T) {
	sel, err := ParseSelector("Pod", "spec.nodeName==n1,status.phase!=Failed")
	if err != nil {
		t.Fatal(err)
	}
	want := []Requirement{{"spec.nodeName", Equals, "n1"}, {"status.phase", NotEquals, "Failed"}}
	got := sel.Requirements()
	if len(got) != len(want) {
		t.Fatalf("Requirements = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Requirements[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestEscapes(t *testing.T) {
	cases := []struct{ in, value, canon string }{
		{`metadata.name=a\,b`, "a,b", `metadata.name=a\,b`},
		{`metadata.name=a\=b`, "a=b", `metadata.name=a\=b`},
		{`metadata.name=a\!b`, "a!b", `metadata.name=a\!b`},
		{`metadata.name=a\\b`, `a\b`, `metadata.name=a\\b`},
		{`metadata.name=\ a\ `, " a ", `metadata.name=\ a\ `},
		{`metadata.name= a b `, "a b", `metadata.name=a b`},
	}
	for _, c := range cases {
		sel, err := ParseSelector("Pod", c.in)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", c.in, err)
			continue
		}
		if v := sel.Requirements()[0].Value; v != c.value {
			t.Errorf("ParseSelector(%q) value = %q, want %q", c.in, v, c.value)
		}
		if sel.String() != c.canon {
			t.Errorf("ParseSelector(%q).String() = %q, want %q", c.in, sel.String(), c.canon)
		}
		if !sel.Matches(pod("", c.value, "", "")) {
			t.Errorf("ParseSelector(%q) does not match a pod named %q", c.in, c.value)
		}
	}
}

func TestErrors(t *testing.T) {
	cases := []struct{ kind, in, want string }{
		{"Pod", "spec.foo=x", `field selector "spec.foo": Pod has no field spec.foo`},
		{"Pod", "spec.node_name=x", `field selector "spec.node_name": Pod has no field spec.node_name`},
		{"Pod", "metadata.name.x=y", `field selector "metadata.name.x": Pod has no field metadata.name.x`},
		{"Pod", "spec=x", `field selector "spec": Pod field spec is an object; only scalar fields can be selected`},
		{"Pod", "spec.containers=x", `Pod field spec.containers is a list or map`},
		{"Pod", "metadata.labels.app=x", `Pod field metadata.labels is a list or map`},
		{"Secret", "data=x", `Secret field data is a list or map`},
		{"Pod", "metadata.name", `field selector "metadata.name": expected <field>=<value>, <field>==<value> or <field>!=<value>`},
		{"Pod", "=x", `missing field name`},
		{"Pod", "metadata.name=a,", `empty requirement`},
		{"Pod", ",metadata.name=a", `empty requirement`},
		{"Pod", "metadata.name=a=b", `unescaped '='`},
		{"Pod", `metadata.name=a\`, `unfinished escape`},
		{"Pod", "spec.priority=high", `value "high" for priority must be an integer`},
		{"Pod", "spec.priority=99999999999", `must be an integer`},
		{"Node", "spec.unschedulable=yes", `value "yes" for unschedulable must be true or false`},
		{"Widget", "metadata.name=x", `unknown kind "Widget"`},
	}
	for _, c := range cases {
		sel, err := ParseSelector(c.kind, c.in)
		if err == nil {
			t.Errorf("ParseSelector(%s, %q) = %q, want error %q", c.kind, c.in, sel.String(), c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSelector(%s, %q) error = %q, want it to contain %q", c.kind, c.in, err, c.want)
		}
	}
}

// FuzzParseSelector checks that parsing never panics, and that the
// canonical form parses back to the same requirements.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"", "metadata.name=x", "spec.nodeName==n1,status.phase!=Running", `metadata.name=a\,b`,
		"spec.priority=-3", "spec.foo=1", "a=b=c", `x\`, " metadata.namespace = y "} {
		f.Add(s)
	}
	obj := pod("default", "web", "n1", "Running")
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector("Pod", s)
		if err != nil {
			return
		}
		again, err := ParseSelector("Pod", sel.String())
		if err != nil {
			t.Fatalf("%q parsed, its String %q does not: %v", s, sel.String(), err)
		}
		a, b := sel.Requirements(), again.Requirements()
		if len(a) != len(b) {
			t.Fatalf("%q: %d requirements, reparsed %d", s, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%q: requirement %d %+v reparsed as %+v", s, i, a[i], b[i])
			}
		}
		if sel.Matches(obj) != again.Matches(obj) {
			t.Fatalf("%q and its canonical form disagree", s)
		}
	})
}

// Field selectors use Kubernetes' spelling (status.podIP, as kubectl
// --field-selector does); protojson's default spelling is no field.
func TestKubernetesFieldNames(t *testing.T) {
	p := kplanev1.MustWrap(&kplanev1.Pod{Status: &kplanev1.PodStatus{PodIp: "10.0.0.5", HostIp: "192.168.1.2"}})
	sel, err := ParseSelector("Pod", "status.podIP=10.0.0.5,status.hostIP=192.168.1.2")
	if err != nil || !sel.Matches(p) {
		t.Errorf("status.podIP/status.hostIP selector: %v %v", sel, err)
	}
	if _, err := ParseSelector("Pod", "status.podIp=10.0.0.5"); err == nil {
		t.Error("status.podIp (protojson's spelling) was accepted")
	}
}
