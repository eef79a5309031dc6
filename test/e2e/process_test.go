package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
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
