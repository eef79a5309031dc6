package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validRole() *kplanev1.Role {
	return &kplanev1.Role{Metadata: &kplanev1.ObjectMeta{Name: "pod-reader", Namespace: "default"},
		Rules: []*kplanev1.PolicyRule{{Verbs: []string{"get", "list"}, ApiGroups: []string{""}, Resources: []string{"pods", "pods/log"}}}}
}

func validClusterRole() *kplanev1.ClusterRole {
	return &kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "system:kplane:x"},
		Rules: []*kplanev1.PolicyRule{
			{Verbs: []string{"*"}, ApiGroups: []string{"*"}, Resources: []string{"*"}},
			{Verbs: []string{"get"}, NonResourceUrls: []string{"/healthz", "/api/*"}},
		}}
}

func TestValidateRole(t *testing.T) {
	checkValidate(t, "Role", validRole, []tc[*kplanev1.Role]{
		{"no verbs", func(r *kplanev1.Role) { r.Rules[0].Verbs = nil }, []string{"rules[0].verbs: Required value..."}},
		{"empty verb", func(r *kplanev1.Role) { r.Rules[0].Verbs = []string{""} }, []string{"rules[0].verbs[0]: Required value..."}},
		{"no apiGroups", func(r *kplanev1.Role) { r.Rules[0].ApiGroups = nil }, []string{"rules[0].apiGroups: Required value..."}},
		{"no resources", func(r *kplanev1.Role) { r.Rules[0].Resources = nil }, []string{"rules[0].resources: Required value..."}},
		{"bad resource", func(r *kplanev1.Role) { r.Rules[0].Resources = []string{"pods/a/b"} }, []string{`rules[0].resources[0]: Invalid value: "pods/a/b"...`}},
		{"urls in a Role", func(r *kplanev1.Role) { r.Rules[0].NonResourceUrls = []string{"/x"} }, []string{"rules[0].nonResourceURLs: Invalid value..."}},
		{"no namespace", func(r *kplanev1.Role) { r.Metadata.Namespace = "" }, []string{"metadata.namespace: Required value..."}},
		{"slash in name", func(r *kplanev1.Role) { r.Metadata.Name = "a/b" }, []string{`metadata.name: Invalid value: "a/b": may not contain '/'`}},
	})
}

func TestValidateClusterRole(t *testing.T) {
	checkValidate(t, "ClusterRole", validClusterRole, []tc[*kplanev1.ClusterRole]{
		{"urls and resources", func(r *kplanev1.ClusterRole) { r.Rules[1].Resources = []string{"pods"} },
			[]string{"rules[1].nonResourceURLs: Invalid value..."}},
		{"url without slash", func(r *kplanev1.ClusterRole) { r.Rules[1].NonResourceUrls = []string{"healthz"} },
			[]string{`rules[1].nonResourceURLs[0]: Invalid value: "healthz": must begin with '/'`}},
		{"namespace set", func(r *kplanev1.ClusterRole) { r.Metadata.Namespace = "default" }, []string{"metadata.namespace: Forbidden..."}},
		{"dot name", func(r *kplanev1.ClusterRole) { r.Metadata.Name = ".." }, []string{`metadata.name: Invalid value: "..": may not be '..'`}},
	})
}

func validRoleBinding() *kplanev1.RoleBinding {
	return &kplanev1.RoleBinding{Metadata: &kplanev1.ObjectMeta{Name: "read-pods", Namespace: "default"},
		RoleRef: &kplanev1.RoleRef{Kind: "Role", Name: "pod-reader"},
		Subjects: []*kplanev1.Subject{
			{Kind: "User", Name: "alice"},
			{Kind: "Group", Name: "devs", ApiGroup: RBACGroup},
			{Kind: "ServiceAccount", Name: "default"},
		}}
}

func TestValidateRoleBinding(t *testing.T) {
	checkValidate(t, "RoleBinding", validRoleBinding, []tc[*kplanev1.RoleBinding]{
		{"cluster role ref", func(b *kplanev1.RoleBinding) { b.RoleRef.Kind = "ClusterRole" }, nil},
		{"no roleRef", func(b *kplanev1.RoleBinding) { b.RoleRef = nil }, []string{"roleRef: Required value"}},
		{"bad roleRef kind", func(b *kplanev1.RoleBinding) { b.RoleRef.Kind = "Pod" }, []string{`roleRef.kind: Unsupported value: "Pod"...`}},
		{"bad roleRef group", func(b *kplanev1.RoleBinding) { b.RoleRef.ApiGroup = "apps" }, []string{`roleRef.apiGroup: Unsupported value: "apps"...`}},
		{"no roleRef name", func(b *kplanev1.RoleBinding) { b.RoleRef.Name = "" }, []string{"roleRef.name: Required value"}},
		{"bad subject kind", func(b *kplanev1.RoleBinding) { b.Subjects[0].Kind = "Robot" }, []string{`subjects[0].kind: Unsupported value: "Robot"...`}},
		{"subject without name", func(b *kplanev1.RoleBinding) { b.Subjects[1].Name = "" }, []string{"subjects[1].name: Required value"}},
		{"service account with group", func(b *kplanev1.RoleBinding) { b.Subjects[2].ApiGroup = RBACGroup }, []string{`subjects[2].apiGroup: Unsupported value: "rbac.authorization.k8s.io"...`}},
		{"user of another group", func(b *kplanev1.RoleBinding) { b.Subjects[0].ApiGroup = "x" }, []string{`subjects[0].apiGroup: Unsupported value: "x"...`}},
	})
	// The defaults fill the service account's namespace and the groups.
	b := defaulted(validRoleBinding())
	if b.Subjects[2].Namespace != "default" || b.Subjects[0].ApiGroup != RBACGroup || b.RoleRef.ApiGroup != RBACGroup {
		t.Errorf("defaults not applied: %v", b)
	}
	checkUpdate(t, "RoleBinding", validRoleBinding, []utc[*kplanev1.RoleBinding]{
		{"subjects change", func(b *kplanev1.RoleBinding) { b.Subjects = b.Subjects[:1] }, nil},
		{"roleRef change", func(b *kplanev1.RoleBinding) { b.RoleRef.Name = "other" }, []string{`roleRef: Invalid value: "Role/other": cannot change roleRef`}},
	})
}

func validClusterRoleBinding() *kplanev1.ClusterRoleBinding {
	return &kplanev1.ClusterRoleBinding{Metadata: &kplanev1.ObjectMeta{Name: "admins"},
		RoleRef:  &kplanev1.RoleRef{Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []*kplanev1.Subject{{Kind: "Group", Name: "system:masters"}, {Kind: "ServiceAccount", Name: "sa", Namespace: "ns"}}}
}

func TestValidateClusterRoleBinding(t *testing.T) {
	checkValidate(t, "ClusterRoleBinding", validClusterRoleBinding, []tc[*kplanev1.ClusterRoleBinding]{
		{"role ref", func(b *kplanev1.ClusterRoleBinding) { b.RoleRef.Kind = "Role" }, []string{`roleRef.kind: Unsupported value: "Role"...`}},
		{"service account without namespace", func(b *kplanev1.ClusterRoleBinding) { b.Subjects[1].Namespace = "" }, []string{"subjects[1].namespace: Required value..."}},
		{"bad service account name", func(b *kplanev1.ClusterRoleBinding) { b.Subjects[1].Name = "A_B" }, []string{`subjects[1].name: Invalid value: "A_B"...`}},
	})
	checkUpdate(t, "ClusterRoleBinding", validClusterRoleBinding, []utc[*kplanev1.ClusterRoleBinding]{
		{"roleRef change", func(b *kplanev1.ClusterRoleBinding) { b.RoleRef.Name = "view" }, []string{`roleRef: Invalid value: "ClusterRole/view": cannot change roleRef`}},
	})
}
