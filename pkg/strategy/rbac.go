package strategy

import (
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// RBACGroup is the API group of Role, ClusterRole and their bindings.
const RBACGroup = "rbac.authorization.k8s.io"

// rbacName accepts what Kubernetes accepts for RBAC objects: any name that
// is a valid URL path segment, so the bootstrap names with colons
// ("system:node", "system:kplane:replicactl") are allowed.
func rbacName(name string) []string {
	var msgs []string
	switch name {
	case ".", "..":
		msgs = append(msgs, "may not be '"+name+"'")
	}
	for _, bad := range []string{"/", "%"} {
		if strings.Contains(name, bad) {
			msgs = append(msgs, "may not contain '"+bad+"'")
		}
	}
	if len(name) > 253 {
		msgs = append(msgs, "must be no more than 253 characters")
	}
	return msgs
}

// validateRules checks each rule: verbs are required, and a rule names
// either resources (with apiGroups) or nonResourceURLs, the latter only in
// cluster roles.
func validateRules(errs *validation.ErrorList, rules []*kplanev1.PolicyRule, clusterRole bool) {
	for i, r := range rules {
		p := index("rules", i)
		if len(r.GetVerbs()) == 0 {
			errs.Required(child(p, "verbs"), "verbs must contain at least one value")
		}
		for j, v := range r.GetVerbs() {
			if v == "" {
				errs.Required(index(child(p, "verbs"), j), "a verb may not be empty")
			}
		}
		hasResources := len(r.GetResources()) > 0 || len(r.GetApiGroups()) > 0
		hasURLs := len(r.GetNonResourceUrls()) > 0
		switch {
		case hasURLs && !clusterRole:
			errs.Invalid(child(p, "nonResourceURLs"), r.GetNonResourceUrls(), "namespaced rules cannot apply to non-resource URLs")
		case hasURLs && hasResources:
			errs.Invalid(child(p, "nonResourceURLs"), r.GetNonResourceUrls(), "rules cannot apply to both regular resources and non-resource URLs")
		case hasURLs && len(r.GetResourceNames()) > 0:
			errs.Invalid(child(p, "resourceNames"), r.GetResourceNames(), "rules with nonResourceURLs cannot name resources")
		case !hasURLs:
			if len(r.GetApiGroups()) == 0 {
				errs.Required(child(p, "apiGroups"), `resource rules must supply at least one api group ("" is the core group)`)
			}
			if len(r.GetResources()) == 0 {
				errs.Required(child(p, "resources"), "resource rules must supply at least one resource")
			}
		}
		for j, res := range r.GetResources() {
			if res == "" || strings.Count(res, "/") > 1 || strings.HasPrefix(res, "/") || strings.HasSuffix(res, "/") {
				errs.Invalid(index(child(p, "resources"), j), res, `must be a resource ("pods"), resource/subresource ("pods/status") or "*"`)
			}
		}
		for j, u := range r.GetNonResourceUrls() {
			if !strings.HasPrefix(u, "/") && u != "*" {
				errs.Invalid(index(child(p, "nonResourceURLs"), j), u, "must begin with '/'")
			}
		}
	}
}

var subjectKinds = []string{"User", "Group", "ServiceAccount"}

// validateBinding checks roleRef and subjects; a RoleBinding may refer to
// a Role or a ClusterRole, a ClusterRoleBinding only to a ClusterRole.
func validateBinding(errs *validation.ErrorList, ref *kplanev1.RoleRef, subjects []*kplanev1.Subject, cluster bool) {
	if ref == nil {
		errs.Required("roleRef", "")
	} else {
		if ref.GetApiGroup() != RBACGroup {
			errs.NotSupported("roleRef.apiGroup", ref.GetApiGroup(), []string{RBACGroup})
		}
		if cluster {
			oneOf(errs, "roleRef.kind", ref.GetKind(), "ClusterRole")
		} else {
			oneOf(errs, "roleRef.kind", ref.GetKind(), "Role", "ClusterRole")
		}
		if ref.GetName() == "" {
			errs.Required("roleRef.name", "")
		} else {
			errs.InvalidMsgs("roleRef.name", ref.GetName(), rbacName(ref.GetName()))
		}
	}
	for i, s := range subjects {
		p := index("subjects", i)
		if !oneOf(errs, child(p, "kind"), s.GetKind(), subjectKinds...) {
			continue
		}
		if s.GetName() == "" {
			errs.Required(child(p, "name"), "")
		}
		switch s.GetKind() {
		case "ServiceAccount":
			if s.GetApiGroup() != "" {
				errs.NotSupported(child(p, "apiGroup"), s.GetApiGroup(), []string{""})
			}
			if s.GetNamespace() == "" && cluster {
				errs.Required(child(p, "namespace"), "a ServiceAccount subject of a ClusterRoleBinding names its namespace")
			}
			if s.GetName() != "" {
				errs.InvalidMsgs(child(p, "name"), s.GetName(), validation.IsDNS1123Subdomain(s.GetName()))
			}
		default:
			if s.GetApiGroup() != RBACGroup {
				errs.NotSupported(child(p, "apiGroup"), s.GetApiGroup(), []string{RBACGroup})
			}
		}
	}
}

// defaultSubjects fills the apiGroup of User and Group subjects, which
// Kubernetes clients commonly leave out.
func defaultSubjects(subjects []*kplanev1.Subject) {
	for _, s := range subjects {
		if (s.Kind == "User" || s.Kind == "Group") && s.ApiGroup == "" {
			s.ApiGroup = RBACGroup
		}
	}
}

func defaultRoleRef(ref *kplanev1.RoleRef) {
	if ref != nil && ref.ApiGroup == "" {
		ref.ApiGroup = RBACGroup
	}
}

// roleRefUpdate keeps roleRef: changing what a binding grants would let
// whoever may update bindings rebind without the bind check (Kubernetes
// requires deleting and recreating the binding instead).
func roleRefUpdate(ref, old *kplanev1.RoleRef) validation.ErrorList {
	var errs validation.ErrorList
	if ref.GetApiGroup() != old.GetApiGroup() || ref.GetKind() != old.GetKind() || ref.GetName() != old.GetName() {
		errs.Invalid("roleRef", ref.GetKind()+"/"+ref.GetName(), "cannot change roleRef")
	}
	return errs
}

func validateRole(r *kplanev1.Role) validation.ErrorList {
	var errs validation.ErrorList
	validateRules(&errs, r.GetRules(), false)
	return errs
}

func validateClusterRole(r *kplanev1.ClusterRole) validation.ErrorList {
	var errs validation.ErrorList
	validateRules(&errs, r.GetRules(), true)
	return errs
}

func defaultRoleBinding(b *kplanev1.RoleBinding) {
	defaultSubjects(b.Subjects)
	defaultRoleRef(b.RoleRef)
	for _, s := range b.Subjects {
		// A ServiceAccount subject without namespace means the binding's.
		if s.Kind == "ServiceAccount" && s.Namespace == "" {
			s.Namespace = b.GetMetadata().GetNamespace()
		}
	}
}

func validateRoleBinding(b *kplanev1.RoleBinding) validation.ErrorList {
	var errs validation.ErrorList
	validateBinding(&errs, b.GetRoleRef(), b.GetSubjects(), false)
	return errs
}

func validateRoleBindingUpdate(b, old *kplanev1.RoleBinding) validation.ErrorList {
	return roleRefUpdate(b.GetRoleRef(), old.GetRoleRef())
}

func defaultClusterRoleBinding(b *kplanev1.ClusterRoleBinding) {
	defaultSubjects(b.Subjects)
	defaultRoleRef(b.RoleRef)
}

func validateClusterRoleBinding(b *kplanev1.ClusterRoleBinding) validation.ErrorList {
	var errs validation.ErrorList
	validateBinding(&errs, b.GetRoleRef(), b.GetSubjects(), true)
	return errs
}

func validateClusterRoleBindingUpdate(b, old *kplanev1.ClusterRoleBinding) validation.ErrorList {
	return roleRefUpdate(b.GetRoleRef(), old.GetRoleRef())
}
