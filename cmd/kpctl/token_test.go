package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestCreateToken(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.WithServiceAccountTokensOpen(key))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := &cluster{t: t, srv: srv, ctx: ctx, addr: srv.Addr()}
	c.must("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\n", "create", "-f", "-")
	tok := strings.TrimSpace(c.must("", "create", "token", "robot", "--duration=20m"))
	u, ok, err := srv.API().ServiceAccountAuthenticator().AuthenticateToken(ctx, tok)
	if !ok || err != nil || u.Name != "system:serviceaccount:default:robot" {
		t.Fatalf("kpctl's token: user %+v ok %v err %v", u, ok, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "token", "nobody"}, `NotFound: serviceaccounts "nobody" not found`},
		{[]string{"create", "token", "robot", "--duration=1m"}, "spec.expirationSeconds"},
		{[]string{"create", "token", "robot", "--duration=soon"}, "invalid --duration"},
		{[]string{"create", "token"}, "exactly one SERVICEACCOUNT name is required, got 0"},
		{[]string{"create", "token", "a", "b"}, "exactly one SERVICEACCOUNT name is required, got 2"},
		{[]string{"create", "token", "robot", "-n", "elsewhere"}, `not found in namespace "elsewhere"`},
	} {
		if e := c.fails("", tc.args...); !strings.Contains(e, tc.want) {
			t.Errorf("kpctl %v: %q, want it to contain %q", tc.args, e, tc.want)
		}
	}
}
