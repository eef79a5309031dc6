package app_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// keys counts the keys a loop reconciled.
type keys struct {
	mu   sync.Mutex
	seen map[string]int
}

func (k *keys) Reconcile(_ context.Context, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen[key]++
	return nil
}

func (k *keys) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.seen[key] > 0
}

// TestLoopsHoldTheirOwnLeases: two loops of one unelected Service each
// stand for election on a Lease of its own and reconcile only what they
// watch; a second process's loops stand by, and take over one loop's
// Lease when the first process stops.
func TestLoopsHoldTheirOwnLeases(t *testing.T) {
	srv := testserver.Start(t)
	api, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = api.Close() }()
	le := func(id string) leaderelection.Options {
		return leaderelection.Options{LeaderElect: true, Identity: id, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
	}
	start := func(id string) (*keys, *keys, context.CancelFunc, chan error) {
		secrets, maps := &keys{seen: map[string]int{}}, &keys{seen: map[string]int{}}
		svc := app.Service{Name: "loops", Run: func(ctx context.Context, c *app.Context) error {
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for _, l := range []app.Loop{
				{Name: "loops-secrets", Watches: []app.Watch{{Kind: "Secret"}}, Reconciler: secrets},
				{Name: "loops-nodes", Watches: []app.Watch{{Kind: "Node"}}, Reconciler: maps},
			} {
				wg.Add(1)
				go func() { defer wg.Done(); errs <- c.RunLoop(ctx, l, le(id)) }()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- app.Run(ctx, svc, []string{"--apiserver", srv.Addr(), "--health-addr", "", "--log-level", "warn"})
		}()
		return secrets, maps, cancel, done
	}
	aSecrets, aNodes, stopA, doneA := start("a")
	if _, err := client.For[*kplanev1.Secret](api).Create(context.Background(), secret("s1")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.For[*kplanev1.Node](api).Create(context.Background(), &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "each loop reconciles its own kind", func() bool {
		return aSecrets.has("default/s1") && aNodes.has("n1")
	})
	if aSecrets.has("n1") || aNodes.has("default/s1") {
		t.Fatal("a loop reconciled a key of another loop's watch")
	}
	holder := func(lease string) string {
		l, err := client.For[*kplanev1.Lease](api).Get(context.Background(), kplanev1.NamespaceSystem, lease)
		if err != nil {
			return ""
		}
		return l.GetSpec().GetHolderIdentity()
	}
	if holder("loops-secrets") != "a" || holder("loops-nodes") != "a" {
		t.Fatalf("leases held by %q and %q, want a and a", holder("loops-secrets"), holder("loops-nodes"))
	}

	bSecrets, bNodes, stopB, doneB := start("b")
	defer func() {
		stopB()
		if err := <-doneB; err != nil {
			t.Errorf("b: %v", err)
		}
	}()
	stopA() // releases both leases
	if err := <-doneA; err != nil {
		t.Fatalf("a: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, "b takes over both loops and reconciles everything once", func() bool {
		return holder("loops-secrets") == "b" && holder("loops-nodes") == "b" && bSecrets.has("default/s1") && bNodes.has("n1")
	})
}
