// Package app is the common main of kplane's service binaries: flags,
// logging, the apiserver client, shared informers, health, metrics and
// (with --enable-profiling) pprof over HTTP, leader election, a
// rate-limited work queue feeding reconcile workers, and SIGTERM handling.
// A controller lives in an importable package that exports a constructor
// of its Service; its binary's main is one line:
//
//	func main() { app.Main(replicaset.NewService()) }
//
// The Service of an owner-of-pods controller (replicactl's, shortened)
// watches its own kind through Watches, and the pods through a handler of
// its own, which counts every event against the owner's expectations
// before it queues the owner:
//
//	func (r *replicaController) service() app.Service {
//		return app.Service{
//			Name: "replicactl", HealthAddr: ":10252", LeaderElected: true, Workers: 5,
//			Watches: []app.Watch{{Kind: "ReplicaSet"}},
//			Setup:   r.setup,
//		}
//	}
//
//	func (r *replicaController) setup(c *app.Context) (app.Reconciler, error) {
//		r.control = &controller.ObjectControl{API: c.Client, Expectations: r.exp, OwnerKey: controllerKey}
//		r.pods = c.Informers.ForKind("Pod")
//		r.pods.AddEventHandler(informer.Handler{
//			OnAdd: func(pod *kplanev1.Object) {
//				r.control.ObserveAdd(pod)   // first the expectation...
//				r.enqueue(r.ownersOf(pod)) // ...then the owners' reconciles
//			},
//			// OnUpdate, OnDelete alike
//		})
//		return r, nil
//	}
//
// Do not feed the owner's queue from the pods with Watch{Kind: "Pod",
// MapToKey: app.OwnerKey("ReplicaSet")} in such a controller: that
// handler runs apart from the one that observes expectations, so the
// owner can be reconciled before its new pod is counted, and creates it
// again. OwnerKey suits controllers that keep no expectations.
//
// Lifecycle: informers start at once in every replica, so a standby has a
// warm cache. Reconcile workers run only while leading (or always, for
// services that are not leader-elected). A new leadership term first waits
// until the caches have caught up with what the apiserver holds (at most
// CatchUpLimit), since the previous leader's last writes may not have
// reached this replica yet (a Service with RequireCatchUp waits for as long
// as it takes), then queues every watched object once, since
// events seen while standing by were not queued. A reconcile that panics
// is recovered, logged with its stack, counted
// (kplane_controller_reconcile_panics_total) and retried with backoff.
// When the lease is lost the workers' context is cancelled at once. On
// SIGTERM or SIGINT the process stops taking work, lets in-flight
// reconciles finish (for at most --shutdown-grace-period), releases the
// lease so a standby takes over immediately, and exits 0.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/workqueue"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Defaults of the common flags.
const (
	DefaultResyncPeriod  = 5 * time.Minute
	DefaultShutdownGrace = 10 * time.Second
	// CatchUpLimit bounds how long a new leader waits for its caches to
	// show what the apiserver held when it took over.
	CatchUpLimit = 10 * time.Second
)

// Reconciler makes the world match the desired state of the object named
// by key ("ns/name"). It must be idempotent: it runs again after errors,
// on resyncs and after a failover, possibly after a crash half-way.
type Reconciler interface {
	Reconcile(ctx context.Context, key string) error
}

// ReconcileFunc adapts a function to Reconciler.
type ReconcileFunc func(ctx context.Context, key string) error

// Reconcile implements Reconciler.
func (f ReconcileFunc) Reconcile(ctx context.Context, key string) error { return f(ctx, key) }

// Watch names an informer whose events feed the work queue.
type Watch struct {
	// Kind to watch, e.g. "Pod".
	Kind string
	// Namespace, LabelSelector and FieldSelector narrow the informer
	// (informers are shared per distinct selection).
	Namespace     string
	LabelSelector string
	FieldSelector string
	// MapToKey maps an object to the keys to reconcile; nil queues the
	// object's own key. For an update both the old and the new object are
	// mapped, so a dependent that changes owner wakes both.
	MapToKey func(obj *kplanev1.Object) []string
	// Changed, when set, decides which updates wake the keys: an update
	// it returns false for is not queued (a resync always is). With
	// controller.StatusWrites.Changed a controller's own status writes
	// do not wake it again.
	Changed func(oldObj, newObj *kplanev1.Object) bool
}

// OwnerKey maps a dependent to the key of its controlling owner of
// ownerKind, e.g. a Pod to its ReplicaSet: Watch{Kind: "Pod", MapToKey:
// app.OwnerKey("ReplicaSet")}.
func OwnerKey(ownerKind string) func(obj *kplanev1.Object) []string {
	return controller.OwnerKeys(ownerKind)
}

// Service describes a binary.
type Service struct {
	// Name of the binary; also the lease name, the work queue name and the
	// "controller" label of the reconcile metrics.
	Name string
	// HealthAddr is the default of --health-addr, e.g. ":10252" ("" = off).
	HealthAddr string
	// LeaderElected adds the leader election flags; reconcile workers and
	// Run only run while this replica leads (unless --leader-elect=false).
	LeaderElected bool
	// Watches feed the work queue.
	Watches []Watch
	// RequireCatchUp makes a new leadership term start no work until the
	// caches have caught up with the apiserver, however long that takes
	// (trying again after each CatchUpLimit or failed list). For
	// controllers whose writes a stale cache would make wrong for good,
	// like ipamctl's set-once spec.podCIDR; others start after
	// CatchUpLimit anyway.
	RequireCatchUp bool
	// Workers is the default of --workers, the number of concurrent
	// reconciles (default 1). A key is never reconciled concurrently.
	Workers int
	// Reconcile is the reconcile function; alternatively Setup returns a
	// Reconciler.
	Reconcile func(ctx context.Context, key string) error
	// Setup runs once the client, informers and HTTP server exist, before
	// the informers start; it may add informers, handlers and indexers. It
	// returns the Reconciler (nil when Reconcile is set or the service has
	// no work queue).
	Setup func(c *Context) (Reconciler, error)
	// Run, when set, runs alongside the workers (while leading, for
	// leader-elected services) until its context ends. For services whose
	// work is not a keyed reconcile (a scheduler loop, a node agent).
	Run func(ctx context.Context, c *Context) error
	// AddFlags registers the binary's own flags.
	AddFlags func(fs *flag.FlagSet)
	// CheckFlags, when set, checks the binary's own flags together once
	// they are parsed; its error is a usage error, reported before
	// anything starts.
	CheckFlags func() error
	// ResyncPeriod is the default of --resync-period (DefaultResyncPeriod when 0).
	ResyncPeriod time.Duration
}

// Context gives Setup and Run access to the process's shared parts.
type Context struct {
	// Name of the service.
	Name string
	// Logger, configured from --log-level and --log-format.
	Logger hclog.Logger
	// Client to the apiserver.
	Client *client.Client
	// Informers is the shared informer factory.
	Informers *informer.Factory
	// Registry holds every metric served on /metrics; register your own here.
	Registry *prometheus.Registry
	// ResyncPeriod from --resync-period.
	ResyncPeriod time.Duration
	// Identity in leader election ("" when not leader-elected).
	Identity string

	r *runner
}

// Enqueue queues key for reconciling; it is dropped when this replica does
// not lead (the next leader queues everything when it starts).
func (c *Context) Enqueue(key string) { c.r.enqueue(key) }

// EnqueueAfter queues key after d.
func (c *Context) EnqueueAfter(key string, d time.Duration) { c.r.enqueueAfter(key, d) }

// RunWorkers reconciles the keys of q with n workers until q shuts down,
// exactly as the service's own workers do (metrics labelled name, panics
// recovered and counted, failed keys requeued with q's rate limiter). It
// is for services that keep a second queue of their own, e.g. the
// scheduler's per-term queues; the caller shuts q down to stop it.
func (c *Context) RunWorkers(ctx context.Context, name string, q *workqueue.Queue, n int, rec Reconciler) {
	c.r.runWorkers(ctx, name, q, n, rec)
}

// Counter is a count a service keeps itself and serves on /metrics as a
// Prometheus counter.
type Counter struct {
	// Name and Help of the series, e.g. "kplane_jobctl_finalizer_removals_total".
	Name, Help string
	// Value is read at every scrape.
	Value *atomic.Int64
}

// RegisterCounters serves each counter on /metrics.
func (c *Context) RegisterCounters(counters ...Counter) error {
	for _, m := range counters {
		v := m.Value
		if err := c.Registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.Name, Help: m.Help},
			func() float64 { return float64(v.Load()) })); err != nil {
			return fmt.Errorf("register metric %s: %w", m.Name, err)
		}
	}
	return nil
}

// IsLeader reports whether this replica currently does the work.
func (c *Context) IsLeader() bool { return c.r.isLeader() }

// HealthAddr returns the address the HTTP server listens on ("" when off),
// useful when --health-addr asked for port 0.
func (c *Context) HealthAddr() string { return c.r.healthAddr() }

// requeueAfter is returned by RequeueAfter.
type requeueAfter struct{ after time.Duration }

func (r *requeueAfter) Error() string { return fmt.Sprintf("requeue after %v", r.after) }

// RequeueAfter, returned by Reconcile, asks for the key to be reconciled
// again after d without counting an error (e.g. to check a deadline later).
func RequeueAfter(d time.Duration) error { return &requeueAfter{after: d} }

// IsRequeue reports whether err is (or wraps) a RequeueAfter: a reconcile
// that succeeded and asked to be run again later.
func IsRequeue(err error) bool {
	var again *requeueAfter
	return errors.As(err, &again)
}

// Main runs svc with the process arguments until SIGTERM or SIGINT and
// exits: 0 after a clean shutdown, 2 for bad flags, 1 otherwise.
func Main(svc Service) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := Run(ctx, svc, os.Args[1:])
	stop()
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name, err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name, err)
		os.Exit(1)
	}
}

// Run runs svc with args until ctx ends (the SIGTERM-equivalent), then
// shuts down cleanly and returns nil. It returns an error for bad flags, a
// failed start, or a Service.Run that failed while it should have been
// running (after shutting down all the same).
func Run(ctx context.Context, svc Service, args []string) error {
	if svc.Name == "" {
		return errors.New("app: Service.Name is required")
	}
	opts, err := parseFlags(svc, args)
	if err != nil {
		return err
	}
	r, err := newRunner(ctx, svc, opts)
	if err != nil {
		return err
	}
	return r.run()
}
