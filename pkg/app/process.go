package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/health"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/pkg/workqueue"
)

// process holds what every service of one process shares: the metrics
// registry (series carry a controller or name label), the apiserver
// connection, the informer factory and the health server. A binary of
// its own has one service on it; a Host has several.
type process struct {
	log      hclog.Logger
	registry *prometheus.Registry
	metrics  *reconcileMetrics
	queueMP  workqueue.MetricsProvider
	client   *client.Client
	factory  *informer.Factory
	health   *health.Server

	leaderOnce sync.Once
	leaderM    *leaderelection.PrometheusMetrics
	leaderErr  error
}

// newProcess builds the shared parts, in the order they depend on each
// other, and undoes them on error. ready is /readyz; checks, when set,
// are served on /readyz/<name>.
func newProcess(ctx context.Context, name string, opts *options, log hclog.Logger,
	ready func() error, checks map[string]func() error) (_ *process, err error) {
	p := &process{log: log}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	p.registry = prometheus.NewRegistry()
	if err := p.registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("app: register Go metrics: %w", err)
	}
	if err := p.registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("app: register process metrics: %w", err)
	}
	if p.metrics, err = newReconcileMetrics(p.registry); err != nil {
		return nil, err
	}
	if p.queueMP, err = workqueue.NewPrometheusProvider(p.registry); err != nil {
		return nil, fmt.Errorf("app: work queue metrics: %w", err)
	}

	copts := opts.client
	copts.Logger = log
	copts.UserAgent = name
	if p.client, err = client.Dial(ctx, copts); err != nil {
		return nil, err
	}
	if p.factory, err = informer.NewFactory(p.client, informer.FactoryOptions{
		ResyncPeriod: opts.resyncPeriod, Logger: log, Registerer: p.registry,
	}); err != nil {
		return nil, err
	}
	if opts.healthAddr != "" {
		hopts := []health.Option{health.WithProfiling(opts.profiling.Enabled(opts.healthAddr))}
		if checks != nil {
			hopts = append(hopts, health.WithReadyChecks(checks))
		}
		if p.health, err = health.Start(opts.healthAddr, p.registry, ready, log, hopts...); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// leaderMetrics are the leader-election series, registered on first use.
func (p *process) leaderMetrics() (*leaderelection.PrometheusMetrics, error) {
	p.leaderOnce.Do(func() {
		p.leaderM, p.leaderErr = leaderelection.NewPrometheusMetrics(p.registry)
		if p.leaderErr != nil {
			p.leaderErr = fmt.Errorf("app: leader election metrics: %w", p.leaderErr)
		}
	})
	return p.leaderM, p.leaderErr
}

// close stops the health server and closes the connection. It is safe
// on a partial process.
func (p *process) close() {
	if p.health != nil {
		p.health.Stop()
	}
	if p.client != nil {
		_ = p.client.Close()
	}
}

// readiness is /readyz of a process whose services are added after its
// health server started: ready while every service is.
type readiness struct {
	mu      sync.RWMutex
	runners []*runner
}

func (rd *readiness) add(r *runner) {
	rd.mu.Lock()
	rd.runners = append(rd.runners, r)
	rd.mu.Unlock()
}

// ready is the process's /readyz. With several services, an error names
// the service.
func (rd *readiness) ready() error {
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	if len(rd.runners) == 0 {
		return errors.New("starting")
	}
	for _, r := range rd.runners {
		if err := r.ready(); err != nil {
			if len(rd.runners) > 1 {
				return fmt.Errorf("%s: %w", r.svc.Name, err)
			}
			return err
		}
	}
	return nil
}

// check is the readiness of the service named name alone, for
// /readyz/<name>.
func (rd *readiness) check(name string) func() error {
	return func() error {
		rd.mu.RLock()
		defer rd.mu.RUnlock()
		for _, r := range rd.runners {
			if r.svc.Name == name {
				return r.ready()
			}
		}
		return errors.New("starting")
	}
}
