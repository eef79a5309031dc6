package controllertest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStartRunsTheService: the controller reconciles what the returned
// client creates, its Context is reachable, and Stop is a clean exit.
func TestStartRunsTheService(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	api, ctl := controllertest.Start(t, app.Service{
		Name: "probe", LeaderElected: true,
		Watches: []app.Watch{{Kind: "Namespace"}},
		Reconcile: func(_ context.Context, key string) error {
			mu.Lock()
			seen[key] = true
			mu.Unlock()
			return nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "team-a"}})}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the new namespace is reconciled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["team-a"]
	})
	if c := ctl.Context(t); c.Name != "probe" || c.Identity != "" {
		t.Fatalf("context: name %q identity %q (leader election must be off by default)", c.Name, c.Identity)
	}
	if err := ctl.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := ctl.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}
