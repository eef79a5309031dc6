package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kptest "github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// Short timings so that the tests take seconds. The waits for takeovers
// are bounded by waitLimit only, a generous multiple of these.
const (
	testLease = time.Second
	testRenew = 700 * time.Millisecond
	testRetry = 200 * time.Millisecond
	waitLimit = 15 * time.Second
)

// Longer timings for tests that count exact transitions: a loaded machine
// (the race detector, other tests) can delay renewals past 700ms, which
// rightly costs the lease, but those tests are not about that.
const (
	steadyLease = 10 * time.Second
	steadyRenew = 8 * time.Second
)

// candidate is one Elector running in its own goroutine with its own
// connection, as a separate process would. Like a controller process it
// stands for election again after losing the lease, until stopped.
type candidate struct {
	id      string
	el      *Elector
	conn    *grpc.ClientConn
	cancel  context.CancelFunc
	done    chan struct{}
	started atomic.Int32 // OnStartedLeading calls
	stopped atomic.Int32 // OnStoppedLeading calls

	mu sync.Mutex
	// losses are the errors of the Runs that lost leadership.
	losses []error
	// finalErr is what the last Run returned; finalLed whether it led.
	finalErr error
	finalLed bool
	// holderAtWorkStop is the lease holder that the last leadership's
	// work read when its context ended (with checkHolderOnStop).
	holderAtWorkStop string

	// workStopped is closed when the first leadership's work has ended.
	workStopped     chan struct{}
	workStoppedOnce sync.Once
}

type candidateOpts struct {
	release bool
	logger  hclog.Logger
	metrics Metrics
	// lease, renew default to testLease, testRenew.
	lease, renew time.Duration
	// checkHolderOnStop makes the leader's work read the lease holder
	// once its context is cancelled.
	checkHolderOnStop bool
	// keepOnStop makes the leader's work call KeepLease once its context
	// is cancelled; keepBeforeRun calls it before the first Run.
	keepOnStop, keepBeforeRun bool
}

func startCandidate(t *testing.T, srv *testserver.Server, id string, o candidateOpts) *candidate {
	t.Helper()
	if o.lease == 0 {
		o.lease, o.renew = testLease, testRenew
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &candidate{id: id, conn: conn, done: make(chan struct{}), workStopped: make(chan struct{})}
	client := kplanev1.NewResourcesClient(conn)
	el, err := New(Config{
		Client:          client,
		Name:            "test-controller",
		Identity:        id,
		LeaseDuration:   o.lease,
		RenewDeadline:   o.renew,
		RetryPeriod:     testRetry,
		ReleaseOnCancel: o.release,
		Logger:          o.logger,
		Metrics:         o.metrics,
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				c.started.Add(1)
				<-ctx.Done()
				if o.keepOnStop {
					c.el.KeepLease()
				}
				if o.checkHolderOnStop {
					rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					holder := ""
					resp, err := client.Get(rctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: "test-controller"})
					if err == nil {
						holder = resp.GetObject().GetLease().GetSpec().GetHolderIdentity()
					} else {
						holder = "error: " + err.Error()
					}
					c.mu.Lock()
					c.holderAtWorkStop = holder
					c.mu.Unlock()
				}
				c.workStoppedOnce.Do(func() { close(c.workStopped) })
			},
			OnStoppedLeading: func() { c.stopped.Add(1) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.el = el
	if o.keepBeforeRun {
		el.KeepLease()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		for {
			before := c.started.Load()
			err := el.Run(ctx)
			led := c.started.Load() != before
			c.mu.Lock()
			if errors.Is(err, ErrLeadershipLost) {
				c.losses = append(c.losses, err)
			}
			c.finalErr, c.finalLed = err, led
			c.mu.Unlock()
			if err != nil {
				t.Logf("%s: Run returned: %v", id, err)
			}
			if ctx.Err() != nil || !errors.Is(err, ErrLeadershipLost) {
				return
			}
		}
	}()
	t.Cleanup(func() {
		c.stop()
		_ = conn.Close()
	})
	return c
}

// stop cancels the candidate's context and waits for it to finish.
func (c *candidate) stop() {
	c.cancel()
	<-c.done
}

func (c *candidate) lossCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.losses)
}

func (c *candidate) lastLoss() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.losses) == 0 {
		return nil
	}
	return c.losses[len(c.losses)-1]
}

func leaders(cs []*candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if c.el.IsLeader() {
			out = append(out, c)
		}
	}
	return out
}

// waitForLeader polls until exactly one of cs leads and returns it with
// the time it took.
func waitForLeader(t *testing.T, cs []*candidate) (*candidate, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(waitLimit)
	for {
		if ls := leaders(cs); len(ls) == 1 {
			return ls[0], time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single leader among %d candidates after %v", len(cs), waitLimit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	kptest.Eventually(t, waitLimit, what, cond)
}

func getLease(t *testing.T, srv *testserver.Server) *kplanev1.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := srv.Client().Get(ctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: "test-controller"})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return resp.GetObject().GetLease()
}

// sampler checks, as often as it can, that no two candidates believe they
// lead at the same instant and that the Lease names the one that does.
// IsLeader of n candidates cannot be read at one instant, so it reads all
// of them, then the Lease, then all of them again: a candidate X that leads
// at both of its reads led throughout, so every other candidate read in
// between must not lead, and the Lease read in between must name X.
type sampler struct {
	cs     []*candidate
	client kplanev1.ResourcesClient

	samples   atomic.Int64 // samples taken
	confirmed atomic.Int64 // samples in which one leader was confirmed
	mu        sync.Mutex
	problems  []string
	stopCh    chan struct{} // closed by the first stop
	done      chan struct{}
}

func startSampler(t *testing.T, cs []*candidate, client kplanev1.ResourcesClient) *sampler {
	s := &sampler{cs: cs, client: client, stopCh: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	// Report violations even when the test stops early.
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	n := len(s.cs)
	for {
		select {
		case <-s.stopCh:
			return
		default:
		}
		s.samples.Add(1)
		first := make([]bool, n)
		for i, c := range s.cs {
			first[i] = c.el.IsLeader()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := s.client.Get(ctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: "test-controller"})
		cancel()
		second := make([]bool, n)
		for i, c := range s.cs {
			second[i] = c.el.IsLeader()
		}
		for x := range n {
			if !first[x] || !second[x] {
				continue
			}
			for y := range n {
				// y's read between x's two reads: round one if y comes
				// after x, round two if before.
				if (y > x && first[y]) || (y < x && second[y]) {
					s.problem("%s and %s both lead", s.cs[x].id, s.cs[y].id)
				}
			}
			if err == nil {
				if h := resp.GetObject().GetLease().GetSpec().GetHolderIdentity(); h != s.cs[x].id {
					s.problem("%s leads but the lease holder is %q", s.cs[x].id, h)
				}
				s.confirmed.Add(1)
			}
		}
		select {
		case <-s.stopCh:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *sampler) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 10 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

// stop ends sampling and fails the test on any violation. Only the first
// call does anything.
func (s *sampler) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.stopCh:
		return
	default:
	}
	close(s.stopCh)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		t.Error(p)
	}
	if s.confirmed.Load() < 10 {
		t.Errorf("only %d samples confirmed a leader: the check did not run", s.confirmed.Load())
	}
	t.Logf("sampler: %d of %d samples confirmed a single leader that the Lease names", s.confirmed.Load(), s.samples.Load())
}

func startCandidates(t *testing.T, srv *testserver.Server, n int, o candidateOpts) []*candidate {
	cs := make([]*candidate, n)
	for i := range cs {
		cs[i] = startCandidate(t, srv, fmt.Sprintf("cand-%d", i), o)
	}
	return cs
}

func without(cs []*candidate, x *candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if c != x {
			out = append(out, c)
		}
	}
	return out
}

func TestThreeCandidatesCrashTakeover(t *testing.T) {
	srv := testserver.Start(t)
	cs := startCandidates(t, srv, 3, candidateOpts{release: false})
	s := startSampler(t, cs, srv.Client())

	leader, took := waitForLeader(t, cs)
	t.Logf("first leader %s elected after %v", leader.id, took)
	waitFor(t, "every candidate to know the leader", func() bool {
		for _, c := range cs {
			if c.el.GetLeader() != leader.id {
				return false
			}
		}
		return true
	})
	if l := getLease(t, srv); l.GetSpec().GetLeaseDurationSeconds() != 1 {
		t.Fatalf("lease spec %v, want leaseDurationSeconds 1", l.GetSpec())
	}

	// Two crashes in a row: each time the lease is left to expire.
	alive := cs
	for round := 1; round <= 2; round++ {
		before := getLease(t, srv).GetSpec()
		lossesBefore := leader.lossCount()
		crashed := time.Now()
		leader.stop() // cancel without release: renewals just stop
		if leader.started.Load() == 0 || leader.started.Load() != leader.stopped.Load() {
			t.Fatalf("crashed leader: OnStartedLeading %d times, OnStoppedLeading %d times; want equal and > 0",
				leader.started.Load(), leader.stopped.Load())
		}
		if leader.el.IsLeader() {
			t.Fatal("stopped candidate still claims to lead")
		}
		after := getLease(t, srv).GetSpec()
		if leader.lossCount() == lossesBefore && before.GetHolderIdentity() == leader.id &&
			after.GetHolderIdentity() != leader.id {
			// Had it lost the lease meanwhile, someone could have taken it.
			t.Fatalf("after a crash the lease names %q, want still the crashed %s (no release)", after.GetHolderIdentity(), leader.id)
		}
		alive = without(alive, leader)
		next, _ := waitForLeader(t, alive)
		takeover := time.Since(crashed)
		t.Logf("crash %d: %s took over from %s after %v (lease %v + retry %v = %v)",
			round, next.id, leader.id, takeover.Round(time.Millisecond), testLease, testRetry, testLease+testRetry)
		fmt.Printf("leaderelection: crash takeover %d: %v\n", round, takeover.Round(time.Millisecond))
		now := getLease(t, srv).GetSpec()
		if now.GetLeaseTransitions() <= before.GetLeaseTransitions() {
			t.Fatalf("leaseTransitions %d after a takeover, was %d: want it incremented",
				now.GetLeaseTransitions(), before.GetLeaseTransitions())
		}
		// Sample the new leader's reign for a while as well.
		base := s.confirmed.Load()
		waitFor(t, "samples of the new leader", func() bool { return s.confirmed.Load() >= base+30 })
		leader = next
	}
	s.stop(t)
}

func TestGracefulReleaseHandsOverQuickly(t *testing.T) {
	srv := testserver.Start(t)
	cs := startCandidates(t, srv, 3, candidateOpts{release: true, checkHolderOnStop: true})
	s := startSampler(t, cs, srv.Client())
	leader, _ := waitForLeader(t, cs)
	waitFor(t, "followers to know the leader", func() bool {
		for _, c := range cs {
			if c.el.GetLeader() != leader.id {
				return false
			}
		}
		return true
	})
	transitions := getLease(t, srv).GetSpec().GetLeaseTransitions()

	stopped := time.Now()
	leader.stop()
	next, _ := waitForLeader(t, without(cs, leader))
	handover := time.Since(stopped)
	t.Logf("graceful release: %s took over from %s after %v (retry period %v)",
		next.id, leader.id, handover.Round(time.Millisecond), testRetry)
	fmt.Printf("leaderelection: graceful handover: %v\n", handover.Round(time.Millisecond))

	leader.mu.Lock()
	finalErr, finalLed, holderAtStop := leader.finalErr, leader.finalLed, leader.holderAtWorkStop
	leader.mu.Unlock()
	if finalErr != nil && !errors.Is(finalErr, ErrLeadershipLost) {
		t.Fatalf("Run returned %v after cancel", finalErr)
	}
	if finalErr == nil && finalLed {
		// Leadership ended by the cancel: the work must have stopped
		// while the lease still named this candidate, i.e. before release.
		if holderAtStop != leader.id {
			t.Fatalf("when the leader's work stopped the lease holder was %q, want still %s", holderAtStop, leader.id)
		}
	} else {
		t.Logf("the leader lost the lease before it was stopped (loaded machine?): %v", finalErr)
	}
	if leader.started.Load() != leader.stopped.Load() {
		t.Fatalf("OnStartedLeading %d times but OnStoppedLeading %d times", leader.started.Load(), leader.stopped.Load())
	}
	if tr := getLease(t, srv).GetSpec().GetLeaseTransitions(); tr <= transitions {
		t.Fatalf("leaseTransitions = %d after a handover, was %d: want it incremented", tr, transitions)
	}
	base := s.confirmed.Load()
	waitFor(t, "samples of the new leader", func() bool { return s.confirmed.Load() >= base+30 })
	s.stop(t)
}

func TestReleaseClearsLeaseAndReportsOnce(t *testing.T) {
	srv := testserver.Start(t)
	var logs kptest.SyncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	reg := prometheus.NewRegistry()
	m, err := NewPrometheusMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := startCandidate(t, srv, "solo", candidateOpts{release: true, logger: logger, metrics: m,
		lease: steadyLease, renew: steadyRenew})
	waitForLeader(t, []*candidate{c})
	if v := testutil.ToFloat64(m.isLeader.WithLabelValues("test-controller")); v != 1 {
		t.Fatalf("kplane_leader_is_leader = %v while leading, want 1", v)
	}
	// Let it renew a few times: renewals must not be logged or counted.
	rv := getLease(t, srv).GetMetadata().GetResourceVersion()
	for range 3 {
		waitFor(t, "a renewal", func() bool { return getLease(t, srv).GetMetadata().GetResourceVersion() != rv })
		rv = getLease(t, srv).GetMetadata().GetResourceVersion()
	}
	acquireTime := getLease(t, srv).GetSpec().GetAcquireTime().AsTime()
	c.stop()
	if n := c.lossCount(); n != 0 {
		t.Fatalf("lost the lease %d times with an %v renew deadline", n, steadyRenew)
	}

	l := getLease(t, srv).GetSpec()
	if l.GetHolderIdentity() != "" || l.GetLeaseDurationSeconds() != 1 {
		t.Fatalf("released lease spec %v, want no holder and leaseDurationSeconds 1", l)
	}
	if l.GetRenewTime() == nil || l.GetRenewTime().AsTime().Before(acquireTime) {
		t.Fatalf("released lease renewTime %v, want set and not before the acquisition %v", l.GetRenewTime(), acquireTime)
	}
	if c.el.IsLeader() || c.el.GetLeader() != "" {
		t.Fatalf("after release: IsLeader %v, GetLeader %q", c.el.IsLeader(), c.el.GetLeader())
	}
	if v := testutil.ToFloat64(m.isLeader.WithLabelValues("test-controller")); v != 0 {
		t.Fatalf("kplane_leader_is_leader = %v after release, want 0", v)
	}
	for _, tr := range []string{TransitionAcquired, TransitionReleased} {
		if v := testutil.ToFloat64(m.transitions.WithLabelValues("test-controller", tr)); v != 1 {
			t.Fatalf("transitions{%s} = %v, want 1", tr, v)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "acquired lease"); n != 1 {
		t.Fatalf("%d 'acquired lease' lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "released lease"); n != 1 {
		t.Fatalf("%d 'released lease' lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "\n"); n != 2 {
		t.Fatalf("%d log lines for one acquisition, 3 renewals and a release; want 2:\n%s", n, out)
	}

	// A new candidate takes the released lease at once, without waiting
	// for it to expire.
	c2 := startCandidate(t, srv, "second", candidateOpts{})
	_, took := waitForLeader(t, []*candidate{c2})
	t.Logf("a fresh candidate acquired the released lease after %v", took)
}

// TestKeepLeaseLeavesTheLeaseToExpire: a leader whose work calls
// KeepLease (it cancelled writes in flight) does not clear the lease on
// stop, even with ReleaseOnCancel; a standby takes it once it expires. A
// KeepLease between terms is forgotten: the next term releases.
func TestKeepLeaseLeavesTheLeaseToExpire(t *testing.T) {
	srv := testserver.Start(t)
	reg := prometheus.NewRegistry()
	m, err := NewPrometheusMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := startCandidate(t, srv, "kept", candidateOpts{release: true, keepOnStop: true, metrics: m})
	waitForLeader(t, []*candidate{c})
	c.stop()
	if h := getLease(t, srv).GetSpec().GetHolderIdentity(); h != "kept" {
		t.Fatalf("lease holder %q after a stop that kept the lease; want %q", h, "kept")
	}
	if v := testutil.ToFloat64(m.transitions.WithLabelValues("test-controller", TransitionReleased)); v != 0 {
		t.Fatalf("transitions{released} = %v; want 0", v)
	}
	if v := testutil.ToFloat64(m.transitions.WithLabelValues("test-controller", TransitionStopped)); v != 1 {
		t.Fatalf("transitions{stopped} = %v; want 1", v)
	}
	next := startCandidate(t, srv, "next", candidateOpts{release: true, keepBeforeRun: true})
	waitForLeader(t, []*candidate{next})
	next.stop()
	if h := getLease(t, srv).GetSpec().GetHolderIdentity(); h != "" {
		t.Fatalf("lease holder %q after a plain stop; a KeepLease before the term must be forgotten", h)
	}
}

func TestLeaderStepsDownWhenAPIServerDies(t *testing.T) {
	srv := testserver.Start(t)
	cs := startCandidates(t, srv, 2, candidateOpts{})
	leader, _ := waitForLeader(t, cs)
	losses := leader.lossCount()

	killed := time.Now()
	srv.Kill()
	select {
	case <-leader.workStopped:
	case <-time.After(waitLimit):
		t.Fatalf("leader still working %v after the apiserver died", waitLimit)
	}
	stepDown := time.Since(killed)
	t.Logf("apiserver killed: leader %s stopped working after %v (renew deadline %v)", leader.id, stepDown.Round(time.Millisecond), testRenew)
	fmt.Printf("leaderelection: step-down after apiserver kill: %v\n", stepDown.Round(time.Millisecond))
	waitFor(t, "Run to report the loss", func() bool { return leader.lossCount() > losses })
	if err := leader.lastLoss(); !strings.Contains(err.Error(), "could not renew") {
		t.Fatalf("loss reported as %v, want a failure to renew", err)
	}
	if ls := leaders(cs); len(ls) != 0 {
		t.Fatalf("%s still leads with the apiserver down", ls[0].id)
	}
	if leader.started.Load() != leader.stopped.Load() {
		t.Fatalf("OnStartedLeading %d times but OnStoppedLeading %d times", leader.started.Load(), leader.stopped.Load())
	}

	// Back up: both stand again; one takes over once the lease, which
	// nobody renews any more, has expired on its clock.
	srv.Restart(t)
	restarted := time.Now()
	next, _ := waitForLeader(t, cs)
	t.Logf("after the restart %s leads after %v", next.id, time.Since(restarted).Round(time.Millisecond))
}

func TestLeaseTakenByAnotherStopsLeaderAtOnce(t *testing.T) {
	srv := testserver.Start(t)
	c := startCandidate(t, srv, "victim", candidateOpts{lease: steadyLease, renew: steadyRenew})
	waitForLeader(t, []*candidate{c})

	// Someone overwrites the lease with CAS (retrying while the leader's
	// renewals win the race).
	waitFor(t, "the intruder's write", func() bool {
		l := getLease(t, srv)
		l.Spec.HolderIdentity = "intruder"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := srv.Client().Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(l)})
		if status.Code(err) == codes.Aborted {
			return false
		}
		if err != nil {
			t.Fatalf("intruder update: %v", err)
		}
		return true
	})
	written := time.Now()
	// With an 8s renew deadline, only seeing the new holder can end the
	// leadership this soon.
	waitFor(t, "the leader to give up", func() bool { return c.lossCount() > 0 })
	t.Logf("leader stopped %v after its lease was taken", time.Since(written).Round(time.Millisecond))
	if err := c.lastLoss(); !strings.Contains(err.Error(), `held by "intruder"`) {
		t.Fatalf("loss reported as %v, want the lease held by the intruder", err)
	}
	if c.el.IsLeader() {
		t.Fatal("IsLeader after the lease was taken")
	}
	if c.el.GetLeader() != "intruder" {
		t.Fatalf("GetLeader = %q, want intruder", c.el.GetLeader())
	}
	if h := getLease(t, srv).GetSpec().GetHolderIdentity(); h != "intruder" {
		t.Fatalf("the old leader overwrote the lease: holder %q", h)
	}
}

func TestRunRejectsConcurrentRun(t *testing.T) {
	srv := testserver.Start(t)
	c := startCandidate(t, srv, "solo", candidateOpts{})
	waitForLeader(t, []*candidate{c})
	if err := c.el.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Run = %v, want an 'already running' error", err)
	}
}
