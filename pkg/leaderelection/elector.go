package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ErrLeadershipLost is returned (wrapped) by Run when this candidate lost a
// lease it held: it failed to renew for RenewDeadline, or saw the lease
// held by someone else.
var ErrLeadershipLost = errors.New("leadership lost")

// acquireJitter spreads the acquire attempts of candidates that started
// together over up to 20% of RetryPeriod. expiryJitter does the same, more
// tightly, for the attempts of standbys waiting for the same expiry.
const (
	acquireJitter = 0.2
	expiryJitter  = 0.05
)

// Elector runs one candidate of a leader election. Create it with New and
// call Run.
type Elector struct {
	cfg     Config
	log     hclog.Logger
	metrics Metrics

	running atomic.Bool
	leading atomic.Bool
	keep    atomic.Bool // this term ends without clearing the lease (KeepLease)

	mu     sync.Mutex
	leader string // holder of the lease as last observed
	// leadingUntil is when the current leadership ends unless renewed:
	// last successful renewal + RenewDeadline. IsLeader checks it so that
	// it turns false on time even if the renewing goroutine is late.
	leadingUntil time.Time

	// Owned by the goroutine in Run.
	observed     *kplanev1.Lease
	observedTime time.Time // local time at which observed was first seen
}

// New validates cfg, fills in defaults and returns an Elector.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Elector{
		cfg:     cfg,
		log:     cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity),
		metrics: cfg.Metrics,
	}
	e.metrics.SetLeading(cfg.Name, false)
	return e, nil
}

func (e *Elector) key() string { return e.cfg.Namespace + "/" + e.cfg.Name }

// IsLeader reports whether this candidate currently leads.
func (e *Elector) IsLeader() bool {
	if !e.leading.Load() {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Now().Before(e.leadingUntil)
}

// renewed records a successful acquisition or renewal made at start.
func (e *Elector) renewed(start time.Time) {
	e.mu.Lock()
	e.leadingUntil = start.Add(e.cfg.RenewDeadline)
	e.mu.Unlock()
}

// GetLeader returns the holder of the lease as last observed ("" when
// unknown or released).
func (e *Elector) GetLeader() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader
}

// Run takes part in the election until ctx is cancelled or leadership is
// lost. It tries to acquire the lease every RetryPeriod; once it leads it
// starts Callbacks.OnStartedLeading and renews every RetryPeriod. When
// leadership ends it cancels the leader context, waits for
// OnStartedLeading to return, releases the lease if ctx was cancelled and
// ReleaseOnCancel is set, and calls OnStoppedLeading.
//
// Run returns nil when ctx was cancelled and an error wrapping
// ErrLeadershipLost when leadership was lost; the caller may then call Run
// again to stand for election anew. Run must not be called concurrently.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("leaderelection: Run is already running")
	}
	defer e.running.Store(false)

	lastRenew, ok := e.acquire(ctx)
	if !ok {
		return nil
	}
	e.metrics.SetLeading(e.cfg.Name, true)
	e.metrics.Transition(e.cfg.Name, TransitionAcquired)
	e.log.Info("acquired lease, now leading")
	e.renewed(lastRenew)
	e.keep.Store(false)
	e.leading.Store(true)

	leaderCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		if f := e.cfg.Callbacks.OnStartedLeading; f != nil {
			f(leaderCtx)
		}
	}()

	lost := e.renewLoop(ctx, lastRenew)
	// Stop believing first: from here on another candidate may lead.
	e.leading.Store(false)
	cancel()
	e.metrics.SetLeading(e.cfg.Name, false)
	if lost != nil {
		e.metrics.Transition(e.cfg.Name, TransitionLost)
		e.log.Error("lost lease, stopped leading", "error", lost)
	}
	// The work must have stopped before a standby is invited to start.
	<-workDone
	if lost == nil {
		switch {
		case e.keep.Load():
			e.metrics.Transition(e.cfg.Name, TransitionStopped)
			e.log.Warn("stopped leading with work cancelled in flight; lease left to expire, so that its writes land before a standby acts")
		case e.cfg.ReleaseOnCancel:
			if err := e.release(ctx); err != nil {
				e.metrics.Transition(e.cfg.Name, TransitionStopped)
				e.log.Warn("stopped leading; releasing the lease failed, standbys take over when it expires", "error", err)
			} else {
				e.metrics.Transition(e.cfg.Name, TransitionReleased)
				e.log.Info("stopped leading and released lease")
			}
		default:
			e.metrics.Transition(e.cfg.Name, TransitionStopped)
			e.log.Info("stopped leading; lease left to expire")
		}
	}
	if f := e.cfg.Callbacks.OnStoppedLeading; f != nil {
		f()
	}
	return lost
}

// acquire tries to get the lease every RetryPeriod (with jitter) until it
// succeeds, returning the time of the successful attempt, or until ctx is
// done.
func (e *Elector) acquire(ctx context.Context) (time.Time, bool) {
	for {
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		start := time.Now()
		attemptCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
		held, other, err := e.tryAcquireOrRenew(attemptCtx, start)
		cancel()
		if held {
			return start, true
		}
		if err != nil && ctx.Err() == nil {
			e.log.Debug("failed to acquire lease", "error", err)
		}
		wait := e.cfg.RetryPeriod + time.Duration(rand.Float64()*acquireJitter*float64(e.cfg.RetryPeriod))
		if other != "" {
			// Try again right when the holder's lease runs out rather than
			// up to a retry period later, so a crashed leader is replaced
			// within lease duration + retry period of its last renewal.
			if left := time.Until(e.observedExpiry()); left < wait {
				wait = max(left, 0) + time.Duration(rand.Float64()*expiryJitter*float64(e.cfg.RetryPeriod))
			}
		}
		if client.Sleep(ctx, wait) != nil {
			return time.Time{}, false
		}
	}
}

// renewLoop renews the lease every RetryPeriod. It returns nil when ctx
// is done, or an error wrapping ErrLeadershipLost once RenewDeadline has
// passed since the last successful renewal, or at once when another
// holder is observed.
func (e *Elector) renewLoop(ctx context.Context, lastRenew time.Time) error {
	var lastErr error
	for {
		deadline := lastRenew.Add(e.cfg.RenewDeadline)
		if client.Sleep(ctx, min(e.cfg.RetryPeriod, time.Until(deadline))) != nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			if lastErr == nil {
				return fmt.Errorf("%w: no renewal within %v", ErrLeadershipLost, e.cfg.RenewDeadline)
			}
			return fmt.Errorf("%w: could not renew for %v: %w", ErrLeadershipLost, e.cfg.RenewDeadline, lastErr)
		}
		start := time.Now()
		// A renewal that completes after the deadline is worthless: by
		// then this candidate has stepped down.
		attemptCtx, cancel := context.WithDeadline(ctx, deadline)
		held, other, err := e.tryAcquireOrRenew(attemptCtx, start)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case held:
			lastRenew, lastErr = start, nil
			e.renewed(start)
		case other != "":
			return fmt.Errorf("%w: lease is held by %q", ErrLeadershipLost, other)
		default:
			lastErr = err
			e.log.Debug("failed to renew lease", "error", err)
		}
	}
}

// tryAcquireOrRenew makes one attempt to hold the lease. held reports
// success; otherwise other names the holder when the lease is validly held
// by someone else, and err says what went wrong when it is not.
func (e *Elector) tryAcquireOrRenew(ctx context.Context, now time.Time) (held bool, other string, err error) {
	old, err := e.getLease(ctx)
	if status.Code(err) == codes.NotFound {
		created, err := e.createLease(ctx, e.holderSpec(nil, now))
		if err != nil {
			if status.Code(err) == codes.AlreadyExists {
				return false, "", fmt.Errorf("create lease %s: another candidate created it first: %w", e.key(), err)
			}
			return false, "", fmt.Errorf("create lease %s: %w", e.key(), err)
		}
		e.observe(created)
		return true, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("get lease %s: %w", e.key(), err)
	}
	e.observe(old)

	holder := old.GetSpec().GetHolderIdentity()
	if holder != "" && holder != e.cfg.Identity && !e.observedExpired(time.Now()) {
		return false, holder, nil
	}
	updated, err := e.updateLease(ctx, old, e.holderSpec(old.GetSpec(), now))
	if err != nil {
		if status.Code(err) == codes.Aborted {
			return false, "", fmt.Errorf("update lease %s: written by someone else meanwhile: %w", e.key(), err)
		}
		return false, "", fmt.Errorf("update lease %s: %w", e.key(), err)
	}
	e.observe(updated)
	return true, "", nil
}

// observe records l as the latest lease seen. The expiry clock restarts
// only when the lease changed (a new resourceVersion): a holder that stops
// renewing leaves the version unchanged, and its lease then runs out on
// this candidate's own clock.
func (e *Elector) observe(l *kplanev1.Lease) {
	if e.observed == nil || e.observed.GetMetadata().GetResourceVersion() != l.GetMetadata().GetResourceVersion() {
		e.observed = l
		// Taken after the read returned, so that this candidate never
		// waits less than the lease duration after the holder's write.
		e.observedTime = time.Now()
	}
	holder := l.GetSpec().GetHolderIdentity()
	e.mu.Lock()
	changed := holder != e.leader
	e.leader = holder
	e.mu.Unlock()
	if !changed || holder == "" {
		return
	}
	if holder != e.cfg.Identity {
		e.log.Info("new leader observed", "leader", holder)
	}
	if f := e.cfg.Callbacks.OnNewLeader; f != nil {
		f(holder)
	}
}

// observedExpiry is when the observed lease runs out unless it changes:
// leaseDurationSeconds after this candidate first saw it, on its clock.
func (e *Elector) observedExpiry() time.Time {
	d := time.Duration(e.observed.GetSpec().GetLeaseDurationSeconds()) * time.Second
	return e.observedTime.Add(d)
}

// observedExpired reports whether the observed lease has run out at now.
func (e *Elector) observedExpired(now time.Time) bool {
	return !now.Before(e.observedExpiry())
}

// KeepLease makes the current term end without clearing the lease, even
// with ReleaseOnCancel. OnStartedLeading calls it when it had to cancel
// work with writes in flight: a cancelled request may still be applied
// by the apiserver, and a standby let in at once could act on a view
// those writes change (create a pod twice). Left to expire, the lease
// keeps standbys out until they have landed or failed. A call between
// terms is forgotten when the next term starts.
func (e *Elector) KeepLease() { e.keep.Store(true) }

// release clears the lease if this candidate still holds it, as
// Kubernetes does: no holder, a one-second duration, renewed now. Standbys
// then acquire it on their next attempt.
func (e *Elector) release(ctx context.Context) error {
	// ctx is already cancelled; the release gets its own, bounded time.
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	defer cancel()
	old, err := e.getLease(releaseCtx)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", e.key(), err)
	}
	if old.GetSpec().GetHolderIdentity() != e.cfg.Identity {
		return fmt.Errorf("release lease %s: held by %q, not by us", e.key(), old.GetSpec().GetHolderIdentity())
	}
	now := timestamppb.Now()
	spec := &kplanev1.LeaseSpec{
		LeaseDurationSeconds: 1,
		AcquireTime:          now,
		RenewTime:            now,
		LeaseTransitions:     old.GetSpec().GetLeaseTransitions(),
	}
	updated, err := e.updateLease(releaseCtx, old, spec)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", e.key(), err)
	}
	e.observe(updated)
	return nil
}
