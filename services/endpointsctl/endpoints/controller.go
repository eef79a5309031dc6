// Package endpoints is endpointsctl's control loop: for every Service
// with a selector it keeps an Endpoints object of the same name listing
// the addresses and ports of the pods the Service selects.
package endpoints

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	// endpointsKeyPrefix marks the key of an Endpoints event. Its
	// reconcile only queues the Service's key after the batch period: our
	// own writes come back as such events, and queueing them at once
	// would cut every batch short.
	endpointsKeyPrefix = "endpoints:"

	kindService   = "Service"
	kindEndpoints = "Endpoints"
	kindPod       = "Pod"
)

// endpointsController reconciles the Endpoints of Services. Keys are
// the Service's (and its Endpoints') namespace/name.
type endpointsController struct {
	batchPeriod time.Duration

	api       *client.Client
	log       hclog.Logger
	ctx       *app.Context
	services  *informer.Informer
	endpoints *informer.Informer
	pods      *informer.Informer
	now       func() time.Time
	started   time.Time

	// lastTrigger is, per key, the Ready lastTransitionTime of each pod
	// (by uid) the last Endpoints write reflected: the latency histogram
	// observes each change once.
	mu          sync.Mutex
	lastTrigger map[string]map[string]time.Time

	creates, updates, deletes atomic.Int64
	latency                   prometheus.Histogram
}

// NewService returns endpointsctl: the binary's main runs it with app.Main.
func NewService() app.Service { return newEndpointsController().service() }

func newEndpointsController() *endpointsController {
	return &endpointsController{now: time.Now, lastTrigger: map[string]map[string]time.Time{}}
}

// service describes the binary. Keys are a Service's namespace/name.
// Service events queue it at once; pod events queue the Services that
// select the pod, after the batch period (see setup); an Endpoints event
// queues its Service's key after the batch period too (a user's edit or
// delete of managed Endpoints is undone, a leftover whose Service is gone
// is removed).
func (e *endpointsController) service() app.Service {
	return app.Service{
		Name:          "endpointsctl",
		HealthAddr:    ":10257",
		LeaderElected: true,
		// Endpoints written from caches that have not caught up would
		// drop live pods (or delete a live Service's Endpoints): traffic
		// lost until the caches catch up. Wait as long as it takes.
		RequireCatchUp: true,
		Workers:        5,
		Watches: []app.Watch{
			{Kind: kindService},
			{Kind: kindEndpoints, MapToKey: func(o *kplanev1.Object) []string { return []string{endpointsKeyPrefix + o.Key()} }},
		},
		AddFlags: func(fs *flag.FlagSet) {
			fs.DurationVar(&e.batchPeriod, "endpoint-updates-batch-period", 0,
				"how long pod changes are collected before a Service's Endpoints are written (0: at once); changes within it coalesce into one write")
		},
		Setup: e.setup,
	}
}

func (e *endpointsController) setup(c *app.Context) (app.Reconciler, error) {
	if e.batchPeriod < 0 {
		return nil, fmt.Errorf("--endpoint-updates-batch-period must not be negative, not %v", e.batchPeriod)
	}
	e.api, e.log, e.ctx, e.started = c.Client, c.Logger, c, e.now()
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_endpointsctl_endpoints_creates_total", Help: "Endpoints objects created.", Value: &e.creates},
		app.Counter{Name: "kplane_endpointsctl_endpoints_updates_total", Help: "Endpoints objects updated.", Value: &e.updates},
		app.Counter{Name: "kplane_endpointsctl_endpoints_deletes_total", Help: "Endpoints objects deleted.", Value: &e.deletes},
	); err != nil {
		return nil, err
	}
	e.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kplane_endpointsctl_readiness_to_write_seconds",
		Help:    "Time from a pod's Ready condition changing (its lastTransitionTime) to the Endpoints write reflecting it.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	if err := c.Registry.Register(e.latency); err != nil {
		return nil, fmt.Errorf("register latency histogram: %w", err)
	}
	e.services = c.Informers.ForKind(kindService)
	e.endpoints = c.Informers.ForKind(kindEndpoints)
	e.pods = c.Informers.ForKind(kindPod)
	e.pods.AddEventHandler(informer.Handler{
		OnAdd: func(pod *kplanev1.Object) { e.enqueuePod(pod, nil) },
		OnUpdate: func(oldPod, newPod *kplanev1.Object) {
			if oldPod != newPod {
				e.enqueuePod(newPod, oldPod)
			}
		},
		OnDelete: func(obj any) {
			if pod, ok := informer.ObjectOf(obj); ok {
				e.enqueuePod(pod, nil)
			}
		},
	})
	e.services.AddEventHandler(informer.Handler{OnDelete: func(obj any) {
		if o, ok := informer.ObjectOf(obj); ok {
			e.mu.Lock()
			delete(e.lastTrigger, o.Key())
			e.mu.Unlock()
		}
	}})
	return e, nil
}

// enqueuePod queues, after the batch period, every Service selecting the
// pod now or (on an update) before: a relabelled pod leaves the old
// Service and joins the new one. Keys already waiting keep their earlier
// due time, so the changes of one period make one write.
func (e *endpointsController) enqueuePod(pod, old *kplanev1.Object) {
	keys := map[string]bool{}
	for _, o := range []*kplanev1.Object{pod, old} {
		if o == nil {
			continue
		}
		p := o.GetPod()
		svcs, err := e.services.Store().ByIndex(informer.NamespaceIndex, p.GetMetadata().GetNamespace())
		if err != nil {
			continue // every store has the namespace index
		}
		for _, s := range svcs {
			if Selects(s.GetService(), p) {
				keys[s.Key()] = true
			}
		}
	}
	for k := range keys {
		e.ctx.EnqueueAfter(k, e.batchPeriod)
	}
}

// Reconcile implements app.Reconciler.
func (e *endpointsController) Reconcile(ctx context.Context, key string) error {
	if k, ok := strings.CutPrefix(key, endpointsKeyPrefix); ok {
		e.ctx.EnqueueAfter(k, e.batchPeriod)
		return nil
	}
	namespace, name := kplanev1.SplitKey(key)
	if namespace == "" || name == "" {
		e.log.Error("dropping key", "key", key)
		return nil
	}
	cur, haveCur := e.endpoints.Store().GetByName(namespace, name)
	svcObj, ok := e.services.Store().GetByName(namespace, name)
	if !ok {
		return e.deleteLeftover(ctx, cur, haveCur)
	}
	svc := svcObj.GetService()
	if !Managed(svc) || svc.GetMetadata().GetDeletionTimestamp() != nil {
		return nil // the user's Endpoints, or going away with its Service
	}
	objs := e.pods.Store().ListBySelector(namespace, selectorOf(svc))
	pods := make([]*kplanev1.Pod, len(objs))
	for i, o := range objs {
		pods[i] = o.GetPod()
	}
	now := e.now()
	want := Desired(svc, pods, now)
	if !haveCur {
		err := e.create(ctx, svc, pods, want, now)
		if !client.IsAlreadyExists(err) {
			return err
		}
		// The cache lags our own create (or a user made one meanwhile):
		// decide on the stored one.
		resp, gerr := e.api.Get(ctx, &kplanev1.GetRequest{Kind: kindEndpoints, Namespace: namespace, Name: name})
		if gerr != nil {
			return fmt.Errorf("read endpoints %s after AlreadyExists: %w", key, gerr)
		}
		cur = resp.GetObject()
	}
	if !NeedsUpdate(cur.GetEndpoints(), want) {
		return nil
	}
	_, wrote, err := controller.Update(ctx, e.api, cur.GetEndpoints(), func(fresh *kplanev1.Endpoints) *kplanev1.Endpoints {
		if !NeedsUpdate(fresh, want) {
			return nil
		}
		return Apply(fresh, want)
	})
	if err != nil {
		return fmt.Errorf("update endpoints %s: %w", key, err)
	}
	if wrote {
		e.updates.Add(1)
		e.observe(key, svc, pods, e.now())
		e.log.Debug("updated endpoints", "service", key, "subsets", len(want.GetSubsets()))
	}
	return nil
}

func (e *endpointsController) create(ctx context.Context, svc *kplanev1.Service, pods []*kplanev1.Pod, want *kplanev1.Endpoints, now time.Time) error {
	key := svc.GetMetadata().GetNamespace() + "/" + svc.GetMetadata().GetName()
	_, err := e.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(want)})
	if err != nil {
		return fmt.Errorf("create endpoints %s: %w", key, err)
	}
	e.creates.Add(1)
	e.observe(key, svc, pods, now)
	e.log.Debug("created endpoints", "service", key, "subsets", len(want.GetSubsets()))
	return nil
}

// deleteLeftover deletes the Endpoints of a Service that is gone, when
// endpointsctl wrote them (a user's Endpoints without a Service stay).
func (e *endpointsController) deleteLeftover(ctx context.Context, cur *kplanev1.Object, have bool) error {
	if !have {
		return nil
	}
	if _, ours := cur.Meta().GetAnnotations()[AnnotationLastChangeTriggerTime]; !ours {
		return nil
	}
	_, deleted, err := controller.DeleteIfSameUID(ctx, e.api, cur, client.DeleteOptions{})
	if err != nil {
		return fmt.Errorf("delete endpoints %s: %w", cur.Key(), err)
	}
	if deleted {
		e.deletes.Add(1)
		e.log.Debug("deleted endpoints", "service", cur.Key())
	}
	return nil
}

// observe records, for the latency histogram, the readiness changes this
// write reflects that no earlier write of the key did: a pod's Ready
// lastTransitionTime not seen before. The API keeps whole seconds (as
// Kubernetes does), so a latency reads up to a second high. Changes from
// before the process started are not counted: their latency would be the
// downtime, not the controller's.
func (e *endpointsController) observe(key string, svc *kplanev1.Service, pods []*kplanev1.Pod, wrote time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := e.lastTrigger[key]
	floor := e.started.Truncate(time.Second)
	now := ReadyTransitions(svc, pods)
	for uid, t := range now {
		if prev, ok := seen[uid]; (ok && prev.Equal(t)) || t.Before(floor) {
			continue
		}
		e.latency.Observe(max(wrote.Sub(t), 0).Seconds())
	}
	e.lastTrigger[key] = now
}

// selectorOf is the Service's selector as a store Matcher.
func selectorOf(svc *kplanev1.Service) informer.Matcher {
	return labels.SelectorFromSet(svc.GetSpec().GetSelector())
}
