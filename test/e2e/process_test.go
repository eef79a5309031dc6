package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
func launch(t *testing.T, cfg launcher.Config) *launcher.Process {
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

// dialAPI connects to the apiserver at addr; the connection closes when
// the test ends.
func dialAPI(t *testing.T, addr string) kplanev1.ResourcesClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return kplanev1.NewResourcesClient(conn)
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
