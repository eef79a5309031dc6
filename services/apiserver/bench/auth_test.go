package bench_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/pkg/pki"
	"github.com/kplane/kplane/pkg/serviceaccount"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// BenchmarkCreateAuth compares Create throughput (64 clients, one
// connection each, fsync off so the apiserver's CPU is what is measured)
// on two apiservers in the same run: plain (no TLS, no authentication,
// AlwaysAllow), and secured (TLS, Node,RBAC authorization) reached four
// ways: the admin's client certificate and a static token of
// system:masters, and a ServiceAccount token (a TokenRequest) whose
// account may create pods only through a RoleBinding, so every request
// is a JWT authentication, a liveness check and an RBAC rule match —
// the "TLS + token auth + RBAC". The phases alternate over
// rounds; it prints creates/s and the ratio of each secured mode to
// plain, and asserts nothing. Run with `make bench-auth`.
func BenchmarkCreateAuth(b *testing.B) {
	for range b.N {
		runCreateAuth(b)
	}
}

func runCreateAuth(b *testing.B) {
	dir := b.TempDir()
	if _, err := pki.Generate(dir, pki.Options{Controllers: []string{}}); err != nil {
		b.Fatal(err)
	}
	const token = "bench-token-0123456789abcdef"
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",bench,uid-bench,system:masters\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	saKey, err := serviceaccount.LoadPrivateKeyFile(filepath.Join(dir, pki.SAKey))
	if err != nil {
		b.Fatal(err)
	}
	plain := testserver.Start(b)
	secure := testserver.Start(b, testserver.WithTLS(filepath.Join(dir, pki.APIServerCert), filepath.Join(dir, pki.APIServerKey)),
		testserver.WithClientCA(filepath.Join(dir, pki.CACert)), testserver.WithTokenAuthFile(tokens),
		testserver.WithServiceAccountKeys(saKey))

	roots, admin := adminTLS(b, dir)
	dial := func(addr string, creds credentials.TransportCredentials) []kplanev1.ResourcesClient {
		cs := make([]kplanev1.ResourcesClient, clients)
		for i := range cs {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				b.Fatalf("dial: %v", err)
			}
			b.Cleanup(func() { _ = conn.Close() })
			cs[i] = kplanev1.NewResourcesClient(conn)
		}
		return cs
	}
	saToken := rbacServiceAccountToken(b, dial(secure.Addr(), credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}}))[0],
		dial(secure.Addr(), credentials.NewTLS(&tls.Config{RootCAs: roots}))[0])
	modes := []struct {
		name  string
		conns []kplanev1.ResourcesClient
		ctx   func(context.Context) context.Context
	}{
		{"plain", dial(plain.Addr(), insecure.NewCredentials()), func(c context.Context) context.Context { return c }},
		{"TLS+client-cert", dial(secure.Addr(), credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}})),
			func(c context.Context) context.Context { return c }},
		{"TLS+token", dial(secure.Addr(), credentials.NewTLS(&tls.Config{RootCAs: roots})),
			func(c context.Context) context.Context {
				return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+token)
			}},
		{"TLS+SA-token+RBAC", dial(secure.Addr(), credentials.NewTLS(&tls.Config{RootCAs: roots})),
			func(c context.Context) context.Context {
				return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+saToken)
			}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const perMode, authRounds = 24000, 6
	reqs := make([][]*kplanev1.CreateRequest, len(modes))
	for m, mode := range modes {
		for i, c := range mode.conns {
			if _, err := c.Create(mode.ctx(ctx), &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("warm-%d-%02d", m, i))}); err != nil {
				b.Fatalf("%s warm-up: %v", mode.name, err)
			}
		}
		for i := range perMode {
			reqs[m] = append(reqs[m], &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("auth-%d-%06d", m, i))})
		}
	}
	res := make([]phaseResult, len(modes))
	per := perMode / authRounds
	for r := range authRounds {
		for m, mode := range modes {
			mctx := mode.ctx(ctx)
			pr := phase(mctx, r*per, per, func(ctx context.Context, w, i int) error {
				_, err := mode.conns[w].Create(ctx, reqs[m][i])
				return err
			})
			if pr.err != nil {
				b.Fatalf("%s phase: %v", mode.name, pr.err)
			}
			res[m].done += pr.done
			res[m].elapsed += pr.elapsed
		}
	}
	base := res[0].rate()
	b.ReportMetric(0, "ns/op")
	for m, mode := range modes {
		b.ReportMetric(res[m].rate(), mode.name+"-creates/s")
		fmt.Printf("create throughput %-16s %6.0f objects/s (%d in %v), ratio to plain %.2f\n",
			mode.name, res[m].rate(), res[m].done, res[m].elapsed.Round(time.Millisecond), res[m].rate()/base)
	}
}

// rbacServiceAccountToken makes, as the admin, the ServiceAccounts the
// pods name (default) and the one the benchmark acts as (bench), a Role
// that may create pods in default and its RoleBinding to bench, then
// returns a TokenRequest token of bench once RBAC allows it to create
// pods (the binding reaches the authorizer through the watch cache).
func rbacServiceAccountToken(b *testing.B, admin, anon kplanev1.ResourcesClient) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	meta := func(name string) *kplanev1.ObjectMeta { return &kplanev1.ObjectMeta{Namespace: "default", Name: name} }
	for _, o := range []*kplanev1.Object{
		kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: meta("default")}),
		kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: meta("bench")}),
		kplanev1.MustWrap(&kplanev1.Role{Metadata: meta("pod-creator"), Rules: []*kplanev1.PolicyRule{
			{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}}}),
		kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: meta("bench-creates-pods"),
			RoleRef:  &kplanev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-creator"},
			Subjects: []*kplanev1.Subject{{Kind: "ServiceAccount", Name: "bench", Namespace: "default"}}}),
	} {
		if _, err := admin.Create(ctx, &kplanev1.CreateRequest{Object: o}); err != nil {
			b.Fatalf("create %s: %v", o.Meta().GetName(), err)
		}
	}
	tr, err := admin.CreateToken(ctx, &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "bench", ExpirationSeconds: 3600})
	if err != nil {
		b.Fatalf("token request: %v", err)
	}
	tctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tr.GetToken())
	for {
		r, err := anon.CheckAccess(tctx, &kplanev1.CheckAccessRequest{Verb: "create", Resource: "pods", Namespace: "default"})
		if err == nil && r.GetAllowed() {
			return tr.GetToken()
		}
		select {
		case <-ctx.Done():
			b.Fatalf("bench may not create pods yet: %v %v", r, err)
		case <-time.After(10 * time.Millisecond): // polling the authorizer's view
		}
	}
}
