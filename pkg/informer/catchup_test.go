package informer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
)

// CatchUp returns only once the informer shows what the apiserver holds:
// a write the informer has not seen (its watch is held) keeps it waiting.
func TestCatchUp(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	g := newGated(c)
	inf, err := informer.New(g, informer.Options{Selection: informer.Selection{Kind: "Pod"}, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
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
