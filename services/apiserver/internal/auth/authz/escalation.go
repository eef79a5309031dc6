package authz

import (
	"context"
	"fmt"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// RBACGroup is the API group of the RBAC kinds.
const RBACGroup = "rbac.authorization.k8s.io"

// RulesFor returns every rule u holds in ns: its cluster bindings' and,
// when ns is set, ns's bindings' rules.
func (r *RBAC) RulesFor(u *user.Info, ns string) []*kplanev1.PolicyRule {
	var out []*kplanev1.PolicyRule
	r.visit(u, ns, func(rules []*kplanev1.PolicyRule, _ *binding) bool {
		out = append(out, rules...)
		return false
	})
	return out
}

// roleRules returns the rules of the role ref names, as a binding in ns
// would see it.
func (r *RBAC) roleRules(ns string, ref *kplanev1.RoleRef) ([]*kplanev1.PolicyRule, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch ref.GetKind() {
	case "ClusterRole":
		rules, ok := r.clusterRoles[ref.GetName()]
		return rules, ok
	case "Role":
		rules, ok := r.roles[ns+"/"+ref.GetName()]
		return rules, ok
	}
	return nil, false
}

// Uncovered returns, in words, the permissions of want that no rule of
// have grants. A wildcard in want is covered only by the same wildcard:
// holding "get pods" does not let one grant "get *".
func Uncovered(have, want []*kplanev1.PolicyRule) []string {
	var missing []string
	for _, w := range want {
		for _, verb := range w.GetVerbs() {
			for _, u := range w.GetNonResourceUrls() {
				if !coveredURL(have, verb, u) {
					missing = append(missing, fmt.Sprintf("%s %s", verb, u))
				}
			}
			for _, g := range w.GetApiGroups() {
				for _, res := range w.GetResources() {
					names := w.GetResourceNames()
					if len(names) == 0 {
						names = []string{""}
					}
					for _, n := range names {
						if !coveredResource(have, verb, g, res, n) {
							missing = append(missing, describePermission(verb, g, res, n))
						}
					}
				}
			}
		}
	}
	return missing
}

func describePermission(verb, group, res, name string) string {
	s := verb + " " + res
	if group != "" {
		s += "." + group
	}
	if name != "" {
		s += " named " + name
	}
	return s
}

func has(list []string, v string) bool {
	for _, x := range list {
		if x == "*" || x == v {
			return true
		}
	}
	return false
}

func coveredResource(have []*kplanev1.PolicyRule, verb, group, res, name string) bool {
	resource, sub, _ := strings.Cut(res, "/")
	for _, h := range have {
		if !has(h.GetVerbs(), verb) || !has(h.GetApiGroups(), group) {
			continue
		}
		ok := false
		for _, x := range h.GetResources() {
			if x == "*" || x == res || (sub != "" && (x == resource+"/*" || x == "*/"+sub)) {
				ok = true
				break
			}
		}
		if !ok {
			continue
		}
		if len(h.GetResourceNames()) == 0 || (name != "" && has(h.GetResourceNames(), name)) {
			return true
		}
	}
	return false
}

func coveredURL(have []*kplanev1.PolicyRule, verb, url string) bool {
	for _, h := range have {
		if !has(h.GetVerbs(), verb) {
			continue
		}
		for _, x := range h.GetNonResourceUrls() {
			if x == "*" || x == url || (strings.HasSuffix(x, "*") && strings.HasPrefix(url, strings.TrimSuffix(x, "*"))) {
				return true
			}
		}
	}
	return false
}

// Escalation checks what RBAC writes grant: a role may only hold rules its
// author holds (unless the author may "escalate" roles), and a binding
// may only grant a role whose rules its author holds (unless the author
// may "bind" that role), as Kubernetes does.
type Escalation struct {
	RBAC *RBAC
	// Authz is the whole chain, asked for the escalate and bind verbs (and
	// so letting system:masters through).
	Authz Authorizer
}

// Check returns nil when u may write obj (a Role, ClusterRole,
// RoleBinding or ClusterRoleBinding), else an error saying which
// permissions u lacks. Other kinds pass.
func (e *Escalation) Check(ctx context.Context, u *user.Info, obj *kplanev1.Object) error {
	m := obj.Meta()
	ns := m.GetNamespace()
	var rules []*kplanev1.PolicyRule
	var what string
	switch x := obj.GetKind().(type) {
	case *kplanev1.Object_Role:
		if e.allowed(ctx, u, "escalate", "roles", ns, m.GetName()) {
			return nil
		}
		rules, what = x.Role.GetRules(), "Role "+ns+"/"+m.GetName()
	case *kplanev1.Object_ClusterRole:
		if e.allowed(ctx, u, "escalate", "clusterroles", "", m.GetName()) {
			return nil
		}
		rules, what = x.ClusterRole.GetRules(), "ClusterRole "+m.GetName()
	case *kplanev1.Object_RoleBinding:
		return e.checkBind(ctx, u, ns, x.RoleBinding.GetRoleRef())
	case *kplanev1.Object_ClusterRoleBinding:
		return e.checkBind(ctx, u, "", x.ClusterRoleBinding.GetRoleRef())
	default:
		return nil
	}
	if u.InGroup(user.SystemPrivilegedGroup) {
		return nil
	}
	if missing := Uncovered(e.RBAC.RulesFor(u, ns), rules); len(missing) > 0 {
		return fmt.Errorf("user %q may not create or update %s: it would grant permissions the user does not hold (%s); the escalate verb on the role is required", u.Name, what, strings.Join(missing, ", "))
	}
	return nil
}

func (e *Escalation) checkBind(ctx context.Context, u *user.Info, ns string, ref *kplanev1.RoleRef) error {
	resource := "roles"
	if ref.GetKind() == "ClusterRole" {
		resource = "clusterroles"
	}
	roleNS := ns
	if resource == "clusterroles" {
		roleNS = ""
	}
	// bind is checked where the grant applies: a RoleBinding to a
	// ClusterRole needs bind in the binding's namespace.
	if e.allowed(ctx, u, "bind", resource, ns, ref.GetName()) || (roleNS != ns && e.allowed(ctx, u, "bind", resource, roleNS, ref.GetName())) {
		return nil
	}
	if u.InGroup(user.SystemPrivilegedGroup) {
		return nil
	}
	rules, ok := e.RBAC.roleRules(ns, ref)
	if !ok {
		return fmt.Errorf("user %q may not bind %s %q: it does not exist, so the user cannot be shown to hold its permissions (the bind verb on it is required)", u.Name, ref.GetKind(), ref.GetName())
	}
	if missing := Uncovered(e.RBAC.RulesFor(u, ns), rules); len(missing) > 0 {
		return fmt.Errorf("user %q may not bind %s %q: it grants permissions the user does not hold (%s); the bind verb on the role is required", u.Name, ref.GetKind(), ref.GetName(), strings.Join(missing, ", "))
	}
	return nil
}

func (e *Escalation) allowed(ctx context.Context, u *user.Info, verb, resource, ns, name string) bool {
	d, _ := e.Authz.Authorize(ctx, &Attributes{User: u, Verb: verb, APIGroup: RBACGroup, Resource: resource, Namespace: ns, Name: name})
	return d == Allow
}
