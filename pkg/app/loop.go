package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/pkg/workqueue"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Loop is one of several control loops that a Service runs in one
// process, each elected on a Lease of its own (kplane-system/<Name>): a
// loop's leader may be another replica than the other loops' leaders, and
// each loop can also run alone in a process of its own. cloudctl's node,
// route and service controllers are loops. A Service with loops is not
// LeaderElected itself; its Run calls RunLoop once per loop it runs.
type Loop struct {
	// Name of the loop: its Lease, work queue and reconcile metrics label.
	Name string
	// Watches feed the loop's queue while it leads (informers come from
	// the Context's shared factory). A new term queues every watched
	// object once, as a Service's does.
	Watches []Watch
	// Workers is the number of concurrent reconciles (default 1).
	Workers int
	// Reconciler reconciles the loop's keys.
	Reconciler Reconciler
}

// loopRunner is one running Loop.
type loopRunner struct {
	c     *Context
	l     Loop
	infs  []*informer.Informer
	el    *leaderelection.Elector // nil when the loop is not elected
	mu    sync.RWMutex
	queue *workqueue.Queue
}

// RunLoop runs l until ctx ends: under leader election on the Lease
// kplane-system/<l.Name> when le.LeaderElect is set, else at once. Each
// term waits until the loop's caches have synced and caught up with the
// apiserver (at most CatchUpLimit), queues every watched object, and
// reconciles until the term ends; the workers are cancelled at once when
// it does, and the lease is released when ctx ends, unless a reconcile
// was running then: its cancelled writes may still land, so the lease is
// left to expire (leaderelection.Elector.KeepLease). It returns nil when
// ctx ends, an error when the loop cannot be set up or elected.
func (c *Context) RunLoop(ctx context.Context, l Loop, le leaderelection.Options) error {
	if l.Name == "" || l.Reconciler == nil {
		return errors.New("app: a Loop needs a Name and a Reconciler")
	}
	lr := &loopRunner{c: c, l: l}
	for _, w := range l.Watches {
		inf, err := c.Informers.For(informer.Selection{Kind: w.Kind, Namespace: w.Namespace, LabelSelector: w.LabelSelector, FieldSelector: w.FieldSelector})
		if err != nil {
			return fmt.Errorf("app: loop %s: watch: %w", l.Name, err)
		}
		inf.AddEventHandler(lr.handlerFor(w))
		lr.infs = append(lr.infs, inf)
	}
	c.Informers.Start(ctx) // the ones this loop added; running ones are left alone
	if !le.LeaderElect {
		lr.term(ctx)
		return nil
	}
	m, err := c.r.loopElectionMetrics()
	if err != nil {
		return err
	}
	cfg := leaderelection.Config{
		Client: c.Client, Name: l.Name, ReleaseOnCancel: true,
		Logger: c.Logger.With("loop", l.Name), Metrics: m,
		Callbacks: leaderelection.Callbacks{OnStartedLeading: lr.term},
	}
	le.ApplyTo(&cfg)
	if lr.el, err = leaderelection.New(cfg); err != nil {
		return fmt.Errorf("app: loop %s: %w", l.Name, err)
	}
	for ctx.Err() == nil {
		err := lr.el.Run(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, leaderelection.ErrLeadershipLost) {
			return fmt.Errorf("app: loop %s: leader election: %w", l.Name, err)
		}
		c.Logger.Warn("leadership lost; standing for election again", "loop", l.Name, "error", err)
	}
	return nil
}

// loopElectionMetrics are the process's leader election series; every
// loop's elector shares them (they are labelled by name).
func (r *runner) loopElectionMetrics() (leaderelection.Metrics, error) {
	return r.proc.leaderMetrics()
}

// term is one leadership term (or the whole life of an unelected loop).
func (lr *loopRunner) term(ctx context.Context) {
	if !informer.WaitForCacheSync(ctx, lr.infs...) {
		return
	}
	q := workqueue.New(workqueue.Config{Name: lr.l.Name, MetricsProvider: lr.c.r.proc.queueMP})
	lr.setQueue(q)
	defer lr.setQueue(nil)
	defer q.ShutDown()
	cctx, cancel := context.WithTimeout(ctx, catchUpLimit)
	err := informer.CatchUp(cctx, lr.c.Client, lr.infs...)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		lr.c.Logger.Warn("cache did not catch up with the apiserver in time; starting anyway", "loop", lr.l.Name, "error", err)
	}
	lr.c.Logger.Info("leading: starting work", "loop", lr.l.Name)
	for i, inf := range lr.infs {
		for _, o := range inf.Store().List() {
			for _, k := range mapKeys(lr.l.Watches[i], o) {
				q.Add(k)
			}
		}
	}
	workers := max(lr.l.Workers, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lr.c.r.runWorkers(ctx, lr.l.Name, q, workers, ReconcileFunc(func(ctx context.Context, key string) error {
			err := lr.l.Reconciler.Reconcile(ctx, key)
			if ctx.Err() != nil && lr.el != nil {
				lr.el.KeepLease() // the term ended while this reconcile ran
			}
			return err
		}))
	}()
	<-ctx.Done()
	lr.setQueue(nil)
	q.ShutDown()
	<-done
	lr.c.Logger.Info("work stopped", "loop", lr.l.Name)
}

func (lr *loopRunner) setQueue(q *workqueue.Queue) {
	lr.mu.Lock()
	lr.queue = q
	lr.mu.Unlock()
}

func (lr *loopRunner) enqueue(key string) {
	lr.mu.RLock()
	q := lr.queue
	lr.mu.RUnlock()
	if q != nil {
		q.Add(key)
	}
}

func (lr *loopRunner) handlerFor(w Watch) informer.Handler {
	add := func(o *kplanev1.Object) {
		for _, k := range mapKeys(w, o) {
			lr.enqueue(k)
		}
	}
	return informer.Handler{
		OnAdd: add,
		OnUpdate: func(oldObj, newObj *kplanev1.Object) {
			if oldObj != newObj {
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
