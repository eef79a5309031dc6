package app

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/backoff"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/pkg/workqueue"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// catchUpRetry spaces the attempts of a term that must catch up before it
// works (Service.RequireCatchUp).
var catchUpRetry = backoff.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 5 * time.Second}

// catchUpLimit is CatchUpLimit; tests shorten it.
var catchUpLimit = CatchUpLimit

// runner is one running service: its own binary's, or one of several in
// a Host's process.
type runner struct {
	svc        Service
	opts       *options
	log        hclog.Logger
	proc       *process
	own        bool              // the runner owns proc: a binary of its own
	factory    *informer.Factory // proc's factory, or a Scoped view of it when hosted
	onFail     func(error)       // hosted: stops the whole process
	reconciler Reconciler
	elector    *leaderelection.Elector
	appCtx     *Context
	watched    []*informer.Informer
	watches    []Watch

	// rootCtx is Run's context plus cancel, which fail uses to stop the
	// service on a fatal error.
	rootCtx context.Context
	cancel  context.CancelFunc
	errMu   sync.Mutex
	err     error

	mu    sync.RWMutex
	queue *workqueue.Queue // the current term's queue; nil while not working

	working      atomic.Bool // leading, or running unelected
	candidate    atomic.Bool // taking part in the election
	shuttingDown atomic.Bool
}

// newRunner builds a binary of its own: the process's shared parts, then
// the service, and undoes it on error.
func newRunner(ctx context.Context, svc Service, opts *options) (*runner, error) {
	log := opts.logger(svc.Name)
	rd := &readiness{}
	proc, err := newProcess(ctx, svc.Name, opts, log, rd.ready, nil)
	if err != nil {
		return nil, err
	}
	r, err := newServiceRunner(ctx, svc, opts, proc, proc.factory, log, nil)
	if err != nil {
		proc.close()
		return nil, err
	}
	r.own = true
	rd.add(r)
	return r, nil
}

// newServiceRunner builds one service on proc's shared parts: its
// election, its watches and its Setup. factory is what the service's
// Context hands out (a Scoped view when several services share proc).
func newServiceRunner(ctx context.Context, svc Service, opts *options, proc *process, factory *informer.Factory,
	log hclog.Logger, onFail func(error)) (_ *runner, err error) {
	r := &runner{svc: svc, opts: opts, log: log, proc: proc, factory: factory, onFail: onFail}
	r.rootCtx, r.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			r.close()
		}
	}()

	identity := ""
	if opts.leader.LeaderElect {
		lm, err := proc.leaderMetrics()
		if err != nil {
			return nil, err
		}
		cfg := leaderelection.Config{
			Client:          proc.client,
			Name:            svc.Name,
			ReleaseOnCancel: true,
			Logger:          r.log,
			Metrics:         lm,
			Callbacks:       leaderelection.Callbacks{OnStartedLeading: r.lead},
		}
		opts.leader.ApplyTo(&cfg)
		identity = cfg.Identity
		if r.elector, err = leaderelection.New(cfg); err != nil {
			return nil, err
		}
	}

	r.appCtx = &Context{
		Name: svc.Name, Logger: r.log, Client: proc.client, Informers: r.factory,
		Registry: proc.registry, ResyncPeriod: opts.resyncPeriod, Identity: identity, r: r,
	}
	for _, w := range svc.Watches {
		inf, err := r.factory.For(informer.Selection{Kind: w.Kind, Namespace: w.Namespace, LabelSelector: w.LabelSelector, FieldSelector: w.FieldSelector})
		if err != nil {
			return nil, fmt.Errorf("app: watch: %w", err)
		}
		inf.AddEventHandler(r.handlerFor(w))
		r.watched = append(r.watched, inf)
		r.watches = append(r.watches, w)
	}
	var rec Reconciler
	if svc.Setup != nil {
		if rec, err = svc.Setup(r.appCtx); err != nil {
			return nil, fmt.Errorf("app: setup: %w", err)
		}
	}
	switch {
	case rec != nil && svc.Reconcile != nil:
		return nil, errors.New("app: both Service.Reconcile and a Reconciler from Setup are given")
	case rec != nil:
		r.reconciler = rec
	case svc.Reconcile != nil:
		r.reconciler = ReconcileFunc(svc.Reconcile)
	}
	if r.reconciler == nil && svc.Run == nil {
		return nil, errors.New("app: the service has neither a reconciler nor a Run function")
	}
	if r.reconciler == nil && len(svc.Watches) > 0 {
		return nil, errors.New("app: Watches feed a work queue, but there is no reconciler")
	}
	return r, nil
}

// run starts the informers, does the work (under leader election when
// configured) until ctx ends, then shuts down.
func (r *runner) run() error {
	defer r.close()
	ctx := r.rootCtx
	r.log.Info("starting", "apiserver", r.proc.client.Address(), "health_addr", r.healthAddr(),
		"leader_elect", r.elector != nil, "workers", r.opts.workers)
	if r.own {
		r.factory.Start(ctx)
	}

	if r.elector != nil {
		for ctx.Err() == nil {
			r.candidate.Store(true)
			err := r.elector.Run(ctx)
			r.candidate.Store(false)
			if err == nil {
				break
			}
			if !errors.Is(err, leaderelection.ErrLeadershipLost) {
				r.fail(fmt.Errorf("app: %s: leader election: %w", r.svc.Name, err))
				break
			}
			// Work stopped the moment the lease was lost; stand again so
			// this replica is a standby rather than dead weight.
			r.log.Warn("leadership lost; standing for election again", "error", err)
		}
	} else {
		r.lead(ctx)
	}

	r.shuttingDown.Store(true)
	r.cancel() // stops the informers when work ended for another reason
	if r.own {
		r.factory.Wait()
	}
	if err := r.failure(); err != nil {
		r.log.Error("stopped after a fatal error", "error", err)
		return err
	}
	r.log.Info("stopped cleanly")
	return nil
}

// fail records the first fatal error and shuts the service down.
func (r *runner) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
	r.cancel()
	if r.onFail != nil {
		r.onFail(err)
	}
}

func (r *runner) failure() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// close releases what newRunner acquired (the process's parts only when
// the runner owns them). It is safe on a partial runner.
func (r *runner) close() {
	r.shuttingDown.Store(true)
	r.cancel()
	if r.own {
		r.proc.close()
	}
}

// lead does the work for one leadership term (or the whole life of an
// unelected service): it waits for the caches (for a new leader, until
// they have caught up with the apiserver), queues every watched object,
// runs the workers and Service.Run, and stops them when ctx ends.
func (r *runner) lead(ctx context.Context) {
	r.working.Store(true)
	defer r.working.Store(false)
	if !r.factory.WaitForCacheSync(ctx) {
		return
	}
	var q *workqueue.Queue
	if r.reconciler != nil {
		// Events from now on are queued; the workers start once the cache
		// has caught up, so nothing acts on a stale view.
		q = workqueue.New(workqueue.Config{Name: r.svc.Name, MetricsProvider: r.proc.queueMP})
		r.setQueue(q)
		defer q.ShutDown()
	}
	if r.elector != nil {
		r.catchUp(ctx)
		if ctx.Err() != nil {
			r.setQueue(nil)
			return
		}
	}
	r.log.Info("caches synced; starting work")

	// Reconciles get their own context: on SIGTERM they may finish (within
	// the grace period), but a lost lease cancels them at once.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var wg sync.WaitGroup
	if q != nil {
		// Level-triggered: a new term reconciles everything, since events
		// that arrived while standing by were not queued.
		r.enqueueAll()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runWorkers(workCtx, r.svc.Name, q, r.opts.workers, r.reconciler)
		}()
	}
	if r.svc.Run != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A loop that fails while it should be running takes the
			// process down, so that its supervisor restarts it.
			if err := r.svc.Run(ctx, r.appCtx); err != nil && ctx.Err() == nil {
				r.fail(fmt.Errorf("app: %s: %w", r.svc.Name, err))
			}
		}()
	}

	<-ctx.Done()
	r.setQueue(nil)
	if q != nil {
		q.ShutDown() // stop handing out keys; held ones may finish
	}
	var grace *time.Timer
	if r.rootCtx.Err() == nil {
		// Not a shutdown: leadership was lost, so stop at once.
		cancelWork()
	} else {
		grace = time.AfterFunc(r.opts.shutdownGrace, cancelWork)
	}
	wg.Wait()
	if grace != nil && !grace.Stop() && r.elector != nil {
		// The grace ran out and cancelled work in flight: see KeepLease.
		r.elector.KeepLease()
	}
	r.log.Info("work stopped")
}

// catchUp holds a new leadership term until every informer has applied
// the newest write among the objects a fresh (quorum) list returns
// (informer.CatchUp). A standby's informers run all along but may lag
// behind the writes of the leader it replaces, whose in-flight creates can
// land just before it let go; acting on such a cache would, say, create
// pods twice. Past CatchUpLimit work starts anyway (expectations and the
// next resync still protect the outcome), unless the service sets
// RequireCatchUp: then it tries again, with backoff, for as long as the
// term lasts.
func (r *runner) catchUp(ctx context.Context) {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, catchUpLimit)
		err := informer.CatchUp(cctx, r.proc.client, r.factory.Informers()...)
		cancel()
		switch {
		case err == nil:
			r.log.Info("leading: cache caught up with the apiserver", "wait", time.Since(start))
			return
		case ctx.Err() != nil:
			return
		case !r.svc.RequireCatchUp:
			r.log.Warn("cache did not catch up with the apiserver in time; starting anyway", "error", err)
			return
		}
		r.log.Warn("cache has not caught up with the apiserver; work waits", "error", err, "waited", time.Since(start))
		if client.Sleep(ctx, catchUpRetry.Delay(attempt)) != nil {
			return
		}
	}
}

// runWorkers reconciles keys from q with n workers until q shuts down.
func (r *runner) runWorkers(ctx context.Context, name string, q *workqueue.Queue, n int, rec Reconciler) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				r.process(ctx, name, q, rec, key)
				q.Done(key)
			}
		}()
	}
	wg.Wait()
}

// panicError is a recovered reconcile panic.
type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("reconcile panicked: %v", e.value) }

func (r *runner) process(ctx context.Context, name string, q *workqueue.Queue, rec Reconciler, key string) {
	start := time.Now()
	err := r.reconcile(ctx, name, rec, key)
	r.proc.metrics.observe(name, time.Since(start), err)
	var again *requeueAfter
	var panicked *panicError
	switch {
	case err == nil:
		q.Forget(key)
	case errors.As(err, &again):
		q.Forget(key)
		q.AddAfter(key, again.after)
	case errors.As(err, &panicked):
		q.AddRateLimited(key) // logged with its stack by reconcile
	default:
		r.log.Warn("reconcile failed; will retry", "controller", name, "key", key, "error", err, "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
	}
}

// reconcile runs one reconcile, turning a panic into an error: one bad
// object must not take down the process (and every other key with it).
func (r *runner) reconcile(ctx context.Context, name string, rec Reconciler, key string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.proc.metrics.panics.WithLabelValues(name).Inc()
			r.log.Error("reconcile panicked; will retry with backoff", "controller", name, "key", key, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = &panicError{value: p}
		}
	}()
	return rec.Reconcile(ctx, key)
}

func (r *runner) setQueue(q *workqueue.Queue) {
	r.mu.Lock()
	r.queue = q
	r.mu.Unlock()
}

func (r *runner) currentQueue() *workqueue.Queue {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.queue
}

func (r *runner) enqueue(key string) {
	if q := r.currentQueue(); q != nil {
		q.Add(key)
	}
}

func (r *runner) enqueueAfter(key string, d time.Duration) {
	if q := r.currentQueue(); q != nil {
		q.AddAfter(key, d)
	}
}

func (r *runner) enqueueAll() {
	for i, inf := range r.watched {
		for _, o := range inf.Store().List() {
			for _, k := range mapKeys(r.watches[i], o) {
				r.enqueue(k)
			}
		}
	}
}

func mapKeys(w Watch, o *kplanev1.Object) []string {
	if w.MapToKey != nil {
		return w.MapToKey(o)
	}
	return []string{o.Key()}
}

// handlerFor turns a watch's informer events into queued keys.
func (r *runner) handlerFor(w Watch) informer.Handler {
	add := func(o *kplanev1.Object) {
		for _, k := range mapKeys(w, o) {
			r.enqueue(k)
		}
	}
	return informer.Handler{
		OnAdd: add,
		OnUpdate: func(oldObj, newObj *kplanev1.Object) {
			if oldObj != newObj {
				if w.Changed != nil && !w.Changed(oldObj, newObj) {
					return
				}
				add(oldObj)
			}
			add(newObj)
		},
		OnDelete: func(obj any) {
			if o, ok := informer.ObjectOf(obj); ok {
				add(o)
			}
		},
	}
}

func (r *runner) isLeader() bool {
	if r.elector != nil {
		return r.elector.IsLeader()
	}
	return r.working.Load()
}

func (r *runner) healthAddr() string {
	if r.proc.health == nil {
		return ""
	}
	return r.proc.health.Addr()
}

// ready is /readyz: caches synced and, for an elected service, taking part
// in the election (leading or standing by); never while shutting down.
func (r *runner) ready() error {
	switch {
	case r.shuttingDown.Load() || r.rootCtx.Err() != nil:
		return errors.New("shutting down")
	case r.factory == nil || !r.factory.HasSynced():
		return errors.New("informer caches not synced")
	case r.elector != nil && !r.candidate.Load():
		return errors.New("not taking part in leader election")
	case r.elector == nil && !r.working.Load():
		return errors.New("not started")
	}
	for _, inf := range r.watched {
		if !inf.HasSynced() {
			return fmt.Errorf("%s informer not synced", inf.Kind())
		}
	}
	return nil
}
