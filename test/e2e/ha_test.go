package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// haApiservers are n bin/apiserver processes, each embedding one member
// of one etcd cluster, in plaintext without authentication.
type haApiservers struct {
	procs []*launcher.Process
	addrs []string
}

func startHAApiservers(t testing.TB, n int) *haApiservers {
	t.Helper()
	h := &haApiservers{}
	var peers []string
	for i := 0; i < n; i++ {
		p, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, fmt.Sprintf("a%d=http://%s", i, p))
	}
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		listen, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		health, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		h.addrs = append(h.addrs, listen)
		h.procs = append(h.procs, launch(t, launcher.Config{
			Name: fmt.Sprintf("apiserver-%d", i), Binary: filepath.Join(binDir, "apiserver"), LogDir: dir, HealthAddr: listen,
			Args: []string{"--listen", listen, "--health-addr", health, "--data-dir", filepath.Join(dir, fmt.Sprintf("a%d", i)),
				"--etcd-name", fmt.Sprintf("a%d", i), "--etcd-initial-cluster", strings.Join(peers, ","), "--log-level", "debug"},
		}))
	}
	for _, p := range h.procs {
		waitHealthy(t, p)
	}
	return h
}

func (h *haApiservers) dial(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), client.Options{Address: strings.Join(h.addrs, ","), CallTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestHASIGKILLApiservers runs three apiserver processes, each with one
// etcd member, under write load through a client given all three.
// SIGKILL one: writes continue; SIGKILL a second: writes fail with
// Unavailable, never succeed; restart one: writes resume. Every write
// that was acknowledged is there at the end, at its resourceVersion.
func TestHASIGKILLApiservers(t *testing.T) {
	h := startHAApiservers(t, 3)
	c := h.dial(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	load := startWriteLoad(ctx, c, 4)
	testutil.Eventually(t, time.Minute, "writes under load", func() bool { return load.ok.Load() >= 50 })
	if err := h.procs[0].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	after := load.ok.Load()
	testutil.Eventually(t, time.Minute, "writes to continue after one apiserver was killed", func() bool { return load.ok.Load() >= after+100 })
	load.halt()
	t.Logf("with one apiserver killed: %d writes acknowledged, %d failed (in flight at the kill, retried)", load.ok.Load(), load.fails.Load())

	if err := h.procs[1].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	requireUnavailable(ctx, t, c, "no-quorum")
	if err := h.procs[1].Restart(); err != nil {
		t.Fatal(err)
	}
	waitWritable(ctx, t, c, "quorum-back", 2*time.Minute)
	if err := h.procs[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, h.procs[0])

	// Nothing acknowledged is lost, on any apiserver.
	var each []client.Options
	for _, addr := range h.addrs {
		each = append(each, client.Options{Address: addr})
	}
	load.checkAcked(ctx, t, each)
}
