package authz

import (
	"context"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

func clusterRole(name string, rules ...*kplanev1.PolicyRule) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: name}, Rules: rules})
}

func role(ns, name string, rules ...*kplanev1.PolicyRule) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Role{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules})
}

func roleBinding(ns, name, kind, roleName string, subjects ...*kplanev1.Subject) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef: &kplanev1.RoleRef{ApiGroup: RBACGroup, Kind: kind, Name: roleName}, Subjects: subjects})
}

func crb(name, roleName string, subjects ...*kplanev1.Subject) *kplanev1.Object {
	return clusterBinding(name, roleName, subjects...)
}

func pr(groups, resources, verbs []string, names ...string) *kplanev1.PolicyRule {
	return &kplanev1.PolicyRule{ApiGroups: groups, Resources: resources, Verbs: verbs, ResourceNames: names}
}

func ss(s ...string) []string { return s }

// fixture is a small policy exercising every matching rule.
func fixture() *RBAC {
	r := NewRBAC()
	for _, o := range []*kplanev1.Object{
		clusterRole("pod-reader", pr(ss(""), ss("pods"), ss("get", "list", "watch"))),
		clusterRole("all-apps", pr(ss("apps"), ss("*"), ss("*"))),
		clusterRole("status-writer", pr(ss(""), ss("pods/status"), ss("update", "patch"))),
		clusterRole("scaler", pr(ss("*"), ss("*/scale"), ss("get", "update"))),
		clusterRole("one-secret", pr(ss(""), ss("secrets"), ss("get", "update", "create", "delete"), "db-password")),
		clusterRole("pod-subs", pr(ss(""), ss("pods/*"), ss("get"))),
		role("team-a", "deployer", pr(ss("apps"), ss("deployments"), ss("create", "update", "patch", "delete"))),
		// alice reads pods everywhere.
		crb("alice-reads", "pod-reader", userSubject("alice")),
		// group devs may do anything in apps, but only in team-a (a
		// RoleBinding confines a ClusterRole to its namespace).
		roleBinding("team-a", "devs-apps", "ClusterRole", "all-apps", groupSubject("devs")),
		// bob deploys in team-a through a Role.
		roleBinding("team-a", "bob-deploys", "Role", "deployer", userSubject("bob")),
		// the nodes group writes pod status everywhere.
		crb("status", "status-writer", groupSubject("writers")),
		crb("scalers", "scaler", userSubject("carol")),
		roleBinding("team-a", "one-secret", "ClusterRole", "one-secret", userSubject("dave")),
		roleBinding("team-a", "sa", "ClusterRole", "pod-reader", &kplanev1.Subject{Kind: "ServiceAccount", Name: "builder", Namespace: "team-a"}),
		crb("subs", "pod-subs", userSubject("erin")),
		// a binding to a missing role grants nothing.
		crb("dangling", "no-such-role", userSubject("frank")),
		// a RoleBinding naming a Role of another namespace grants nothing there.
		roleBinding("team-b", "bob-deploys", "Role", "deployer", userSubject("gina")),
	} {
		r.Apply(o, false)
	}
	return r
}

func TestRBACTable(t *testing.T) {
	r := fixture()
	u := func(name string, groups ...string) *user.Info { return &user.Info{Name: name, Groups: groups} }
	sa := &user.Info{Name: user.ServiceAccountUser("team-a", "builder"), Groups: user.ServiceAccountGroups("team-a")}
	cases := []struct {
		name string
		a    Attributes
		want bool
	}{
		{"cluster role via cluster binding", Attributes{User: u("alice"), Verb: "get", Resource: "pods", Namespace: "x", Name: "p"}, true},
		{"cross-namespace list", Attributes{User: u("alice"), Verb: "list", Resource: "pods"}, true},
		{"verb not granted", Attributes{User: u("alice"), Verb: "delete", Resource: "pods", Namespace: "x", Name: "p"}, false},
		{"subresource not granted by resource", Attributes{User: u("alice"), Verb: "get", Resource: "pods", Subresource: "log", Namespace: "x", Name: "p"}, false},
		{"other group", Attributes{User: u("alice"), Verb: "get", APIGroup: "apps", Resource: "pods", Namespace: "x"}, false},
		{"wildcard resource and verb, in the binding's namespace", Attributes{User: u("x", "devs"), Verb: "delete", APIGroup: "apps", Resource: "replicasets", Namespace: "team-a", Name: "r"}, true},
		{"wildcard covers subresources", Attributes{User: u("x", "devs"), Verb: "update", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "team-a", Name: "d"}, true},
		{"RoleBinding to ClusterRole confined to its namespace", Attributes{User: u("x", "devs"), Verb: "get", APIGroup: "apps", Resource: "replicasets", Namespace: "team-b", Name: "r"}, false},
		{"RoleBinding does not grant cluster-wide list", Attributes{User: u("x", "devs"), Verb: "list", APIGroup: "apps", Resource: "replicasets"}, false},
		{"Role via RoleBinding", Attributes{User: u("bob"), Verb: "patch", APIGroup: "apps", Resource: "deployments", Namespace: "team-a", Name: "web"}, true},
		{"Role not in another namespace", Attributes{User: u("bob"), Verb: "patch", APIGroup: "apps", Resource: "deployments", Namespace: "team-b", Name: "web"}, false},
		{"Role of another namespace grants nothing", Attributes{User: u("gina"), Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "team-b"}, false},
		{"Role verbs", Attributes{User: u("bob"), Verb: "get", APIGroup: "apps", Resource: "deployments", Namespace: "team-a", Name: "web"}, false},
		{"status subresource", Attributes{User: u("x", "writers"), Verb: "update", Resource: "pods", Subresource: "status", Namespace: "n", Name: "p"}, true},
		{"status rule is not the object", Attributes{User: u("x", "writers"), Verb: "update", Resource: "pods", Namespace: "n", Name: "p"}, false},
		{"*/scale", Attributes{User: u("carol"), Verb: "update", APIGroup: "apps", Resource: "statefulsets", Subresource: "scale", Namespace: "n", Name: "s"}, true},
		{"*/scale is not status", Attributes{User: u("carol"), Verb: "update", APIGroup: "apps", Resource: "statefulsets", Subresource: "status", Namespace: "n", Name: "s"}, false},
		{"pods/*", Attributes{User: u("erin"), Verb: "get", Resource: "pods", Subresource: "log", Namespace: "n", Name: "p"}, true},
		{"pods/* is not pods", Attributes{User: u("erin"), Verb: "get", Resource: "pods", Namespace: "n", Name: "p"}, false},
		{"resourceNames: named", Attributes{User: u("dave"), Verb: "get", Resource: "secrets", Namespace: "team-a", Name: "db-password"}, true},
		{"resourceNames: other name", Attributes{User: u("dave"), Verb: "get", Resource: "secrets", Namespace: "team-a", Name: "tls"}, false},
		{"resourceNames: list names nothing", Attributes{User: u("dave"), Verb: "list", Resource: "secrets", Namespace: "team-a"}, false},
		{"resourceNames never grant create", Attributes{User: u("dave"), Verb: "create", Resource: "secrets", Namespace: "team-a", Name: "db-password"}, false},
		{"service account subject", Attributes{User: sa, Verb: "list", Resource: "pods", Namespace: "team-a"}, true},
		{"service account confined", Attributes{User: sa, Verb: "list", Resource: "pods", Namespace: "default"}, false},
		{"dangling binding", Attributes{User: u("frank"), Verb: "get", Resource: "pods", Namespace: "n", Name: "p"}, false},
		{"unknown user", Attributes{User: u("mallory", "system:authenticated"), Verb: "get", Resource: "pods", Namespace: "n", Name: "p"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, why := r.Authorize(context.Background(), &c.a)
			if (d == Allow) != c.want {
				t.Fatalf("decision %v (%s), want allowed=%v", d, why, c.want)
			}
			if d == Deny {
				t.Fatalf("RBAC must never Deny (only NoOpinion), got Deny")
			}
		})
	}
}

// TestRBACIndexFollowsChanges: deleting a binding or a role, or editing
// a binding's subjects, takes effect in the next decision; Reset drops
// objects no longer present.
func TestRBACIndexFollowsChanges(t *testing.T) {
	r := fixture()
	a := &Attributes{User: &user.Info{Name: "alice"}, Verb: "get", Resource: "pods", Namespace: "n", Name: "p"}
	allowed := func() bool { d, _ := r.Authorize(context.Background(), a); return d == Allow }
	if !allowed() {
		t.Fatal("alice should read pods")
	}
	r.Apply(crb("alice-reads", "pod-reader", userSubject("someone-else")), false)
	if allowed() {
		t.Fatal("alice still allowed after the binding's subjects changed")
	}
	r.Apply(crb("alice-reads", "pod-reader", userSubject("alice")), false)
	if !allowed() {
		t.Fatal("alice not allowed after being put back")
	}
	r.Apply(clusterRole("pod-reader"), true)
	if allowed() {
		t.Fatal("alice allowed after the role was deleted")
	}
	r.Apply(clusterRole("pod-reader", pr(ss(""), ss("pods"), ss("get"))), false)
	if !allowed() {
		t.Fatal("alice not allowed after the role came back")
	}
	r.Reset("ClusterRoleBinding", nil)
	if allowed() {
		t.Fatal("alice allowed after a reset without her binding")
	}
	if len(r.bySubject[""]) != 0 {
		t.Fatalf("reset left cluster subjects: %v", r.bySubject[""])
	}
	// Namespace bindings survive a reset of cluster bindings.
	d, _ := r.Authorize(context.Background(), &Attributes{User: &user.Info{Name: "bob"}, Verb: "patch", APIGroup: "apps", Resource: "deployments", Namespace: "team-a", Name: "w"})
	if d != Allow {
		t.Fatal("bob's RoleBinding lost by a ClusterRoleBinding reset")
	}
}

func TestUnionAndModes(t *testing.T) {
	deny := AuthorizerFunc(func(context.Context, *Attributes) (Decision, string) { return Deny, "no" })
	none := AuthorizerFunc(func(context.Context, *Attributes) (Decision, string) { return NoOpinion, "" })
	a := &Attributes{User: &user.Info{Name: "x"}, Verb: "get", Resource: "pods"}
	if d, _ := (Union{none, AlwaysAllow}).Authorize(context.Background(), a); d != Allow {
		t.Error("NoOpinion then AlwaysAllow: want Allow")
	}
	if d, _ := (Union{deny, AlwaysAllow}).Authorize(context.Background(), a); d != Deny {
		t.Error("Deny first: want Deny")
	}
	if d, _ := (Union{none}).Authorize(context.Background(), a); d != Deny {
		t.Error("only NoOpinion: want Deny")
	}
	masters := &Attributes{User: &user.Info{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}, Verb: "delete", Resource: "nodes"}
	if d, _ := (Union{deny}).Authorize(context.Background(), masters); d != Allow {
		t.Error("system:masters: want Allow before any authorizer")
	}
	for _, bad := range []string{"", "RBAC,", "rbac", "RBAC,RBAC", "Webhook"} {
		if _, err := ParseModes(bad); err == nil {
			t.Errorf("ParseModes(%q) accepted", bad)
		}
	}
	m, err := ParseModes("Node, RBAC")
	if err != nil || len(m) != 2 || m[0] != ModeNode || m[1] != ModeRBAC {
		t.Errorf("ParseModes: %v %v", m, err)
	}
}

func TestVerbRefinement(t *testing.T) {
	ctx := WithVerb(context.Background(), "patch")
	if v := verbFrom(ctx, "update"); v != "patch" {
		t.Errorf("update refined to %q", v)
	}
	// A verb the method cannot mean is ignored.
	if v := verbFrom(ctx, "delete"); v != "delete" {
		t.Errorf("delete refined to %q by patch", v)
	}
	if v := verbFrom(WithVerb(context.Background(), "get"), "delete"); v != "delete" {
		t.Errorf("delete refined to %q", v)
	}
	if v := verbFrom(WithVerb(context.Background(), "deletecollection"), "delete"); v != "deletecollection" {
		t.Errorf("delete not refined: %q", v)
	}
}
