// Package controllertest runs a controller in-process against a real test
// apiserver (embedded etcd, gRPC on a loopback port), for integration
// tests in a few lines:
//
//	api, ctl := controllertest.Start(t, replicaset.NewService())
//	// create objects through api, wait for the controller's writes
//	// (testutil.Eventually), read its state through ctl.Context(t).
//
// The controller runs through app.Run exactly as its binary does (flags,
// informers, work queue, leader election when asked for), and is stopped
// with the in-process equivalent of SIGTERM when the test ends; a non-nil
// exit error fails the test. Any module's tests can run another
// controller this way, e.g. gcctl to have owner references honoured.
package controllertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/app"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// stopTimeout bounds how long a stopping controller may take.
const stopTimeout = 30 * time.Second

// Controller is a service running in-process.
type Controller struct {
	name   string
	cancel context.CancelFunc
	done   chan error
	setup  chan *app.Context // holds the Context once Setup ran
	once   sync.Once
	err    error
}

// Start starts a test apiserver and runs svc against it until the test
// ends; it returns a client of the apiserver and the controller. args are
// extra flags (see Run).
func Start(t testing.TB, svc app.Service, args ...string) (kplanev1.ResourcesClient, *Controller) {
	t.Helper()
	srv := testserver.Start(t)
	return srv.Client(), Run(t, srv.Addr(), svc, args...)
}

// Run runs svc against the apiserver at addr until the test ends or Stop
// is called. It passes --apiserver addr, no health server, --log-level
// warn and, for a leader-elected service, --leader-elect=false; args come
// after these and so override them (e.g. LeaderElection).
func Run(t testing.TB, addr string, svc app.Service, args ...string) *Controller {
	t.Helper()
	c := &Controller{name: svc.Name, done: make(chan error, 1), setup: make(chan *app.Context, 1)}
	all := []string{"--apiserver", addr, "--health-addr", "", "--log-level", "warn"}
	if svc.LeaderElected {
		all = append(all, "--leader-elect=false")
	}
	all = append(all, args...)
	setup := svc.Setup
	svc.Setup = func(ac *app.Context) (app.Reconciler, error) {
		var rec app.Reconciler
		var err error
		if setup != nil {
			rec, err = setup(ac)
		}
		c.setup <- ac
		return rec, err
	}
	var ctx context.Context
	ctx, c.cancel = context.WithCancel(context.Background())
	go func() { c.done <- app.Run(ctx, svc, all) }()
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	})
	return c
}

// LeaderElection returns the flags that make a controller stand for
// election as id with short leases, so that hand-overs in tests are quick.
func LeaderElection(id string) []string {
	return []string{
		"--leader-elect=true", "--id", id,
		"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
		"--leader-elect-retry-period", "100ms", "--shutdown-grace-period", "1s",
	}
}

// Context returns the controller's app.Context once its Setup ran (the
// receive orders the test's reads after Setup's writes).
func (c *Controller) Context(t testing.TB) *app.Context {
	t.Helper()
	select {
	case ac := <-c.setup:
		c.setup <- ac
		return ac
	case err := <-c.done:
		c.done <- err
		t.Fatalf("%s stopped before its setup finished: %v", c.name, err)
	case <-time.After(stopTimeout):
		t.Fatalf("%s never finished its setup", c.name)
	}
	return nil
}

// Stop is the in-process SIGTERM: the controller stops taking work, lets
// in-flight work finish and releases its lease. It returns the error the
// controller exited with; calling it again returns the same.
func (c *Controller) Stop() error {
	c.once.Do(func() {
		c.cancel()
		select {
		case c.err = <-c.done:
		case <-time.After(stopTimeout):
			c.err = context.DeadlineExceeded
		}
		if c.err != nil {
			c.err = &stopError{err: c.err}
		}
	})
	return c.err
}

type stopError struct{ err error }

func (e *stopError) Error() string { return "exited with " + e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }
