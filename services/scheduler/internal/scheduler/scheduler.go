// Package scheduler is kplane's scheduler service: it watches pods and
// nodes, places each pod that waits for a node on the best node that fits
// (see package core for the rules), and binds it by writing spec.nodeName
// with a compare-and-swap update.
//
// The loop follows kube-scheduler's shape. One goroutine takes pods from a
// queue and decides, one at a time, against the cache; a decision assumes
// the pod on its node at once, so the next decision already sees the room
// as taken, and the binding is written by a pool of binders, so decisions
// never wait on etcd. A pod that fits nowhere gets PodScheduled=False with
// the reasons, a FailedScheduling event, and waits until the cluster
// changes (a node added or changed, a pod gone) to be tried again, no
// sooner than its back-off (1s doubling to 10s) allows.
package scheduler

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/intern"
	"github.com/kplane/kplane/pkg/record"
	"github.com/kplane/kplane/pkg/workqueue"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// Name is the service name, and so the lease kplane-system/scheduler.
const Name = "scheduler"

// Config holds the scheduler's tunables; each is a flag.
type Config struct {
	// BindWorkers is how many bindings are written concurrently.
	BindWorkers int
	// EventWorkers is how many goroutines write Events.
	EventWorkers int
	// EventQPS and EventBurst bound the rate of Event writes, so that a
	// burst of thousands of pods spends the apiserver's writes on
	// bindings; Events beyond it are dropped (and counted), as Kubernetes
	// drops events under pressure.
	EventQPS   float64
	EventBurst int
	// AssumeTTL is how long a written binding may take to show up in the
	// watch before the cache stops counting it.
	AssumeTTL time.Duration
	// InitialBackoff and MaxBackoff bound a pod's retry back-off, which
	// doubles with every failed attempt.
	InitialBackoff, MaxBackoff time.Duration
	// UnschedulableRetry is how long an unschedulable pod waits for a
	// cluster change before it is tried again anyway.
	UnschedulableRetry time.Duration
	// ConfigFile is a KubeSchedulerConfiguration file (--config): the
	// profiles and their plugins. Empty: one profile, default-scheduler,
	// with the default plugins.
	ConfigFile string
	// Registry holds plugins built into this binary besides the in-tree
	// ones (app.WithPlugin).
	Registry framework.Registry
}

// DefaultConfig returns the defaults of the flags.
func DefaultConfig() Config {
	return Config{
		BindWorkers:        128,
		EventWorkers:       4,
		EventQPS:           50,
		EventBurst:         200,
		AssumeTTL:          core.DefaultAssumeTTL,
		InitialBackoff:     time.Second,
		MaxBackoff:         10 * time.Second,
		UnschedulableRetry: time.Minute,
	}
}

func (c *Config) addFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.BindWorkers, "bind-workers", c.BindWorkers, "number of bindings written concurrently")
	fs.IntVar(&c.EventWorkers, "event-workers", c.EventWorkers, "number of concurrent Event writers")
	fs.Float64Var(&c.EventQPS, "event-qps", c.EventQPS, "Events written per second at most (beyond the burst, extra Events are dropped)")
	fs.IntVar(&c.EventBurst, "event-burst", c.EventBurst, "Events that may be written at once above --event-qps")
	fs.DurationVar(&c.AssumeTTL, "assume-ttl", c.AssumeTTL, "how long a written binding may take to appear in the watch before the scheduler stops counting it")
	fs.DurationVar(&c.InitialBackoff, "pod-initial-backoff", c.InitialBackoff, "back-off after a pod's first failed attempt; doubles with each failure")
	fs.DurationVar(&c.MaxBackoff, "pod-max-backoff", c.MaxBackoff, "longest back-off between a pod's attempts")
	fs.DurationVar(&c.UnschedulableRetry, "unschedulable-retry-interval", c.UnschedulableRetry, "how long an unschedulable pod waits for a cluster change before it is retried anyway")
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1): profiles by schedulerName, their plugins and weights; empty: the default profile")
}

func (c *Config) validate() error {
	switch {
	case c.BindWorkers < 1:
		return fmt.Errorf("--bind-workers must be at least 1, not %d", c.BindWorkers)
	case c.EventWorkers < 1:
		return fmt.Errorf("--event-workers must be at least 1, not %d", c.EventWorkers)
	case c.EventQPS <= 0 || c.EventBurst < 1:
		return fmt.Errorf("--event-qps must be positive and --event-burst at least 1")
	case c.InitialBackoff <= 0 || c.MaxBackoff < c.InitialBackoff:
		return fmt.Errorf("want 0 < --pod-initial-backoff (%v) <= --pod-max-backoff (%v)", c.InitialBackoff, c.MaxBackoff)
	case c.AssumeTTL <= 0 || c.UnschedulableRetry <= 0:
		return errors.New("--assume-ttl and --unschedulable-retry-interval must be positive")
	}
	return nil
}

// NewService returns the scheduler as an app.Service: leader-elected, its
// work done by Run while leading. Every call makes an independent
// scheduler, so tests and benchmarks can run several in one process.
// registry adds out-of-tree plugins (nil: none).
func NewService(registry framework.Registry) app.Service {
	cfg := DefaultConfig()
	cfg.Registry = registry
	s := &Scheduler{cfg: &cfg}
	return app.Service{
		Name:          Name,
		HealthAddr:    ":10251",
		LeaderElected: true,
		AddFlags:      cfg.addFlags,
		Setup:         s.setup,
		Run:           s.run,
	}
}

// Scheduler is one scheduler process's state.
type Scheduler struct {
	cfg   *Config
	log   hclog.Logger
	api   kplanev1.ResourcesClient
	pods  *informer.Informer
	cache *core.Cache
	rec   *record.Recorder
	// eventLimit paces Event writes (see Config.EventQPS).
	eventLimit *rate.Limiter
	m          *metrics
	qmp        workqueue.MetricsProvider
	now        func() time.Time

	mu sync.Mutex
	// pending are the pods waiting for a node, by key. It is kept up to
	// date by the informer handlers whether or not this replica leads.
	pending map[string]*pendingPod
	// moves counts the cluster changes that retried unschedulable pods; an
	// attempt that saw an older count retries at once instead of parking
	// (the change happened while it was deciding).
	moves uint64
	// t is the current leadership term's machinery (nil while standing by).
	t *term
	// statusWant holds the PodScheduled condition to write per pod key.
	statusWant map[string]statusWant
	// profiles are the frameworks by schedulerName.
	profiles map[string]*framework.Framework
	// handle is what plugins get.
	handle *handle
}

// pendingPod is a pod waiting for a node.
type pendingPod struct {
	uid string
	// pod is its latest version seen (the queue orders by its priority).
	pod         *kplanev1.Pod
	firstSeen   time.Time
	attempts    int
	lastAttempt time.Time
	// unschedulable: it fit no node and waits for a cluster change.
	unschedulable bool
}

// term is what runs while this replica leads.
type term struct {
	// ctx ends with the term; bg are the goroutines plugins started on
	// it (Handle.Go), waited for before the term ends.
	ctx    context.Context
	bg     sync.WaitGroup
	queue  *schedulingQueue // pod keys to schedule
	status *workqueue.Queue // pod keys whose PodScheduled condition to write
	binds  chan bindTask
	events chan eventTask
}

type bindTask struct {
	obj   *kplanev1.Object
	info  *core.PodInfo
	node  string
	fwk   *framework.Framework
	state *framework.CycleState
	// nominated is the node the pod was nominated to when it was decided
	// ("" for none): bound elsewhere, the nomination is cleared.
	nominated string
}

type eventTask struct {
	obj                  *kplanev1.Object
	typ, reason, message string
}

type statusWant struct {
	uid       string
	scheduled bool
	message   string
	// nominated is the node preemption made room on, to set ("" for no
	// change).
	nominated string
	// clearNominated clears status.nominatedNodeName: preemption no
	// longer helps, or a more important pod took the room. With scheduled
	// it is cleared only when it names another node than boundTo.
	clearNominated bool
	boundTo        string
	// nominationOnly leaves PodScheduled alone.
	nominationOnly bool
}

// merge returns the wish w, written after old was not yet: a wish about
// the nomination only keeps old's PodScheduled; a clear is not lost to a
// later wish that sets no nomination.
func (w statusWant) merge(old statusWant, ok bool) statusWant {
	if !ok || old.uid != w.uid {
		return w
	}
	if w.nominationOnly {
		old.nominated, old.clearNominated = w.nominated, w.clearNominated
		return old
	}
	if w.nominated == "" && old.clearNominated && !w.clearNominated {
		w.clearNominated = true
	}
	return w
}

// setup runs before the informers start: it builds the cache and hooks
// the pod and node informers to it.
func (s *Scheduler) setup(c *app.Context) (app.Reconciler, error) {
	if err := s.cfg.validate(); err != nil {
		return nil, err
	}
	s.log = c.Logger
	s.api = c.Client
	s.now = time.Now
	s.pending = map[string]*pendingPod{}
	s.statusWant = map[string]statusWant{}
	s.cache = core.NewCache(s.cfg.AssumeTTL, nil, uint64(time.Now().UnixNano()))
	host := c.Identity
	if host == "" {
		host, _ = os.Hostname()
	}
	s.rec = record.New(c.Client, Name, host, c.Logger)
	s.eventLimit = rate.NewLimiter(rate.Limit(s.cfg.EventQPS), s.cfg.EventBurst)
	var err error
	if s.m, err = newMetrics(c.Registry, s); err != nil {
		return nil, err
	}
	if s.qmp, err = workqueue.NewPrometheusProvider(c.Registry); err != nil {
		return nil, fmt.Errorf("scheduler: queue metrics: %w", err)
	}
	// Every pod, not only unscheduled ones: the cache must count what is
	// already assigned to each node. Assigned pods are cached trimmed.
	s.pods = c.Informers.ForKind("Pod")
	if err := s.pods.SetTransform(trimAssignedPod); err != nil {
		return nil, fmt.Errorf("scheduler: pod informer: %w", err)
	}
	s.pods.AddEventHandler(informer.Handler{OnAdd: s.onPodAdd, OnUpdate: s.onPodUpdate, OnDelete: s.onPodDelete})
	c.Informers.ForKind("Node").AddEventHandler(informer.Handler{OnAdd: s.onNodeAdd, OnUpdate: s.onNodeUpdate, OnDelete: s.onNodeDelete})
	s.setupVolumes(c)
	if err := s.setupProfiles(c); err != nil {
		return nil, err
	}
	return nil, nil
}

// trimAssignedPod is the pod informer's transform. A pod assigned to a
// node (spec.nodeName set) is only ever read by the scheduler, never
// written from its cached copy, and at 100,000 pods the full objects are
// most of the scheduler's memory; so it keeps only what the cache and the
// plugins read of a pod that is already on a node:
//
//   - metadata.name, namespace, uid, resourceVersion: the pod's identity
//     (cache keys, the informer's ordering, preemption's delete
//     precondition, Events about a victim);
//   - metadata.labels: InterPodAffinity, PodTopologySpread (and the
//     cache's SpreadCounts), PodDisruptionBudget selectors in preemption;
//   - metadata.ownerReferences, the controller's only: SelectorSpread
//     counts pods per owner uid;
//   - metadata.creationTimestamp: preemption evicts the newest first
//     among victims of equal priority;
//   - metadata.deletionTimestamp: spreading and affinity counts skip
//     pods being deleted, preemption waits for terminating victims;
//   - spec.nodeName: where the pod is;
//   - spec.priority: preemption's victims and their rank;
//   - spec.containers[] and initContainers[]: name and resources.requests
//     (NodeResourcesFit, BalancedAllocation), and the containers' ports
//     that take a hostPort (NodePorts: hostPort and protocol);
//   - spec.affinity.podAffinity and podAntiAffinity: the existing pods'
//     terms InterPodAffinity honours (node affinity, node selector,
//     tolerations, spread constraints and volumes are read only of the
//     pod being scheduled);
//   - status.phase, of a finished pod only (Succeeded, Failed): it frees
//     its node; whether an unfinished pod is Pending or Running, nothing
//     the scheduler decides about other pods depends on.
//
// Everything else goes: annotations, managedFields, finalizers, the
// containers' images, commands, env, probes and mounts, volumes, status
// conditions, container statuses, IPs, QoS class. A pending pod stays
// whole: the scheduler binds it with a full Update of its cached copy
// and writes its status. A write about an assigned pod must start from
// a fresh read, never from the cache (see writeStatus and preemption's
// evict).
func trimAssignedPod(o *kplanev1.Object) *kplanev1.Object {
	p := o.GetPod()
	if p.GetSpec().GetNodeName() == "" {
		return o
	}
	md, spec := p.GetMetadata(), p.GetSpec()
	// What many pods share (namespace, labels, owner, node, requests,
	// phase) is interned: one copy for a set's 100,000 pods.
	meta := &kplanev1.ObjectMeta{
		Name: md.GetName(), Namespace: intern.String(md.GetNamespace()), Uid: md.GetUid(), ResourceVersion: md.GetResourceVersion(),
		CreationTimestamp: md.GetCreationTimestamp(), DeletionTimestamp: md.GetDeletionTimestamp(), Labels: intern.Map(md.GetLabels()),
	}
	for _, ref := range md.GetOwnerReferences() {
		if ref.GetController() {
			meta.OwnerReferences = controllerRefs.Get(ref.GetUid(), func() []*kplanev1.OwnerReference {
				return []*kplanev1.OwnerReference{{Uid: intern.String(ref.GetUid()), Controller: true}}
			})
			break
		}
	}
	kept := &kplanev1.PodSpec{NodeName: intern.String(spec.GetNodeName()), Priority: spec.GetPriority(),
		Containers: trimContainers(spec.GetContainers()), InitContainers: trimContainers(spec.GetInitContainers())}
	if a := spec.GetAffinity(); a.GetPodAffinity() != nil || a.GetPodAntiAffinity() != nil {
		kept.Affinity = &kplanev1.Affinity{PodAffinity: a.GetPodAffinity(), PodAntiAffinity: a.GetPodAntiAffinity()}
	}
	trimmed := &kplanev1.Pod{Metadata: meta, Spec: kept}
	if core.Terminal(p) {
		trimmed.Status = &kplanev1.PodStatus{Phase: intern.String(p.GetStatus().GetPhase())}
	}
	return kplanev1.MustWrap(trimmed)
}

// controllerRefs shares the one-entry owner list the trim keeps among
// the pods of one controller (the pods of a set point at one slice).
var controllerRefs intern.Table[string, []*kplanev1.OwnerReference]

// trimContainers keeps of each container what trimAssignedPod says.
func trimContainers(cs []*kplanev1.Container) []*kplanev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*kplanev1.Container, len(cs))
	for i, c := range cs {
		k := &kplanev1.Container{Name: intern.String(c.GetName())}
		if req := c.GetResources().GetRequests(); len(req) > 0 {
			k.Resources = &kplanev1.ResourceRequirements{Requests: intern.Map(req)}
		}
		for _, port := range c.GetPorts() {
			if port.GetHostPort() > 0 {
				k.Ports = append(k.Ports, &kplanev1.ContainerPort{HostPort: port.GetHostPort(), Protocol: port.GetProtocol()})
			}
		}
		out[i] = k
	}
	return out
}

// ---- informer handlers (they run whether or not this replica leads) ----

func (s *Scheduler) onPodAdd(obj *kplanev1.Object) {
	pod := obj.GetPod()
	if pod.GetSpec().GetNodeName() != "" {
		s.cache.SyncPod(pod)
		s.donePending(obj.Key(), pod.GetMetadata().GetUid())
		return
	}
	if s.needsScheduling(pod) {
		if pod.GetStatus().GetNominatedNodeName() != "" {
			s.syncNomination(pod)
		}
		s.addPending(obj.Key(), pod, false)
	}
}

// syncNomination takes a pending pod's status.nominatedNodeName into the
// cache (as Kubernetes' nominator does from its informer): after a
// restart or a change of leader, the room preemption made is still kept
// for the pod; a cleared one is given up.
func (s *Scheduler) syncNomination(pod *kplanev1.Pod) {
	nn := pod.GetStatus().GetNominatedNodeName()
	if nn == "" {
		s.cache.Unnominate(pod.GetMetadata().GetUid())
		return
	}
	info, err := core.NewPodInfo(pod)
	if err != nil {
		return // it cannot be scheduled either; its attempt reports why
	}
	s.cache.Nominate(info, nn)
}

func (s *Scheduler) onPodUpdate(oldObj, newObj *kplanev1.Object) {
	pod, old := newObj.GetPod(), oldObj.GetPod()
	key, uid := newObj.Key(), pod.GetMetadata().GetUid()
	switch {
	case pod.GetSpec().GetNodeName() != "":
		if s.cache.SyncPod(pod) {
			s.moveAll("pod finished")
		}
		if old.GetSpec().GetNodeName() == "" {
			s.donePending(key, uid)
		}
	case s.needsScheduling(pod):
		if nn := pod.GetStatus().GetNominatedNodeName(); nn != old.GetStatus().GetNominatedNodeName() {
			s.syncNomination(pod)
		}
		// A changed spec (tolerations, say) or labels may fit now.
		changed := oldObj != newObj && (old.GetMetadata().GetGeneration() != pod.GetMetadata().GetGeneration() ||
			!proto.Equal(old.GetSpec(), pod.GetSpec()))
		s.addPending(key, pod, changed)
	default:
		s.donePending(key, uid) // being deleted, finished, or not ours
	}
}

func (s *Scheduler) onPodDelete(obj any) {
	o, ok := informer.ObjectOf(obj)
	if !ok {
		return
	}
	pod := o.GetPod()
	freed := s.cache.RemovePod(pod)
	s.donePending(o.Key(), pod.GetMetadata().GetUid())
	if freed {
		s.moveAll("pod deleted")
	}
}

func (s *Scheduler) onNodeAdd(obj *kplanev1.Object) {
	s.cache.SetNode(obj.GetNode())
	s.log.Debug("node added", "node", obj.Key())
	s.moveAll("node added")
}

func (s *Scheduler) onNodeUpdate(_, newObj *kplanev1.Object) {
	if s.cache.SetNode(newObj.GetNode()) {
		s.moveAll("node changed")
	}
}

func (s *Scheduler) onNodeDelete(obj any) {
	if o, ok := informer.ObjectOf(obj); ok {
		s.cache.RemoveNode(o.GetNode().GetMetadata().GetName())
		s.log.Debug("node removed", "node", o.Key())
	}
}

// ---- pending pods ----

// addPending records a pod that waits for a node and queues it, unless it
// waits for a cluster change (then retry says whether its own change is
// one).
func (s *Scheduler) addPending(key string, pod *kplanev1.Pod, retry bool) {
	uid := pod.GetMetadata().GetUid()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[key]
	if p == nil || p.uid != uid {
		p = &pendingPod{uid: uid, firstSeen: s.now()}
		s.pending[key] = p
	}
	p.pod = pod
	if s.t == nil {
		return
	}
	if p.unschedulable {
		if !retry {
			return
		}
		p.unschedulable = false
		s.t.queue.AddAfter(key, p.queued(), s.backoffLeftLocked(p))
		return
	}
	s.t.queue.Add(key, p.queued())
}

// donePending forgets a pod that no longer waits (bound, deleted, not
// ours) and returns what was known about it (nil if nothing).
func (s *Scheduler) donePending(key, uid string) *pendingPod {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[key]
	if p == nil || p.uid != uid {
		return nil
	}
	delete(s.pending, key)
	return p
}

// moveAll retries every unschedulable pod, each after what remains of its
// back-off: the cluster changed in a way that may make it fit.
func (s *Scheduler) moveAll(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moves++
	if s.t == nil {
		return
	}
	n := 0
	for key, p := range s.pending {
		if p.unschedulable {
			p.unschedulable = false
			s.t.queue.AddAfter(key, p.queued(), s.backoffLeftLocked(p))
			n++
		}
	}
	if n > 0 {
		s.log.Debug("retrying unschedulable pods", "reason", reason, "pods", n)
	}
}

// backoffLeftLocked is how long p must still wait since its last attempt:
// InitialBackoff doubled per failed attempt after the first, at most
// MaxBackoff.
func (s *Scheduler) backoffLeftLocked(p *pendingPod) time.Duration {
	if p.attempts == 0 {
		return 0
	}
	b := client.Backoff{Duration: s.cfg.InitialBackoff, Factor: 2, Cap: s.cfg.MaxBackoff}
	return p.lastAttempt.Add(b.Delay(p.attempts - 1)).Sub(s.now())
}

// pendingCounts returns the number of active and unschedulable pending pods.
func (s *Scheduler) pendingCounts() (active, unschedulable int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pending {
		if p.unschedulable {
			unschedulable++
		} else {
			active++
		}
	}
	return active, unschedulable
}

// queued is what the QueueSort plugin compares.
func (p *pendingPod) queued() *framework.QueuedPodInfo {
	return &framework.QueuedPodInfo{Pod: p.pod, Timestamp: p.firstSeen, Attempts: p.attempts}
}

// queueLess is the QueueSort plugin's order (all profiles share one), or
// first come first served when no profile enables one.
func (s *Scheduler) queueLess() func(a, b *framework.QueuedPodInfo) bool {
	for _, f := range s.profiles {
		if qs := f.QueueSort(); qs != nil {
			return qs.Less
		}
	}
	return func(a, b *framework.QueuedPodInfo) bool { return a.Timestamp.Before(b.Timestamp) }
}
