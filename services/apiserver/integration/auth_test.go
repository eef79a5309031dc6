package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/pki"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/apiserver"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// authFixture is a TLS apiserver with client certificates and a static
// token file, plus a second CA the server does not trust.
type authFixture struct {
	srv      *testserver.Server
	dir      string // the cluster's certificates
	otherDir string // another CA's
}

const staticToken = "tok-alice-0123456789"

func startAuth(t *testing.T, anonymous bool) *authFixture {
	t.Helper()
	f := &authFixture{dir: t.TempDir(), otherDir: t.TempDir()}
	for _, d := range []string{f.dir, f.otherDir} {
		if _, err := pki.Generate(d, pki.Options{Controllers: []string{"replicactl"}}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := filepath.Join(f.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(staticToken+",alice,uid-alice,\"dev,ops\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.srv = testserver.Start(t, func(c *apiserver.Config) {
		c.TLSCertFile = filepath.Join(f.dir, pki.APIServerCert)
		c.TLSKeyFile = filepath.Join(f.dir, pki.APIServerKey)
		c.ClientCAFile = filepath.Join(f.dir, pki.CACert)
		c.TokenAuthFile = tokens
		c.AnonymousAuth = anonymous
		// Authentication alone is under test here: who may do what once
		// in is RBAC's (TestAuthenticationTurnsOnRBAC).
		c.AuthorizationModes = []string{"AlwaysAllow"}
	})
	return f
}

// TestAuthenticationTurnsOnRBAC: once an authenticator is configured and
// no --authorization-mode is given, Node,RBAC decide: the admin
// (system:masters) may create a pod, a static-token user without a
// binding is PermissionDenied and nothing is written.
func TestAuthenticationTurnsOnRBAC(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.Generate(dir, pki.Options{Controllers: []string{}}); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(staticToken+",alice,uid-alice,\"dev,ops\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, func(c *apiserver.Config) {
		c.TLSCertFile = filepath.Join(dir, pki.APIServerCert)
		c.TLSKeyFile = filepath.Join(dir, pki.APIServerKey)
		c.ClientCAFile = filepath.Join(dir, pki.CACert)
		c.TokenAuthFile = tokens
	})
	ctx := testCtx(t)
	admin := kplanev1.NewResourcesClient(dialTLS(t, srv.Addr(), tlsConfig(t, dir, dir, "admin")))
	if _, err := admin.Create(ctx, authPod("by-admin")); err != nil {
		t.Fatalf("admin certificate: %v", err)
	}
	anon := kplanev1.NewResourcesClient(dialTLS(t, srv.Addr(), tlsConfig(t, dir, "", "")))
	_, err := anon.Create(withToken(ctx, staticToken), authPod("by-alice"))
	requireCode(t, err, codes.PermissionDenied, `User "alice" cannot create resource "pods"`)
	requireAbsent(t, srv, "by-alice")
}

// tlsConfig verifies the server against caDir's CA and presents
// certName's certificate from certDir ("" for none).
func tlsConfig(t *testing.T, caDir, certDir, certName string) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(caDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certName != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(certDir, certName+".crt"), filepath.Join(certDir, certName+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func authPod(name string) *kplanev1.CreateRequest {
	return &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	})}
}

// requireAbsent: a refused write left nothing behind.
func requireAbsent(t *testing.T, srv *testserver.Server, name string) {
	t.Helper()
	_, err := srv.API().Store().Get(testCtx(t), "Pod", "default", name)
	requireCode(t, err, codes.NotFound)
}

// TestAuthenticationGRPC: over real TLS, each way in is accepted or
// refused with its code, and a refused write writes nothing.
func TestAuthenticationGRPC(t *testing.T) {
	f := startAuth(t, false)
	ctx := testCtx(t)
	addr := f.srv.Addr()

	admin := kplanev1.NewResourcesClient(dialTLS(t, addr, tlsConfig(t, f.dir, f.dir, "admin")))
	if _, err := admin.Create(ctx, authPod("by-admin")); err != nil {
		t.Fatalf("admin certificate: %v", err)
	}
	ctrl := kplanev1.NewResourcesClient(dialTLS(t, addr, tlsConfig(t, f.dir, f.dir, "replicactl")))
	if _, err := ctrl.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "by-admin"}); err != nil {
		t.Fatalf("controller certificate: %v", err)
	}
	anonConn := dialTLS(t, addr, tlsConfig(t, f.dir, "", ""))
	anon := kplanev1.NewResourcesClient(anonConn)
	if _, err := anon.Create(withToken(ctx, staticToken), authPod("by-token")); err != nil {
		t.Fatalf("static token: %v", err)
	}

	_, err := anon.Create(ctx, authPod("no-creds"))
	requireCode(t, err, codes.Unauthenticated, "no credentials")
	requireAbsent(t, f.srv, "no-creds")

	_, err = anon.Create(withToken(ctx, "not-a-token"), authPod("bad-token"))
	requireCode(t, err, codes.Unauthenticated, "invalid bearer token")
	requireAbsent(t, f.srv, "bad-token")

	_, err = anon.Create(metadata.AppendToOutgoingContext(ctx, "authorization", "Basic YTpi"), authPod("basic"))
	requireCode(t, err, codes.Unauthenticated, "Bearer")
	requireAbsent(t, f.srv, "basic")

	foreign := kplanev1.NewResourcesClient(dialTLS(t, addr, tlsConfig(t, f.dir, f.otherDir, "admin")))
	_, err = foreign.Create(ctx, authPod("foreign-cert"))
	requireCode(t, err, codes.Unauthenticated, "unknown authority")
	requireAbsent(t, f.srv, "foreign-cert")
	// A bad certificate is refused even with a good token beside it.
	_, err = foreign.Create(withToken(ctx, staticToken), authPod("foreign-cert-token"))
	requireCode(t, err, codes.Unauthenticated, "unknown authority")
	requireAbsent(t, f.srv, "foreign-cert-token")

	// The client checks the server: trusting another CA, it never connects.
	wrongCA := kplanev1.NewResourcesClient(dialTLS(t, addr, tlsConfig(t, f.otherDir, f.otherDir, "admin")))
	_, err = wrongCA.Create(ctx, authPod("wrong-ca"))
	requireCode(t, err, codes.Unavailable, "unknown authority")
	requireAbsent(t, f.srv, "wrong-ca")

	// Streams are authenticated too.
	w, err := anon.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err == nil {
		_, err = w.Recv()
	}
	requireCode(t, err, codes.Unauthenticated)
	w, err = admin.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Recv(); err != nil || ev.GetObject().Meta().GetNamespace() != "default" {
		t.Fatalf("admin watch: %v %v", ev, err)
	}

	// Health is public, as probes carry no credentials; reflection is not.
	hc, err := healthpb.NewHealthClient(anonConn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without credentials: %v %v", hc, err)
	}
	requireCode(t, reflect(ctx, anonConn), codes.Unauthenticated)
	if err := reflect(withToken(ctx, staticToken), anonConn); err != nil {
		t.Fatalf("reflection with a token: %v", err)
	}
}

// reflect lists services over gRPC reflection.
func reflect(ctx context.Context, conn *grpc.ClientConn) error {
	s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	// A refused stream may already be closed when the request is sent
	// (io.EOF); its status then comes from Recv.
	if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = s.Recv()
	_ = s.CloseSend() // the answer (or error) is what the test checks
	return err
}

// TestAnonymousAuth: with --anonymous-auth a request without credentials
// gets in (as system:anonymous), but bad credentials are still refused.
func TestAnonymousAuth(t *testing.T) {
	f := startAuth(t, true)
	ctx := testCtx(t)
	c := kplanev1.NewResourcesClient(dialTLS(t, f.srv.Addr(), tlsConfig(t, f.dir, "", "")))
	if _, err := c.Create(ctx, authPod("anonymous")); err != nil {
		t.Fatalf("anonymous: %v", err)
	}
	_, err := c.Create(withToken(ctx, "nope"), authPod("bad-token"))
	requireCode(t, err, codes.Unauthenticated, "invalid bearer token")
	requireAbsent(t, f.srv, "bad-token")
	foreign := kplanev1.NewResourcesClient(dialTLS(t, f.srv.Addr(), tlsConfig(t, f.dir, f.otherDir, "admin")))
	_, err = foreign.Create(ctx, authPod("foreign"))
	requireCode(t, err, codes.Unauthenticated)
	requireAbsent(t, f.srv, "foreign")
}

// TestTLSWithoutAuthenticators: TLS alone changes nothing about who may
// do what (every request is anonymous, as without TLS).
func TestTLSWithoutAuthenticators(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.Generate(dir, pki.Options{Controllers: []string{}}); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, func(c *apiserver.Config) {
		c.TLSCertFile = filepath.Join(dir, pki.APIServerCert)
		c.TLSKeyFile = filepath.Join(dir, pki.APIServerKey)
	})
	c := kplanev1.NewResourcesClient(dialTLS(t, srv.Addr(), tlsConfig(t, dir, "", "")))
	if _, err := c.Create(testCtx(t), authPod("plain")); err != nil {
		t.Fatal(err)
	}
}

// TestAuthConfigErrors: bad authentication settings fail the start with
// the flag's name.
func TestAuthConfigErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.Generate(dir, pki.Options{Controllers: []string{}}); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("ok,a,1\ntok,,u\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, pki.APIServerCert), filepath.Join(dir, pki.APIServerKey)
	for _, c := range []struct {
		set  func(*apiserver.Config)
		want string
	}{
		{func(c *apiserver.Config) { c.TLSCertFile = crt }, "--tls-cert-file and --tls-key-file"},
		{func(c *apiserver.Config) { c.TLSCertFile, c.TLSKeyFile = crt, filepath.Join(dir, "admin.key") }, "--tls-cert-file/--tls-key-file"},
		{func(c *apiserver.Config) { c.ClientCAFile = filepath.Join(dir, pki.CACert) }, "--client-ca-file needs TLS"},
		{func(c *apiserver.Config) { c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = crt, key, key }, "--client-ca-file"},
		{func(c *apiserver.Config) { c.TokenAuthFile = bad }, "--token-auth-file: token auth file " + bad + ": line 2: field 2 (user): must not be empty"},
	} {
		cfg := apiserver.Defaults()
		cfg.DataDir, cfg.HealthAddr, cfg.Listen = t.TempDir(), "", "127.0.0.1:0"
		c.set(&cfg)
		api, err := apiserver.Start(testCtx(t), cfg)
		if err == nil {
			api.Stop()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// TestAuthenticationREST: the REST side on the same TLS listener gets
// http/1.1 by ALPN and authenticates the same way; refusals are 401
// Status objects and write nothing.
func TestAuthenticationREST(t *testing.T) {
	f := startAuth(t, false)
	base := "https://" + f.srv.Addr()
	do := func(cfg *tls.Config, method, path, token, body string) (*http.Response, []byte) {
		t.Helper()
		// The transport offers h2 and http/1.1, as browsers and curl do.
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(testCtx(t), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	adminCfg := tlsConfig(t, f.dir, f.dir, "admin")
	resp, body := do(adminCfg, http.MethodGet, "/api/v1/namespaces/default/pods", "", "")
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/2.0" || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("admin list: %s %s %q: %s", resp.Status, resp.Proto, resp.TLS.NegotiatedProtocol, body)
	}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`
	if resp, body := do(tlsConfig(t, f.dir, "", ""), http.MethodPost, "/api/v1/namespaces/default/pods", staticToken, fmt.Sprintf(pod, "rest-token")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("token create: %s: %s", resp.Status, body)
	}
	for _, c := range []struct {
		name, token string
		cfg         *tls.Config
		want        string
	}{
		{"rest-none", "", tlsConfig(t, f.dir, "", ""), "no credentials"},
		{"rest-bad-token", "nope", tlsConfig(t, f.dir, "", ""), "invalid bearer token"},
		{"rest-foreign", "", tlsConfig(t, f.dir, f.otherDir, "admin"), "unknown authority"},
	} {
		resp, body := do(c.cfg, http.MethodPost, "/api/v1/namespaces/default/pods", c.token, fmt.Sprintf(pod, c.name))
		var st struct{ Kind, Reason, Message string }
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("%s: %s: %v", c.name, body, err)
		}
		if resp.StatusCode != http.StatusUnauthorized || st.Kind != "Status" || st.Reason != "Unauthorized" || !strings.Contains(st.Message, c.want) {
			t.Errorf("%s: %s %+v, want 401 Unauthorized with %q", c.name, resp.Status, st, c.want)
		}
		requireAbsent(t, f.srv, c.name)
	}
}

// TestKubectlWithAdminKubeconfig: the real kubectl works with the admin
// kubeconfig `kpctl certs` writes, and without credentials is refused.
func TestKubectlWithAdminKubeconfig(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on the PATH")
	}
	f := startAuth(t, false)
	if _, err := pki.WriteAdminKubeconfig(f.dir, "https://"+f.srv.Addr()); err != nil {
		t.Fatal(err)
	}
	kubectl := func(kubeconfig string, args ...string) (string, error) {
		cmd := exec.CommandContext(testCtx(t), bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	kc := filepath.Join(f.dir, pki.AdminKubeconfig)
	if out, err := kubectl(kc, "create", "namespace", "team-a"); err != nil {
		t.Fatalf("kubectl create: %v: %s", err, out)
	}
	if out, err := kubectl(kc, "get", "namespaces"); err != nil || !strings.Contains(out, "team-a") {
		t.Fatalf("kubectl get: %v: %s", err, out)
	}
	// The same server and CA with a token it does not know: refused,
	// nothing created (without any credentials kubectl would prompt for a
	// password instead).
	noUser := filepath.Join(t.TempDir(), "anon.kubeconfig")
	ca, _ := os.ReadFile(filepath.Join(f.dir, pki.CACert))
	anon := pki.Kubeconfig("https://"+f.srv.Addr(), ca, nil, nil)
	anon = []byte(strings.NewReplacer("    client-certificate-data: \n", "", "    client-key-data: \n", "").Replace(string(anon)))
	if err := os.WriteFile(noUser, anon, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := kubectl(noUser, "--token", "nope", "create", "namespace", "team-b")
	if err == nil || !strings.Contains(out, "You must be logged in") {
		t.Fatalf("kubectl without credentials: %v: %s", err, out)
	}
	if _, err := f.srv.API().Store().Get(testCtx(t), "Namespace", "", "team-b"); err == nil {
		t.Fatal("team-b was created without credentials")
	}
}

// TestClientPackageCertificates: pkg/client's --client-cert-file and
// --client-key-file (every service binary's flags) authenticate against
// the real server; without them the same connection is refused.
func TestClientPackageCertificates(t *testing.T) {
	f := startAuth(t, false)
	ctx := testCtx(t)
	dial := func(o client.Options) *client.Client {
		t.Helper()
		o.Address, o.TLSCA = f.srv.Addr(), filepath.Join(f.dir, pki.CACert)
		c, err := client.Dial(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctrl := dial(client.Options{ClientCertFile: filepath.Join(f.dir, "replicactl.crt"), ClientKeyFile: filepath.Join(f.dir, "replicactl.key")})
	if _, err := client.Pods(ctrl).Create(ctx, &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "by-replicactl"},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}}); err != nil {
		t.Fatalf("controller certificate through pkg/client: %v", err)
	}
	_, err := client.Pods(dial(client.Options{})).Get(ctx, "default", "by-replicactl")
	requireCode(t, err, codes.Unauthenticated)
}

// TestGRPCurlWithAdminCertificate: grpcurl (a grpc-go client offering
// only h2) reaches the gRPC server through the TLS listener with the
// admin certificate; without one, reflection is refused.
func TestGRPCurlWithAdminCertificate(t *testing.T) {
	bin, err := exec.LookPath("grpcurl")
	if err != nil {
		bin = filepath.Join("..", "..", "..", ".tools", "bin", "grpcurl") // make tools puts it here
		if _, err := os.Stat(bin); err != nil {
			t.Skip("grpcurl is neither on the PATH nor in .tools/bin")
		}
	}
	f := startAuth(t, false)
	ca := filepath.Join(f.dir, pki.CACert)
	out, err := exec.CommandContext(testCtx(t), bin, "-cacert", ca, "-cert", filepath.Join(f.dir, pki.AdminCert),
		"-key", filepath.Join(f.dir, pki.AdminKey), f.srv.Addr(), "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kplane.v1.Resources") {
		t.Fatalf("grpcurl list with the admin certificate: %v: %s", err, out)
	}
	out, err = exec.CommandContext(testCtx(t), bin, "-cacert", ca, f.srv.Addr(), "list").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("grpcurl list without credentials: %v: %s", err, out)
	}
}
