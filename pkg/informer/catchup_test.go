package informer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
)

// CatchUp returns only once the informer shows what the apiserver holds:
// an informer that never listed, or one that misses a write (its watch is
// held), keeps it waiting.
func TestCatchUp(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	g := newGated(c)
	inf, err := informer.New(g, informer.Options{Selection: informer.Selection{Kind: "Pod"}, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}

	// Not started: its cache is behind everything the apiserver holds.
	if _, err := client.Pods(c).Create(ctx, pod("early", nil)); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	err = informer.CatchUp(short, c, inf)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "informer at revision 0") {
		t.Fatalf("CatchUp on a cache that never synced: %v", err)
	}

	runInformer(t, inf)
	if !informer.WaitForCacheSync(ctx, inf) {
		t.Fatal("no sync")
	}
	if err := informer.CatchUp(ctx, c, inf); err != nil {
		t.Fatalf("CatchUp on a synced informer: %v", err)
	}
	g.hold()
	g.waitBlocked(t)
	if _, err := client.Pods(c).Create(ctx, pod("unseen", nil)); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = informer.CatchUp(short, c, inf)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CatchUp while the informer misses a write: %v, want a deadline error", err)
	}
	g.release()
	if err := informer.CatchUp(ctx, c, inf); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Store().GetByName("default", "unseen"); !ok {
		t.Fatal("CatchUp returned before the informer had the pod")
	}
}
