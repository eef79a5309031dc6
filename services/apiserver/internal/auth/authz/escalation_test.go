package authz

import (
	"context"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

func TestEscalation(t *testing.T) {
	r := fixture()
	for _, o := range []*kplanev1.Object{
		clusterRole("role-admin", pr(ss(RBACGroup), ss("roles", "rolebindings", "clusterroles", "clusterrolebindings"), ss("get", "list", "create", "update", "delete"))),
		// A "*" verb would include escalate and bind, as in Kubernetes.
		crb("ops-role-admin", "role-admin", userSubject("ops")),
		crb("ops-pods", "pod-reader", userSubject("ops")),
		clusterRole("escalator", pr(ss(RBACGroup), ss("clusterroles"), ss("escalate"))),
		crb("esc", "escalator", userSubject("esc")),
		crb("esc-admin", "role-admin", userSubject("esc")),
		clusterRole("binder", pr(ss(RBACGroup), ss("clusterroles"), ss("bind"), "all-apps")),
		crb("binder", "binder", userSubject("binder")),
		crb("binder-admin", "role-admin", userSubject("binder")),
	} {
		r.Apply(o, false)
	}
	e := &Escalation{RBAC: r, Authz: Union{r}}
	ops := &user.Info{Name: "ops"}
	check := func(u *user.Info, o *kplanev1.Object) error { return e.Check(context.Background(), u, o) }

	// ops holds get/list/watch pods and RBAC writes, nothing else.
	if err := check(ops, clusterRole("readers", pr(ss(""), ss("pods"), ss("get", "list")))); err != nil {
		t.Errorf("a role within ops' permissions refused: %v", err)
	}
	err := check(ops, clusterRole("deleters", pr(ss(""), ss("pods"), ss("get", "delete"))))
	if err == nil || !strings.Contains(err.Error(), "delete pods") || strings.Contains(err.Error(), "get pods") {
		t.Errorf("escalating role: want refusal naming only delete pods, got %v", err)
	}
	if err := check(ops, clusterRole("wild", pr(ss(""), ss("*"), ss("get")))); err == nil {
		t.Error("holding get pods let ops grant get *")
	}
	if err := check(ops, role("team-a", "secret-reader", pr(ss(""), ss("secrets"), ss("get")))); err == nil {
		t.Error("Role with secrets granted by ops who cannot read secrets")
	}
	// Binding: to a role ops holds, fine; to a bigger one, refused.
	if err := check(ops, crb("x", "pod-reader", userSubject("eve"))); err != nil {
		t.Errorf("binding a role ops holds refused: %v", err)
	}
	if err := check(ops, crb("x", "all-apps", userSubject("eve"))); err == nil || !strings.Contains(err.Error(), "bind") {
		t.Errorf("binding all-apps: want refusal, got %v", err)
	}
	if err := check(ops, roleBinding("team-a", "x", "ClusterRole", "all-apps", userSubject("eve"))); err == nil {
		t.Error("RoleBinding to all-apps by ops accepted")
	}
	if err := check(ops, crb("x", "no-such-role", userSubject("eve"))); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("binding a missing role: want refusal, got %v", err)
	}
	// bob holds deployer in team-a: he may bind it there, not elsewhere.
	bob := &user.Info{Name: "bob"}
	if err := check(bob, roleBinding("team-a", "x", "Role", "deployer", userSubject("eve"))); err != nil {
		t.Errorf("bob binding his own role in team-a refused: %v", err)
	}
	// The escalate and bind verbs lift the checks, for what they name.
	if err := check(&user.Info{Name: "esc"}, clusterRole("anything", pr(ss("*"), ss("*"), ss("*")))); err != nil {
		t.Errorf("escalate verb ignored: %v", err)
	}
	if err := check(&user.Info{Name: "binder"}, crb("x", "all-apps", userSubject("eve"))); err != nil {
		t.Errorf("bind verb ignored: %v", err)
	}
	if err := check(&user.Info{Name: "binder"}, crb("x", "status-writer", userSubject("eve"))); err == nil {
		t.Error("bind on all-apps let binder bind status-writer")
	}
	// system:masters holds everything.
	if err := check(&user.Info{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}, clusterRole("anything", pr(ss("*"), ss("*"), ss("*")))); err != nil {
		t.Errorf("system:masters refused: %v", err)
	}
	// Other kinds pass untouched.
	if err := check(ops, pod("default", "p", "", nil)); err != nil {
		t.Errorf("pod checked for escalation: %v", err)
	}
}

func TestUncovered(t *testing.T) {
	have := []*kplanev1.PolicyRule{
		pr(ss("apps"), ss("deployments", "replicasets/scale"), ss("get", "update")),
		pr(ss(""), ss("pods/*"), ss("get")),
		pr(ss(""), ss("secrets"), ss("get"), "a"),
		{Verbs: []string{"get"}, NonResourceUrls: []string{"/healthz", "/api/*"}},
	}
	cases := []struct {
		want    *kplanev1.PolicyRule
		missing int
	}{
		{pr(ss("apps"), ss("deployments"), ss("get")), 0},
		{pr(ss("apps"), ss("deployments"), ss("get", "delete")), 1},
		{pr(ss("apps"), ss("replicasets/scale"), ss("update")), 0},
		{pr(ss("apps"), ss("replicasets"), ss("update")), 1},
		{pr(ss(""), ss("pods/log", "pods/exec"), ss("get")), 0},
		{pr(ss(""), ss("secrets"), ss("get"), "a"), 0},
		{pr(ss(""), ss("secrets"), ss("get"), "a", "b"), 1},
		{pr(ss(""), ss("secrets"), ss("get")), 1},
		{pr(ss("*"), ss("deployments"), ss("get")), 1},
		{&kplanev1.PolicyRule{Verbs: []string{"get"}, NonResourceUrls: []string{"/healthz", "/api/v1", "/metrics"}}, 1},
	}
	for i, c := range cases {
		if got := Uncovered(have, []*kplanev1.PolicyRule{c.want}); len(got) != c.missing {
			t.Errorf("case %d: missing %v, want %d", i, got, c.missing)
		}
	}
}
