package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/internal/launcher"
	"github.com/kplane/kplane/test/e2e/stack"
)

// startProcess starts binary (from binDir) as name with a free HTTP
// --health-addr and kills it when the test ends; grpcHealth, when set, is
// where WaitHealthy checks.
func startProcess(t *testing.T, name, binary, grpcHealth string, args ...string) *launcher.Process {
	t.Helper()
	health, err := launcher.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return launch(t, launcher.Config{
		Name: name, Binary: filepath.Join(binDir, binary), Args: append(args, "--health-addr", health),
		LogDir: t.TempDir(), HealthAddr: grpcHealth,
	})
}

// launch starts a process and kills it when the test ends, naming its log
// when the test failed.
func launch(t testing.TB, cfg launcher.Config) *launcher.Process {
	t.Helper()
	p, err := launcher.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Kill(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("%s log: %s", cfg.Name, p.LogPath())
		}
	})
	return p
}

// startStack starts a local stack for the test (test/e2e/stack) and stops
// it when the test ends, naming its logs when the test failed.
func startStack(ctx context.Context, t *testing.T, opts stack.Options) *stack.Stack {
	t.Helper()
	s, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			t.Errorf("stop stack: %v", err)
		}
		if t.Failed() {
			t.Logf("logs in %s", s.Options().LogDir)
		}
	})
	return s
}

// apiConfig is a secured bin/apiserver of a test harness, as the stack
// runs it: TLS, client certificate and ServiceAccount token
// authentication, RBAC and the Node authorizer, its certificates (made
// by stack.NewPKI) in a temporary directory. Processes the harness starts
// connect with their own identity (identityArgs), the test as the admin.
type apiConfig struct {
	// addr is the gRPC (and REST) address, health the HTTP /readyz one.
	addr, health string
	pki          stack.PKI
}

// newAPIConfig picks free addresses and writes the certificates,
// including node certificates for nodes (exec-runtime agents).
func newAPIConfig(tb testing.TB, nodes ...string) apiConfig {
	tb.Helper()
	addr, err := launcher.FreeAddr()
	if err != nil {
		tb.Fatal(err)
	}
	health, err := launcher.FreeAddr()
	if err != nil {
		tb.Fatal(err)
	}
	p, err := stack.NewPKI(filepath.Join(tb.TempDir(), "certs"), addr, nodes)
	if err != nil {
		tb.Fatal(err)
	}
	return apiConfig{addr: addr, health: health, pki: p}
}

// config is the apiserver's launcher configuration: data in dataDir,
// readiness from /readyz on the health address (the gRPC health check
// would need credentials), extra flags added.
func (a apiConfig) config(logDir, dataDir string, extra ...string) launcher.Config {
	args := append([]string{"--data-dir", dataDir, "--listen", a.addr, "--health-addr", a.health}, extra...)
	return launcher.Config{Name: "apiserver", Binary: filepath.Join(binDir, "apiserver"),
		Args: append(args, a.pki.APIServerArgs()...), LogDir: logDir, ReadyURL: "http://" + a.health + "/readyz"}
}

// dial connects to the apiserver as the admin; the connection closes
// when the test ends.
func (a apiConfig) dial(tb testing.TB) kplanev1.ResourcesClient {
	tb.Helper()
	opt, err := a.pki.DialOption()
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := grpc.NewClient(a.addr, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return kplanev1.NewResourcesClient(conn)
}

// connArgs are the connection flags of a process started with
// `--apiserver addr` running as identity (a controller binary, a node
// name, or "admin").
func (a apiConfig) connArgs(identity string) []string {
	args := []string{"--apiserver", a.addr}
	if identity == "admin" {
		return append(args, a.pki.AdminArgs()...)
	}
	return append(args, a.pki.IdentityArgs(identity)...)
}

// identityOf is the identity a harness runs binary with: a node agent's
// node certificate for its --node-name, the admin for a fake-runtime
// agent (one process playing many nodes, which the Node authorizer
// would refuse to any single node's identity), else the binary's own.
func identityOf(binary string, args []string) string {
	if binary != "nodeagent" {
		return binary
	}
	node := ""
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--runtime":
			if args[i+1] == "fake" {
				return "admin"
			}
		case "--node-name":
			node = args[i+1]
		}
	}
	return node
}

// kpctl runs bin/kpctl against the apiserver as the admin.
func (a apiConfig) kpctl(args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(binDir, "kpctl"), append([]string{"--kubeconfig", a.pki.Kubeconfig()}, args...)...)
}

// kpctlLine is the shell form of a.kpctl (for a terminal test).
func (a apiConfig) kpctlLine() string {
	return filepath.Join(binDir, "kpctl") + " --kubeconfig " + a.pki.Kubeconfig()
}

// tokenctlArgs are tokenctl's flags beyond its connection: with
// ServiceAccount keys on, a pod is admitted only once its account
// exists, and tokenctl makes every namespace's default one.
func (a apiConfig) tokenctlArgs() []string { return a.pki.TokenctlArgs() }

// startTokenctl runs tokenctl (killed when the test ends) and waits
// until it made default/default.
func (a apiConfig) startTokenctl(t *testing.T, api kplanev1.ResourcesClient) {
	t.Helper()
	startProcess(t, "tokenctl", "tokenctl", "", append(a.connArgs("tokenctl"), a.tokenctlArgs()...)...)
	waitDefaultServiceAccount(t, api)
}

// waitDefaultServiceAccount waits until tokenctl made default/default,
// so the pods a test creates next are admitted.
func waitDefaultServiceAccount(tb testing.TB, api kplanev1.ResourcesClient) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "ServiceAccount", Namespace: "default", Name: "default"})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("ServiceAccount default/default: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}

// dialStack connects to a stack's apiserver as the admin (TLS and the
// admin's client certificate unless the stack is insecure); the
// connection closes when the test ends.
func dialStack(ctx context.Context, t *testing.T, s *stack.Stack) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, s.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // test teardown: nothing to report
	return c
}

// logTail returns the last n lines of the file at path (or why it could
// not be read), for a failed test's output: the file itself goes with the
// test's temporary directory.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
