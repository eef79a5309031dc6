package strategy

import (
	"slices"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestLifecycleHooksByKind pins which kinds have which lifecycle hooks, so
// a hook cannot be lost (or given to another kind) by a refactoring.
func TestLifecycleHooksByKind(t *testing.T) {
	want := map[string][]string{
		"Pod":       {"GracefulDeleter"},
		"Namespace": {"DeleteGuard", "NamespaceHolder"},
		"Event":     {"DeletedWithNamespace", "Expirer"},
		"Service":   {"Allocator"},
	}
	for _, name := range kplanev1.KindNames() {
		s := For(name)
		var got []string
		if _, ok := s.(Allocator); ok {
			got = append(got, "Allocator")
		}
		if _, ok := s.(DeleteGuard); ok {
			got = append(got, "DeleteGuard")
		}
		if _, ok := s.(DeletedWithNamespace); ok {
			got = append(got, "DeletedWithNamespace")
		}
		if _, ok := s.(Expirer); ok {
			got = append(got, "Expirer")
		}
		if _, ok := s.(GracefulDeleter); ok {
			got = append(got, "GracefulDeleter")
		}
		if _, ok := s.(NamespaceHolder); ok {
			got = append(got, "NamespaceHolder")
		}
		if !slices.Equal(got, want[name]) {
			t.Errorf("%s implements %v, want %v", name, got, want[name])
		}
		// The hooks only make sense on one side of the scope line.
		info := kplanev1.LookupKind(name)
		if _, ok := s.(DeletedWithNamespace); ok && !info.Namespaced {
			t.Errorf("%s is DeletedWithNamespace but cluster-scoped", name)
		}
		if _, ok := s.(NamespaceHolder); ok && info.Namespaced {
			t.Errorf("%s holds namespaces but is namespaced itself", name)
		}
	}
	if got := NamespaceKind(); got != "Namespace" {
		t.Errorf("NamespaceKind() = %q, want Namespace", got)
	}
}

func TestPodGracePeriod(t *testing.T) {
	g := For("Pod").(GracefulDeleter)
	pod := func(node, phase string, grace *int64) *kplanev1.Object {
		p := validPod()
		p.Spec.NodeName = node
		p.Spec.TerminationGracePeriodSeconds = grace
		p.Status = &kplanev1.PodStatus{Phase: phase}
		return kplanev1.MustWrap(p)
	}
	for _, c := range []struct {
		name      string
		obj       *kplanev1.Object
		requested *int64
		want      int64
	}{
		{"unbound pod goes at once", pod("", "Pending", nil), nil, 0},
		{"unbound pod ignores a requested period", pod("", "Pending", nil), ptr[int64](10), 0},
		{"bound pod without a period gets the default", pod("n1", "Running", nil), nil, 30},
		{"bound pod gets its own period", pod("n1", "Running", ptr[int64](12)), nil, 12},
		{"the request overrides the pod's period", pod("n1", "Running", ptr[int64](12)), ptr[int64](5), 5},
		{"a zero request confirms the deletion", pod("n1", "Running", ptr[int64](12)), ptr[int64](0), 0},
		{"pending bound pod is stopped gracefully", pod("n1", "Pending", nil), nil, 30},
		{"succeeded pod has nothing to stop", pod("n1", "Succeeded", nil), nil, 0},
		{"failed pod has nothing to stop", pod("n1", "Failed", ptr[int64](12)), ptr[int64](7), 0},
	} {
		if got := g.GracePeriod(c.obj, c.requested); got != c.want {
			t.Errorf("%s: GracePeriod = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestNamespaceBeforeDelete(t *testing.T) {
	guard := For("Namespace").(DeleteGuard)
	for _, name := range []string{"default", "kplane-system", "kplane-node-lease"} {
		err := guard.BeforeDelete(kplanev1.MustWrap(&kplanev1.Namespace{Metadata: meta("", name)}))
		want := `namespace "` + name + `" is a system namespace and cannot be deleted`
		if err == nil || err.Error() != want {
			t.Errorf("BeforeDelete(%s) = %v, want %q", name, err, want)
		}
	}
	for _, name := range []string{"team", "kube-system", "defaults"} {
		if err := guard.BeforeDelete(kplanev1.MustWrap(&kplanev1.Namespace{Metadata: meta("", name)})); err != nil {
			t.Errorf("BeforeDelete(%s) = %v, want nil", name, err)
		}
	}
}

func TestEventTTL(t *testing.T) {
	exp := For("Event").(Expirer)
	ev := kplanev1.MustWrap(&kplanev1.Event{Metadata: meta("d", "e")})
	if got := exp.TTL(ev, Config{}); got != time.Hour {
		t.Errorf("TTL with no setting = %v, want the default 1h", got)
	}
	if got := exp.TTL(ev, Config{EventTTL: 90 * time.Second}); got != 90*time.Second {
		t.Errorf("TTL with --event-ttl=90s = %v, want 90s", got)
	}
}

func TestPropagationFinalizer(t *testing.T) {
	for policy, want := range map[string]string{
		"":           "",
		"Background": "",
		"Foreground": "foregroundDeletion",
		"Orphan":     "orphan",
	} {
		got, err := PropagationFinalizer(policy)
		if err != nil || got != want {
			t.Errorf("PropagationFinalizer(%q) = %q, %v; want %q", policy, got, err, want)
		}
	}
	_, err := PropagationFinalizer("orphan")
	want := `propagationPolicy: unsupported value "orphan": supported values: "Background", "Foreground", "Orphan"`
	if err == nil || err.Error() != want {
		t.Errorf("PropagationFinalizer(orphan) error = %v, want %q", err, want)
	}
}
