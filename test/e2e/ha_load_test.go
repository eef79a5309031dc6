package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The HA checks shared by the process tests (ha_test.go) and the
// compose test (compose_ha_test.go): a write load whose acknowledged
// writes are checked on every apiserver, and what a client sees without
// a quorum and once it is back.

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

// startWriteLoad runs workers goroutines creating Secrets in default
// (load-<worker>-<n>) through c until halt.
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

// checkAcked lists the Secrets through each apiserver (one client per
// entry of each) and fails unless every acknowledged write is there at
// the resourceVersion its Create returned.
func (w *writeLoad) checkAcked(ctx context.Context, t testing.TB, each []client.Options) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, opts := range each {
		one, err := client.Dial(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		l, err := one.List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
		_ = one.Close()
		if err != nil {
			t.Fatalf("list on apiserver %d (%s): %v", i, opts.Address, err)
		}
		have := map[string]string{}
		for _, o := range l.GetItems() {
			have[o.Meta().GetName()] = o.Meta().GetResourceVersion()
		}
		for name, rv := range w.acked {
			if have[name] != rv {
				t.Fatalf("apiserver %d (%s): acknowledged %s at %s, reads %q", i, opts.Address, name, rv, have[name])
			}
		}
	}
	t.Logf("%d acknowledged writes all present on each of %d apiservers", len(w.acked), len(each))
}

// requireUnavailable creates Secrets <prefix>-N through c until three
// failed with Unavailable: with two of three etcd members down every
// write must fail, and a success fails the test.
func requireUnavailable(ctx context.Context, t testing.TB, c *client.Client, prefix string) {
	t.Helper()
	failed := 0
	testutil.Eventually(t, time.Minute, "Unavailable without quorum", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		defer ccancel()
		_, err := c.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", prefix, failed)}})})
		if err == nil {
			t.Fatal("a write succeeded with two of three etcd members down")
		}
		if client.IsUnavailable(err) {
			failed++
		}
		return failed >= 3
	})
}

// waitWritable creates Secret name through c until it succeeds (or
// exists: an earlier attempt may have been applied without its answer).
func waitWritable(ctx context.Context, t testing.TB, c *client.Client, name string, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, "writes to succeed again ("+name+")", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_, err := c.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name}})})
		return err == nil || client.IsAlreadyExists(err)
	})
}
