package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
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

// writeLoad creates Secrets from several goroutines until stopped and
// records every acknowledged one with its resourceVersion.
type writeLoad struct {
	mu    sync.Mutex
	acked map[string]string
	ok    atomic.Int64
	fails atomic.Int64
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func startWriteLoad(ctx context.Context, c *client.Client, workers int) *writeLoad {
	ctx, cancel := context.WithCancel(ctx)
	w := &writeLoad{acked: map[string]string{}, stop: cancel}
	for g := 0; g < workers; g++ {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("load-%d-%d", g, i)
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := c.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
					Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name}})})
				ccancel()
				if err != nil {
					w.fails.Add(1)
					continue
				}
				w.ok.Add(1)
				w.mu.Lock()
				w.acked[name] = resp.GetObject().Meta().GetResourceVersion()
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *writeLoad) halt() { w.stop(); w.wg.Wait() }

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
	failed := 0
	testutil.Eventually(t, time.Minute, "Unavailable without quorum", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		defer ccancel()
		_, err := c.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("no-quorum-%d", failed)}})})
		if err == nil {
			t.Fatal("a write succeeded with two of three etcd members down")
		}
		if status.Code(err) == codes.Unavailable {
			failed++
		}
		return failed >= 3
	})
	if err := h.procs[1].Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "writes once a second member is back", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_, err := c.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "quorum-back"}})})
		return err == nil || status.Code(err) == codes.AlreadyExists
	})
	if err := h.procs[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, h.procs[0])

	// Nothing acknowledged is lost, on any apiserver.
	for i, addr := range h.addrs {
		one, err := client.Dial(ctx, client.Options{Address: addr})
		if err != nil {
			t.Fatal(err)
		}
		l, err := one.List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
		_ = one.Close()
		if err != nil {
			t.Fatalf("list on apiserver %d: %v", i, err)
		}
		have := map[string]string{}
		for _, o := range l.GetItems() {
			have[o.Meta().GetName()] = o.Meta().GetResourceVersion()
		}
		for name, rv := range load.acked {
			if have[name] != rv {
				t.Fatalf("apiserver %d: acknowledged %s at %s, reads %q", i, name, rv, have[name])
			}
		}
	}
	t.Logf("%d acknowledged writes all present on each of 3 apiservers", len(load.acked))
}
