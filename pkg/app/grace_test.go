package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// stuckReconciler holds the reconcile of default/stuck until its context
// ends (a write that does not return in time) and reports that context's
// error; other keys pass.
type stuckReconciler struct {
	in        chan struct{}
	cancelled chan error
}

func newStuckReconciler() *stuckReconciler {
	return &stuckReconciler{in: make(chan struct{}), cancelled: make(chan error, 1)}
}

func (s *stuckReconciler) Reconcile(ctx context.Context, key string) error {
	if key != "default/stuck" {
		return nil
	}
	close(s.in)
	<-ctx.Done()
	s.cancelled <- ctx.Err()
	return ctx.Err()
}

// holderAfterStuckStop runs svc with the args for the apiserver at addr,
// creates the Secret default/stuck, stops the service while its reconcile
// is held, and returns the holder of kplane-system/<lease> once Run has
// returned cleanly.
func holderAfterStuckStop(t *testing.T, s *stuckReconciler, lease string, svc app.Service, args func(addr string) []string) string {
	t.Helper()
	srv := testserver.Start(t)
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, svc, args(srv.Addr())) }()
	if _, err := client.Secrets(c).Create(context.Background(), secret("stuck")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.in:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the reconcile never started")
	}
	stop()
	cleanExit(t, done)
	if err := <-s.cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("the reconcile ended with %v; want it cancelled", err)
	}
	l, err := client.Leases(c).Get(context.Background(), "kplane-system", lease)
	if err != nil {
		t.Fatal(err)
	}
	return l.GetSpec().GetHolderIdentity()
}

// TestGraceRunOutLeavesLeaseToExpire: on shutdown a reconcile that
// outlasts the grace period is cancelled, and its writes may still land;
// the lease is then left to expire instead of released, so that a
// standby does not act before they have.
func TestGraceRunOutLeavesLeaseToExpire(t *testing.T) {
	s := newStuckReconciler()
	svc := app.Service{
		Name:          "gracectl",
		LeaderElected: true,
		Watches:       []app.Watch{{Kind: "Secret"}},
		Setup:         func(*app.Context) (app.Reconciler, error) { return s, nil },
	}
	h := holderAfterStuckStop(t, s, "gracectl", svc, func(addr string) []string {
		return []string{
			"--apiserver", addr, "--log-level", "warn", "--id", "grace-1",
			"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
			"--leader-elect-retry-period", "200ms", "--shutdown-grace-period", "200ms",
		}
	})
	if h != "grace-1" {
		t.Fatalf("lease holder %q after the grace ran out; want it left to expire, still %q", h, "grace-1")
	}
}

// TestLoopCancelledInFlightLeavesLeaseToExpire: a Loop's workers are
// cancelled at once when its term ends; with a reconcile running then,
// the loop's lease is left to expire, as a Service's is when its grace
// runs out.
func TestLoopCancelledInFlightLeavesLeaseToExpire(t *testing.T) {
	s := newStuckReconciler()
	loop := app.Loop{Name: "graceloop", Watches: []app.Watch{{Kind: "Secret"}}, Reconciler: s}
	le := leaderelection.Options{LeaderElect: true, Identity: "loop-1", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
	svc := app.Service{Name: "graceloops", Run: func(ctx context.Context, c *app.Context) error { return c.RunLoop(ctx, loop, le) }}
	h := holderAfterStuckStop(t, s, "graceloop", svc, func(addr string) []string {
		return []string{"--apiserver", addr, "--health-addr", "", "--log-level", "warn"}
	})
	if h != "loop-1" {
		t.Fatalf("loop lease holder %q after a term that cancelled a reconcile; want it left to expire, still %q", h, "loop-1")
	}
}
