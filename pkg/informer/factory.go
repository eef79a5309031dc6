package informer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// FactoryOptions configure a Factory and the informers it creates.
type FactoryOptions struct {
	// Namespace restricts ForKind's informers of namespaced kinds ("" = all).
	Namespace string
	// ResyncPeriod of every informer (0 = off).
	ResyncPeriod time.Duration
	// PageSize of the informers' lists (default DefaultPageSize).
	PageSize int64
	// Backoff of the informers' retries (default DefaultBackoff).
	Backoff client.Backoff
	// Logger (default: null logger).
	Logger hclog.Logger
	// Registerer receives the informer metrics (nil = not registered).
	Registerer prometheus.Registerer
}

// Factory hands out shared informers: asking twice for the same selection
// returns the same informer, so the controllers of one process share one
// watch and one cache per kind. Every informer gets the namespace index,
// the owner-uid index and, for pods, the node-name index.
type Factory struct {
	*shared
	// used is nil for a factory of its own; for a Scoped view, the
	// selections asked for through it (guarded by shared.mu).
	used map[Selection]bool
}

// shared is what a factory and its scoped views have in common.
type shared struct {
	api     kplanev1.ResourcesClient
	opts    FactoryOptions
	metrics *Metrics

	mu        sync.Mutex
	informers map[Selection]*Informer
	running   map[Selection]bool
	wg        sync.WaitGroup
}

// NewFactory returns a factory whose informers read through api.
func NewFactory(api kplanev1.ResourcesClient, opts FactoryOptions) (*Factory, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	m, err := NewMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Factory{shared: &shared{
		api: api, opts: opts, metrics: m,
		informers: map[Selection]*Informer{},
		running:   map[Selection]bool{},
	}}, nil
}

// Scoped returns a view of f for one of several loops in a process: For
// and ForKind hand out f's shared informers (one watch per selection for
// the whole process), but Informers, HasSynced, WaitForCacheSync and
// Start cover only the selections asked for through this view, so one
// loop's readiness and catch-up do not wait on another loop's kinds.
func (f *Factory) Scoped() *Factory {
	return &Factory{shared: f.shared, used: map[Selection]bool{}}
}

// mine reports whether sel belongs to this factory or view (mu held).
func (f *Factory) mine(sel Selection) bool { return f.used == nil || f.used[sel] }

// ForKind returns the shared informer of kind in the factory's namespace.
// It panics on a kind the API does not serve: kind names are constants in
// controller code, so this is a programming error.
func (f *Factory) ForKind(kind string) *Informer {
	inf, err := f.For(Selection{Kind: kind, Namespace: f.opts.Namespace})
	if err != nil {
		panic(err)
	}
	return inf
}

// ForKindTrimmed is ForKind with trim as the informer's transform, for a
// loop that caches many objects of kind and reads few of their fields.
// The trim applies only in a factory of its own, which serves one loop
// (a binary of its own). A Scoped view's informers are shared with the
// other loops of its process, whose reads one loop's trim must not cut, so
// through a view the objects stay whole: the process pays memory for the
// one watch and cache it shares. Either way, the loop must read afresh
// whatever object it writes back, never update from its cached copy. It
// fails when the informer has started or already has a transform.
func (f *Factory) ForKindTrimmed(kind string, trim TransformFunc) (*Informer, error) {
	inf := f.ForKind(kind)
	if f.used != nil {
		return inf, nil
	}
	if err := inf.SetTransform(trim); err != nil {
		return nil, err
	}
	return inf, nil
}

// For returns the shared informer of sel, creating it on first use. The
// namespace of a cluster-scoped kind is ignored. An informer created after
// Start runs once Start is called again.
func (f *Factory) For(sel Selection) (*Informer, error) {
	k := kplanev1.LookupKind(sel.Kind)
	if k == nil {
		return nil, fmt.Errorf("informer: %s", kplanev1.UnknownKindError(sel.Kind))
	}
	if !k.Namespaced {
		sel.Namespace = ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.informers[sel]; ok {
		if f.used != nil {
			f.used[sel] = true
		}
		return inf, nil
	}
	ix := ownerIndexers()
	if sel.Kind == "Pod" {
		ix[PodNodeNameIndex] = IndexPodsByNodeName
	}
	inf, err := New(f.api, Options{
		Selection:    sel,
		ResyncPeriod: f.opts.ResyncPeriod,
		PageSize:     f.opts.PageSize,
		Indexers:     ix,
		Backoff:      f.opts.Backoff,
		Logger:       f.opts.Logger,
		Metrics:      f.metrics,
	})
	if err != nil {
		return nil, err
	}
	f.informers[sel] = inf
	if f.used != nil {
		f.used[sel] = true
	}
	return inf, nil
}

// Informers returns every informer created so far (through this view,
// for a Scoped one).
func (f *Factory) Informers() []*Informer {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Informer, 0, len(f.informers))
	for sel, inf := range f.informers {
		if f.mine(sel) {
			out = append(out, inf)
		}
	}
	return out
}

// Start runs every informer not yet running until ctx ends. It does not
// block; Wait waits for them to stop.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sel, inf := range f.informers {
		if f.running[sel] || !f.mine(sel) {
			continue
		}
		f.running[sel] = true
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := inf.Run(ctx); err != nil {
				f.opts.Logger.Error("informer failed", "selection", sel.String(), "error", err)
			}
		}()
	}
}

// WaitForCacheSync waits until every started informer has synced; false
// means ctx ended first.
func (f *Factory) WaitForCacheSync(ctx context.Context) bool {
	f.mu.Lock()
	var infs []*Informer
	for sel, inf := range f.informers {
		if f.running[sel] && f.mine(sel) {
			infs = append(infs, inf)
		}
	}
	f.mu.Unlock()
	return WaitForCacheSync(ctx, infs...)
}

// HasSynced reports whether every started informer has synced.
func (f *Factory) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sel, inf := range f.informers {
		if f.running[sel] && f.mine(sel) && !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Wait blocks until every started informer has stopped (after the context
// given to Start ended); for a Scoped view, every informer of the factory.
func (f *Factory) Wait() { f.wg.Wait() }
