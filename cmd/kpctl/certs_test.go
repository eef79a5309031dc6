package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/pki"
	"github.com/kplane/kplane/pkg/testutil"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// kpctlEnv runs kpctl with exactly the environment vars given.
func kpctlEnv(ctx context.Context, vars map[string]string, args ...string) result {
	var out, errOut testutil.SyncBuffer
	code := run(ctx, args, &env{
		stdin: strings.NewReader(""), stdout: newOutput(&out), stderr: newOutput(&errOut),
		getenv: func(k string) string { return vars[k] }, now: time.Now,
	})
	return result{out.String(), errOut.String(), code}
}

// TestCertsAndKubeconfig: `kpctl certs` writes a working cluster PKI and
// admin kubeconfig; kpctl reaches a TLS apiserver with client
// certificates through --kubeconfig, $KUBECONFIG and flags, and flags
// override the kubeconfig.
func TestCertsAndKubeconfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "certs")
	r := kpctlEnv(ctx, nil, "certs", "--dir", dir, "--nodes", "node-1", "--identities", "replicactl")
	if r.code != 0 || !strings.Contains(r.stdout, "wrote ca.crt") || !strings.Contains(r.stdout, "wrote admin.kubeconfig") {
		t.Fatalf("certs: %+v", r)
	}
	for _, f := range []string{"ca.crt", "ca.key", "apiserver.crt", "admin.key", "replicactl.crt", "node-1.key", "sa.key", "sa.pub"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "gcctl.crt")); err == nil {
		t.Error("--identities replicactl also wrote gcctl's certificate")
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	r = kpctlEnv(ctx, nil, "certs", "--dir", dir, "--nodes", "node-1", "--identities", "replicactl")
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); r.code != 0 || r.stdout != "kept 13 existing files\n" || string(again) != string(ca) {
		t.Fatalf("second run: %+v", r)
	}
	if r := kpctlEnv(ctx, nil, "certs"); r.code == 0 || !strings.Contains(r.stderr, "--dir is required") {
		t.Fatalf("no --dir: %+v", r)
	}
	if r := kpctlEnv(ctx, nil, "certs", "--dir", t.TempDir(), "--nodes", "a/b"); r.code == 0 || !strings.Contains(r.stderr, `node "a/b"`) {
		t.Fatalf("bad node: %+v", r)
	}

	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok-1,alice,u1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.WithTLS(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")),
		testserver.WithClientCA(filepath.Join(dir, "ca.crt")), testserver.WithTokenAuthFile(tokens),
		// Which credentials kpctl sends is under test, not what they may do.
		testserver.WithAuthorization("", "AlwaysAllow"))
	// The kubeconfig names the apiserver's real address.
	kc := filepath.Join(t.TempDir(), "admin.kubeconfig")
	adminCrt, _ := os.ReadFile(filepath.Join(dir, "admin.crt"))
	adminKey, _ := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err := os.WriteFile(kc, pki.Kubeconfig("https://"+srv.Addr(), ca, adminCrt, adminKey), 0o600); err != nil {
		t.Fatal(err)
	}

	ok := func(name string, vars map[string]string, args ...string) {
		t.Helper()
		r := kpctlEnv(ctx, vars, append(args, "get", "namespaces")...)
		if r.code != 0 || !strings.Contains(r.stdout, "kplane-system") {
			t.Errorf("%s: %+v", name, r)
		}
	}
	refused := func(name, want string, vars map[string]string, args ...string) {
		t.Helper()
		r := kpctlEnv(ctx, vars, append(args, "get", "namespaces")...)
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: %+v, want an error containing %q", name, r, want)
		}
	}
	ok("--kubeconfig", nil, "--kubeconfig", kc)
	ok("KUBECONFIG", map[string]string{"KUBECONFIG": "/nonexistent:" + kc})
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kc, filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	kc = filepath.Join(home, ".kube", "config")
	ok("~/.kube/config", map[string]string{"HOME": home})
	ok("flags only", nil, "--server", srv.Addr(), "--tls-ca", filepath.Join(dir, "ca.crt"),
		"--client-certificate", filepath.Join(dir, "node-1.crt"), "--client-key", filepath.Join(dir, "node-1.key"))
	ok("static token over the kubeconfig's TLS", nil, "--kubeconfig", kc, "--token", "tok-1")
	// A flag's credentials replace the kubeconfig's: a bad token is not
	// rescued by the admin certificate.
	refused("flag token beats kubeconfig cert", "Unauthenticated", nil, "--kubeconfig", kc, "--token", "wrong")
	refused("no credentials", "Unauthenticated", nil, "--server", srv.Addr(), "--tls-ca", filepath.Join(dir, "ca.crt"))
	refused("certificate without TLS", "needs TLS", nil, "--server", srv.Addr(),
		"--client-certificate", filepath.Join(dir, "node-1.crt"), "--client-key", filepath.Join(dir, "node-1.key"))
	refused("missing kubeconfig", "kubeconfig", nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	// The kubeconfig's server is overridden by --server (here a dead one).
	refused("--server beats kubeconfig", "127.0.0.1:1", nil, "--kubeconfig", kc, "--server", unreachable, "--request-timeout", "2s")
}
