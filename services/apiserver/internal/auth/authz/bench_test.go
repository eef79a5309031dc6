package authz

import (
	"context"
	"fmt"
	"testing"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// BenchmarkAuthorize is the decision cost of a typical request
// (replicactl writing a ReplicaSet's status, granted by its
// ClusterRoleBinding)
// with the bootstrap policy plus ~100 other bindings in place, through
// the Node,RBAC chain.
func BenchmarkAuthorize(b *testing.B) {
	r := bootstrapRBAC(b)
	for i := 0; i < 100; i++ {
		ns := fmt.Sprintf("team-%d", i%10)
		r.Apply(role(ns, fmt.Sprintf("role-%d", i), pr(ss("apps"), ss("deployments"), ss("get", "update"))), false)
		r.Apply(roleBinding(ns, fmt.Sprintf("b-%d", i), "Role", fmt.Sprintf("role-%d", i), userSubject(fmt.Sprintf("user-%d", i)),
			groupSubject(fmt.Sprintf("group-%d", i%7))), false)
	}
	chain := Union{NewNode(), r}
	a := &Attributes{User: &user.Info{Name: ControllerUser("replicactl"), Groups: []string{user.AllAuthenticated}},
		Verb: "update", APIGroup: "apps", Resource: "replicasets", Subresource: "status", Namespace: "team-3", Name: "web"}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d, _ := chain.Authorize(ctx, a); d != Allow {
			b.Fatal("denied")
		}
	}
}

// BenchmarkAuthorizeDenied is the cost of a request nothing grants (every
// binding of the user and its groups is looked at).
func BenchmarkAuthorizeDenied(b *testing.B) {
	r := bootstrapRBAC(b)
	for i := 0; i < 100; i++ {
		r.Apply(crb(fmt.Sprintf("b-%d", i), ClusterAdmin, userSubject(fmt.Sprintf("user-%d", i))), false)
	}
	a := &Attributes{User: &user.Info{Name: "mallory", Groups: []string{user.AllAuthenticated}},
		Verb: "delete", Resource: "nodes", Name: "n"}
	chain := Union{NewNode(), r}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d, _ := chain.Authorize(ctx, a); d == Allow {
			b.Fatal("allowed")
		}
	}
}
