package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestAuthCanI(t *testing.T) {
	// AlwaysAllow: everything is allowed.
	c := newCluster(t)
	if out := c.must("", "auth", "can-i", "delete", "nodes", "node-1"); out != "yes\n" {
		t.Errorf("AlwaysAllow: got %q, want yes", out)
	}
	if out := c.must("", "auth", "can-i", "update", "pods/status", "-n", "kplane-system"); out != "yes\n" {
		t.Errorf("AlwaysAllow subresource: got %q", out)
	}

	// RBAC: the anonymous caller holds nothing.
	srv := testserver.Start(t, testserver.WithAuthorization("", "RBAC"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := kpctl(ctx, srv.Addr(), "", "auth", "can-i", "create", "pods")
	if r.code == 0 || !strings.HasPrefix(r.stdout, "no") {
		t.Errorf("RBAC anonymous: exit %d stdout %q, want no and a failure", r.code, r.stdout)
	}
	if r := kpctl(ctx, srv.Addr(), "", "auth", "can-i", "-q", "create", "pods"); r.code == 0 || r.stdout != "" {
		t.Errorf("quiet: exit %d stdout %q", r.code, r.stdout)
	}
	// Denied requests are PermissionDenied errors naming the user.
	if r := kpctl(ctx, srv.Addr(), "", "get", "pods"); r.code == 0 || !strings.Contains(r.stderr, "system:anonymous") {
		t.Errorf("get pods as anonymous under RBAC: exit %d stderr %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"auth"}, {"auth", "can-i", "get"}, {"auth", "may", "get", "pods"}, {"auth", "can-i", "get", "pods", "a", "b"}} {
		if r := kpctl(ctx, unreachable, "", bad...); r.code == 0 {
			t.Errorf("kpctl %v succeeded", bad)
		}
	}
}
