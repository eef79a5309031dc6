package authz

import (
	"context"
	"fmt"
	"slices"
	"sync"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// binding is a RoleBinding or ClusterRoleBinding as the index keeps it.
type binding struct {
	namespace string // "" for a ClusterRoleBinding
	roleKind  string // Role or ClusterRole
	roleName  string
	subjects  []string // subject keys
	// reason is the Allow reason, built once rather than per request.
	reason string
}

// RBAC evaluates Role/ClusterRole rules granted by bindings. Its index is
// kept by the watch-cache feed (Apply, Reset), so a decision is a few map
// lookups: the user's and groups' bindings in the request's namespace and
// cluster-wide, then their roles' rules.
type RBAC struct {
	mu           sync.RWMutex
	roles        map[string][]*kplanev1.PolicyRule // "ns/name"
	clusterRoles map[string][]*kplanev1.PolicyRule // name
	bindings     map[string]*binding               // "ns/name" or "/name" (cluster)
	// bySubject: namespace ("" = cluster bindings) → subject key → binding keys.
	bySubject map[string]map[string]map[string]*binding
}

// NewRBAC returns an empty RBAC authorizer; feed it with Apply.
func NewRBAC() *RBAC {
	return &RBAC{
		roles:        map[string][]*kplanev1.PolicyRule{},
		clusterRoles: map[string][]*kplanev1.PolicyRule{},
		bindings:     map[string]*binding{},
		bySubject:    map[string]map[string]map[string]*binding{},
	}
}

// RBACKinds are the kinds the RBAC index follows.
var RBACKinds = []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}

// subjectKey is how bindings and users meet in the index.
func subjectKey(s *kplanev1.Subject, bindingNS string) string {
	switch s.GetKind() {
	case "User":
		return "u:" + s.GetName()
	case "Group":
		return "g:" + s.GetName()
	case "ServiceAccount":
		ns := s.GetNamespace()
		if ns == "" {
			ns = bindingNS
		}
		return "u:" + user.ServiceAccountUser(ns, s.GetName())
	}
	return ""
}

// Reset replaces everything the index holds of kind with objs.
func (r *RBAC) Reset(kind string, objs []*kplanev1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch kind {
	case "Role":
		clear(r.roles)
	case "ClusterRole":
		clear(r.clusterRoles)
	case "RoleBinding", "ClusterRoleBinding":
		cluster := kind == "ClusterRoleBinding"
		for k, b := range r.bindings {
			if (b.namespace == "") == cluster {
				r.removeBinding(k)
			}
		}
	}
	for _, o := range objs {
		r.apply(o, false)
	}
}

// Apply records one object's new state, or its deletion.
func (r *RBAC) Apply(o *kplanev1.Object, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apply(o, deleted)
}

func (r *RBAC) apply(o *kplanev1.Object, deleted bool) {
	m := o.Meta()
	key := m.GetNamespace() + "/" + m.GetName()
	switch x := o.GetKind().(type) {
	case *kplanev1.Object_Role:
		if deleted {
			delete(r.roles, key)
		} else {
			r.roles[key] = x.Role.GetRules()
		}
	case *kplanev1.Object_ClusterRole:
		if deleted {
			delete(r.clusterRoles, m.GetName())
		} else {
			r.clusterRoles[m.GetName()] = x.ClusterRole.GetRules()
		}
	case *kplanev1.Object_RoleBinding:
		r.removeBinding(key)
		if !deleted {
			r.addBinding(key, m.GetNamespace(), x.RoleBinding.GetRoleRef(), x.RoleBinding.GetSubjects())
		}
	case *kplanev1.Object_ClusterRoleBinding:
		r.removeBinding(key)
		if !deleted {
			r.addBinding(key, "", x.ClusterRoleBinding.GetRoleRef(), x.ClusterRoleBinding.GetSubjects())
		}
	}
}

func (r *RBAC) addBinding(key, ns string, ref *kplanev1.RoleRef, subjects []*kplanev1.Subject) {
	b := &binding{namespace: ns, roleKind: ref.GetKind(), roleName: ref.GetName()}
	b.reason = "allowed by " + b.describe()
	for _, s := range subjects {
		if k := subjectKey(s, ns); k != "" {
			b.subjects = append(b.subjects, k)
		}
	}
	r.bindings[key] = b
	byNS := r.bySubject[ns]
	if byNS == nil {
		byNS = map[string]map[string]*binding{}
		r.bySubject[ns] = byNS
	}
	for _, k := range b.subjects {
		if byNS[k] == nil {
			byNS[k] = map[string]*binding{}
		}
		byNS[k][key] = b
	}
}

func (r *RBAC) removeBinding(key string) {
	b, ok := r.bindings[key]
	if !ok {
		return
	}
	delete(r.bindings, key)
	byNS := r.bySubject[b.namespace]
	for _, k := range b.subjects {
		delete(byNS[k], key)
		if len(byNS[k]) == 0 {
			delete(byNS, k)
		}
	}
	if len(byNS) == 0 {
		delete(r.bySubject, b.namespace)
	}
}

// rulesOf returns a binding's role's rules (nil when the role is absent).
// Callers hold mu.
func (r *RBAC) rulesOf(b *binding) []*kplanev1.PolicyRule {
	if b.roleKind == "ClusterRole" {
		return r.clusterRoles[b.roleName]
	}
	if b.namespace == "" {
		return nil // a ClusterRoleBinding cannot grant a Role
	}
	return r.roles[b.namespace+"/"+b.roleName]
}

// visit calls fn with the rules each of u's bindings grants in ns
// (cluster bindings, then ns's bindings when ns is set) until fn returns
// true.
func (r *RBAC) visit(u *user.Info, ns string, fn func(rules []*kplanev1.PolicyRule, via *binding) bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	namespaces := []string{""}
	if ns != "" {
		namespaces = append(namespaces, ns)
	}
	for _, n := range namespaces {
		byNS := r.bySubject[n]
		if byNS == nil {
			continue
		}
		if r.visitKey(byNS, "u:"+u.Name, fn) {
			return
		}
		for _, g := range u.Groups {
			if r.visitKey(byNS, "g:"+g, fn) {
				return
			}
		}
	}
}

func (r *RBAC) visitKey(byNS map[string]map[string]*binding, key string, fn func([]*kplanev1.PolicyRule, *binding) bool) bool {
	for _, b := range byNS[key] {
		if rules := r.rulesOf(b); len(rules) > 0 && fn(rules, b) {
			return true
		}
	}
	return false
}

// Authorize implements Authorizer: Allow when a rule of a binding of the
// user (or a group) matches; otherwise NoOpinion.
func (r *RBAC) Authorize(_ context.Context, a *Attributes) (Decision, string) {
	if a.User == nil {
		return NoOpinion, "no user"
	}
	var reason string
	r.visit(a.User, a.Namespace, func(rules []*kplanev1.PolicyRule, b *binding) bool {
		for _, rule := range rules {
			if RuleAllows(rule, a) {
				reason = b.reason
				return true
			}
		}
		return false
	})
	if reason != "" {
		return Allow, reason
	}
	return NoOpinion, ""
}

func (b *binding) describe() string {
	if b.namespace == "" {
		return "ClusterRoleBinding granting ClusterRole " + b.roleName
	}
	return fmt.Sprintf("RoleBinding in %s granting %s %s", b.namespace, b.roleKind, b.roleName)
}

// RuleAllows reports whether rule grants a. "*" matches any verb, group
// or resource; "*/scale" any resource's scale and "pods/*" any pod
// subresource; resourceNames confine the rule to those names (and so never
// match a create or a list, which name no object).
func RuleAllows(rule *kplanev1.PolicyRule, a *Attributes) bool {
	if !matches(rule.GetVerbs(), a.Verb) || !matches(rule.GetApiGroups(), a.APIGroup) {
		return false
	}
	if !resourceMatches(rule.GetResources(), a.Resource, a.Subresource) {
		return false
	}
	if len(rule.GetResourceNames()) == 0 {
		return true
	}
	// Kubernetes cannot confine a create by name (the name may be
	// generated), so a named rule never grants one.
	return a.Verb != "create" && a.Name != "" && slices.Contains(rule.GetResourceNames(), a.Name)
}

func matches(list []string, v string) bool {
	for _, x := range list {
		if x == "*" || x == v {
			return true
		}
	}
	return false
}

func resourceMatches(list []string, resource, sub string) bool {
	for _, x := range list {
		if x == "*" {
			return true
		}
		if sub == "" {
			if x == resource {
				return true
			}
			continue
		}
		if len(x) == len(resource)+1+len(sub) && x[:len(resource)] == resource && x[len(resource)] == '/' && x[len(resource)+1:] == sub {
			return true
		}
		if x == "*/"+sub || x == resource+"/*" {
			return true
		}
	}
	return false
}
