// Package agent is the node agent (kplane's kubelet): it registers its
// Node, renews the node Lease, runs the pods bound to it with the exec or
// fake runtime, reports their status, carries out graceful deletion and
// serves container logs.
//
// Restart behaviour: on SIGTERM the agent stops (heartbeats, status
// writes, logs server) but leaves every container running, like a kubelet
// restart. Containers run under a shim that records their exit status on
// disk, so the next agent started on the same --root-dir re-adopts running
// containers, learns the exit codes of those that ended meanwhile, kills
// containers of pods that were deleted while it was down, and reports
// correct statuses; no container is started twice.
package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/intern"
	"github.com/kplane/kplane/pkg/quantity"
	"github.com/kplane/kplane/pkg/record"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/nodeagent/internal/cloudroutes"
)

// Name of the service (binary, logs, events).
const Name = "nodeagent"

// errNoPodCIDR: the pod's node has no pod CIDR yet; the pod waits.
var errNoPodCIDR = errors.New("the node has no pod CIDR yet")

// NewService returns the node agent's app.Service. Each call has its own
// configuration, so tests can run several agents in one process.
func NewService() app.Service {
	cfg := &Config{}
	var a *Agent
	return app.Service{
		Name:       Name,
		HealthAddr: ":10248",
		// Status writes are round trips to the apiserver; a pod's start is
		// one write, so the worker count bounds how fast a burst of bound
		// pods turns Running: at most Workers / round trip per second. One
		// process may play 1,000 fake nodes (1,000 kubelets would write
		// 1,000 statuses at once); with 32, a loaded apiserver's 200 ms
		// round trips held 10,000 bound pods to 480/s, p99 5.9 s from
		// create to Running, against 556/s (as fast as they were created)
		// and p99 1.7 s with 128 (BenchmarkAgentScale). Idle workers cost
		// a parked goroutine each.
		Workers:  128,
		AddFlags: cfg.AddFlags,
		Setup: func(c *app.Context) (app.Reconciler, error) {
			var err error
			a, err = New(c, cfg)
			return a, err
		},
		Run: func(ctx context.Context, _ *app.Context) error { return a.Run(ctx) },
	}
}

// Agent runs the pods of its node(s).
type Agent struct {
	nodeInf *informer.Informer // this agent's Nodes; their pod CIDRs open ranges
	rangeMu sync.Mutex         // one nodeSeen at a time: opening a range is not idempotent
	cfg     *Config
	log     hclog.Logger
	c       *app.Context
	api     *client.Client
	pods    *informer.Informer
	rt      Runtime
	exec    *execRuntime // nil with the fake runtime
	rec     *record.Recorder
	m       *metrics
	backoff Backoff
	nodes   map[string]bool
	hostIP  string
	nodeRes nodeResources // stand in for limits containers do not set
	stats   StatsSource   // pressure.go
	press   pressure
	// capacity and allocatable reported on the Node(s).
	capacity, allocatable map[string]string

	logsPort int // set by Run before nodes register

	// Pod networks, one per node, opened once the Node's podCIDR is known.
	netMu          sync.Mutex
	ranges         map[string]*nodeRange
	netReady       chan struct{} // a range opened: heartbeat now
	overrideWarned atomic.Bool
	// tokensOff: the apiserver issues no tokens (token.go).
	tokensOff atomic.Bool

	mu      sync.Mutex
	adm     admission                // admit.go
	states  map[string]*podState     // by pod uid
	byKey   map[string][]string      // pod key -> uids the runtime holds (nearly always one)
	written map[string]*kplanev1.Pod // by uid: the pod our last status write returned
}

// podState is the agent's in-memory bookkeeping of one pod. Only the
// reconcile of the pod's key touches it (keys are never reconciled
// concurrently).
type podState struct {
	startTime    time.Time
	probes       map[string]*probeState // by probe kind + "/" + container
	kills        map[string]*killState  // by container
	probeEvents  *rate.Limiter
	createErr    map[string]createFailure
	resolved     map[string]*kplanev1.Container // by name: the spec its current run started with
	backoffSeen  map[string]int                 // attempt whose BackOff event was recorded
	termStart    time.Time
	termSignaled bool
	// sidecarsSignaled: on deletion, the sidecars were sent SIGTERM (after
	// the other containers had stopped).
	sidecarsSignaled bool
	killed           bool
	volumesReady     bool // volumes.go: set up for this run of the agent
	// initialized: the init containers are through and the app containers
	// were started; it stays so.
	initialized bool
	// token is the pod's ServiceAccount token file (token.go).
	token *podToken
}

// New builds the agent: the runtime (re-adopting what a previous agent
// left in --root-dir), the pod informer and its handlers.
func New(c *app.Context, cfg *Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, log: c.Logger, c: c, api: c.Client, hostIP: cfg.NodeIP,
		backoff: Backoff{Base: cfg.BackoffBase, Max: cfg.BackoffMax, ResetAfter: 2 * cfg.BackoffMax},
		nodes:   map[string]bool{},
		ranges:  map[string]*nodeRange{},
		states:  map[string]*podState{}, byKey: map[string][]string{}, written: map[string]*kplanev1.Pod{},
		adm:      admission{admitted: map[string]string{}, byNode: map[string]map[string]string{}},
		netReady: make(chan struct{}, 1),
	}
	for _, n := range cfg.nodeNames() {
		a.nodes[n] = true
	}
	var err error
	if a.nodeRes.cpu, err = quantity.Parse(cfg.CPU); err != nil {
		return nil, fmt.Errorf("--cpu: %w", err)
	}
	if a.nodeRes.memory, err = quantity.Parse(cfg.Memory); err != nil {
		return nil, fmt.Errorf("--memory: %w", err)
	}
	if a.m, err = newMetrics(c.Registry); err != nil {
		return nil, err
	}
	a.rec = record.New(c.Client, Name, cfg.NodeName, c.Logger)
	switch cfg.Runtime {
	case "fake":
		a.rt = newFakeRuntime()
	default:
		shimBin := cfg.ShimBinary
		if shimBin == "" {
			if shimBin, err = os.Executable(); err != nil {
				return nil, fmt.Errorf("locate own binary for the shim: %w", err)
			}
		}
		if a.exec, err = newExecRuntime(cfg.RootDir, shimBin, c.Logger.Named("exec"), c.Enqueue); err != nil {
			return nil, err
		}
		a.rt = a.exec
	}
	for _, rp := range a.rt.Pods() {
		a.track(rp.Key(), rp.UID)
		a.mu.Lock()
		a.admitLocked(rp.UID, rp.Node, rp.Key()) // it ran here before the restart
		a.mu.Unlock()
	}
	a.press.crossed, a.press.lastCrossed, a.press.evicted = map[string]string{}, map[string]time.Time{}, map[string]bool{}
	a.stats = newStatsSource(a)
	if err := a.nodeResources(); err != nil {
		return nil, err
	}

	// One informer: with one node, only its pods (field selector); with
	// fake nodes, every bound pod, filtered here, rather than one watch
	// per node.
	sel := informer.Selection{Kind: "Pod", FieldSelector: "spec.nodeName=" + cfg.NodeName}
	if cfg.FakeNodes > 0 {
		sel.FieldSelector = "spec.nodeName!="
	}
	if a.pods, err = c.Informers.For(sel); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if err := a.pods.SetTransform(a.trimPod); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	enqueue := func(o *kplanev1.Object) {
		if a.nodes[o.GetPod().GetSpec().GetNodeName()] {
			c.Enqueue(o.Key())
		}
	}
	a.pods.AddEventHandler(informer.Handler{
		OnAdd: enqueue,
		OnUpdate: func(_, o *kplanev1.Object) {
			if !a.ownWrite(o) {
				enqueue(o)
			}
		},
		OnDelete: func(obj any) {
			if o, ok := informer.ObjectOf(obj); ok {
				enqueue(o)
			}
		},
	})
	a.watchClaims(c.Informers)
	// The node's pod CIDR arrives on the Node (ipamctl writes it once).
	nodeSel := informer.Selection{Kind: "Node", FieldSelector: "metadata.name=" + cfg.NodeName}
	if cfg.FakeNodes > 0 {
		nodeSel.FieldSelector = ""
	}
	nodeInf, err := c.Informers.For(nodeSel)
	if err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	a.nodeInf = nodeInf
	nodeInf.AddEventHandler(informer.Handler{
		OnAdd:    func(o *kplanev1.Object) { a.nodeSeen(o.GetNode()) },
		OnUpdate: func(_, o *kplanev1.Object) { a.nodeSeen(o.GetNode()) },
	})
	a.log.Info("node agent configured", "nodes", len(a.nodes), "node", cfg.NodeName, "runtime", a.rt.Name(),
		"root_dir", cfg.RootDir, "pod_cidr", cfg.PodCIDR, "recovered_pods", len(a.rt.Pods()))
	return a, nil
}

// trimPod is the pod informer's transform: it drops what the agent never
// reads, since one agent may cache 100,000 pods. A pod of another node
// (fake nodes watch every bound pod) keeps only its identity and node; a
// pod of ours loses the fields only the scheduler and the controllers
// read. Status writes send the trimmed pod, which is safe: UpdateStatus
// takes only the status from it.
func (a *Agent) trimPod(o *kplanev1.Object) *kplanev1.Object {
	p := o.GetPod()
	if p == nil {
		return o
	}
	md := p.GetMetadata()
	if !a.nodes[p.GetSpec().GetNodeName()] {
		p.Metadata = &kplanev1.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid(),
			ResourceVersion: md.GetResourceVersion(), DeletionTimestamp: md.GetDeletionTimestamp()}
		p.Spec, p.Status = &kplanev1.PodSpec{NodeName: p.GetSpec().GetNodeName()}, nil
		return o
	}
	if md != nil {
		md.ManagedFields, md.OwnerReferences, md.GenerateName = nil, nil, ""
	}
	if s := p.GetSpec(); s != nil {
		s.NodeSelector, s.Tolerations, s.Affinity, s.TopologySpreadConstraints = nil, nil, nil, nil
		s.SchedulerName, s.PriorityClassName, s.PreemptionPolicy = "", "", nil
	}
	internPod(p)
	return o
}

// internPod replaces, in a pod the agent caches, what its other pods
// share (namespace, labels, node, the containers' names and images, the
// status's words) with interned copies: one copy for a node's pods or a
// set's, where decoding gives each pod its own.
func internPod(p *kplanev1.Pod) {
	if md := p.GetMetadata(); md != nil {
		md.Namespace, md.Labels, md.Annotations = intern.String(md.Namespace), intern.Map(md.Labels), intern.Map(md.Annotations)
	}
	if s := p.GetSpec(); s != nil {
		s.NodeName, s.ServiceAccountName = intern.String(s.NodeName), intern.String(s.ServiceAccountName)
		s.RestartPolicy = intern.String(s.RestartPolicy)
		for _, cs := range [][]*kplanev1.Container{s.GetInitContainers(), s.GetContainers()} {
			for _, c := range cs {
				c.Name, c.Image, c.ImagePullPolicy = intern.String(c.Name), intern.String(c.Image), intern.String(c.ImagePullPolicy)
				c.TerminationMessagePath, c.TerminationMessagePolicy = intern.String(c.TerminationMessagePath), intern.String(c.TerminationMessagePolicy)
			}
		}
	}
	if st := p.GetStatus(); st != nil {
		st.Phase, st.QosClass, st.HostIp = intern.String(st.Phase), intern.String(st.QosClass), intern.String(st.HostIp)
		for _, c := range st.GetConditions() {
			c.Type, c.Status, c.Reason = intern.String(c.Type), intern.String(c.Status), intern.String(c.Reason)
		}
		for _, cs := range [][]*kplanev1.ContainerStatus{st.GetInitContainerStatuses(), st.GetContainerStatuses()} {
			for _, c := range cs {
				c.Name, c.Image, c.ImageId = intern.String(c.Name), intern.String(c.Image), intern.String(c.ImageId)
			}
		}
	}
}

// Run serves logs, registers and heartbeats the node(s), watches the exec
// runtime's containers and reconciles runtime pods against the
// apiserver's until ctx ends. Containers keep running afterwards.
func (a *Agent) Run(ctx context.Context) error {
	srv, err := a.startLogs(ctx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer srv.stop()
	// Ranges open only once the Pod cache has synced (nodeSeen waits for
	// it): the pods' reported IPs are reserved from it. Node events seen
	// before then are taken up here.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-a.pods.Synced():
			if a.cfg.PodCIDR != "" {
				a.openOverride()
			}
			for _, o := range a.nodeInf.Store().List() {
				a.nodeSeen(o.GetNode())
			}
		case <-ctx.Done():
		}
	}()
	if a.exec != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.exec.monitor(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.housekeeping(ctx)
	}()
	if a.cfg.CloudRoutesFrom != "" {
		conn, err := grpc.NewClient(a.cfg.CloudRoutesFrom, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("--cloud-routes-from %s: %w", a.cfg.CloudRoutesFrom, err)
		}
		defer func() { _ = conn.Close() }()
		sync := &cloudroutes.Syncer{Cloud: cloudsimv1.NewCloudClient(conn), Self: a.cfg.NodeName, Interval: a.cfg.CloudRoutesEvery, Log: a.log.Named("cloudroutes")}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sync.Run(ctx)
		}()
	}
	// Ranges opened before the pod cache was filled missed the addresses
	// pods report; reserve them before any pod is synced.
	a.netMu.Lock()
	for node, r := range a.ranges {
		a.reserveReported(node, r)
	}
	a.netMu.Unlock()
	// Everything the cache and the runtime know is reconciled once; events
	// that arrived before the work queue existed were dropped.
	a.enqueueAll()
	return a.runNodes(ctx)
}

func (a *Agent) enqueueAll() {
	for _, o := range a.pods.Store().List() {
		if a.nodes[o.GetPod().GetSpec().GetNodeName()] {
			a.c.Enqueue(o.Key())
		}
	}
	for _, rp := range a.rt.Pods() {
		a.c.Enqueue(rp.Key())
	}
}

// housekeeping periodically queues runtime pods whose pod object is gone
// or replaced (the safety net behind watch events) and updates metrics.
// Every pod the runtime holds is tracked (byKey), so the walk is over the
// agent's own index: one map lookup per pod, nothing listed or allocated,
// as it runs over every pod of up to 1,000 fake nodes.
func (a *Agent) housekeeping(ctx context.Context) {
	t := time.NewTicker(a.cfg.HousekeepingEvery)
	defer t.Stop()
	for {
		for _, key := range a.strayKeys() {
			a.c.Enqueue(key)
		}
		a.m.podsRunning.Set(float64(a.rt.RunningPods()))
		a.checkEmptyDirLimits(ctx)
		a.checkPressure(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// strayKeys returns the keys of tracked pods whose pod object is gone or
// is another pod (same name, new uid).
func (a *Agent) strayKeys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for key, uids := range a.byKey {
		o, ok := a.pods.Store().Get(key)
		if !ok || len(uids) > 1 || o.Meta().GetUid() != uids[0] {
			out = append(out, key)
		}
	}
	return out
}

func (a *Agent) track(key, uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.byKey[key], uid) {
		a.byKey[key] = append(a.byKey[key], uid)
	}
}

func (a *Agent) untrack(key, uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if uids := slices.DeleteFunc(a.byKey[key], func(u string) bool { return u == uid }); len(uids) > 0 {
		a.byKey[key] = uids
	} else {
		delete(a.byKey, key)
	}
	delete(a.states, uid)
	delete(a.written, uid)
	a.forgetAdmittedLocked(uid)
}

func (a *Agent) uidsFor(key string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.byKey[key])
}

func (a *Agent) state(uid string) *podState {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.states[uid]
	if !ok {
		s = &podState{} // its maps are made on first use (put)
		a.states[uid] = s
	}
	return s
}

// put sets (*m)[k] = v, making the map on first use: most pods never
// need most of podState's maps, and at 100,000 pods empty maps add up.
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

// Reconcile implements app.Reconciler for a pod key: containers of pods
// that are gone (or were replaced by a pod of the same name) are stopped
// and cleaned up, and the current pod is synced.
func (a *Agent) Reconcile(ctx context.Context, key string) error {
	var pod *kplanev1.Pod
	if o, ok := a.pods.Store().Get(key); ok && a.nodes[o.GetPod().GetSpec().GetNodeName()] {
		pod = o.GetPod()
	}
	var retry time.Duration
	for _, uid := range a.uidsFor(key) {
		if pod != nil && uid == pod.GetMetadata().GetUid() {
			continue
		}
		done, err := a.removeOrphan(key, uid)
		if err != nil {
			return err
		}
		if !done {
			retry = monitorEvery
		}
	}
	if pod == nil {
		if retry > 0 {
			return app.RequeueAfter(retry)
		}
		return nil
	}
	next, err := a.syncPod(ctx, pod)
	if err != nil {
		return err
	}
	now := time.Now()
	if d := next.Sub(now); !next.IsZero() && (retry == 0 || d < retry) {
		retry = max(d, time.Millisecond)
	}
	if retry > 0 {
		return app.RequeueAfter(retry)
	}
	return nil
}

// removeOrphan stops the containers of a pod object that no longer exists
// (deleted outright, or while the agent was down) at once with SIGKILL,
// then frees its IP and files. It reports whether the pod is gone.
func (a *Agent) removeOrphan(key, uid string) (bool, error) {
	if _, running := a.rt.Running(uid); running {
		a.log.Info("killing containers of a pod that no longer exists", "pod", key, "uid", uid)
		if err := a.rt.Signal(uid, true); err != nil {
			return false, fmt.Errorf("kill orphaned pod %s: %w", key, err)
		}
		return false, nil
	}
	if err := a.rt.RemovePod(uid); err != nil {
		return false, fmt.Errorf("remove pod %s (%s): %w", key, uid, err)
	}
	a.releaseIP(uid)
	a.untrack(key, uid)
	a.log.Info("removed pod from runtime", "pod", key, "uid", uid)
	return true, nil
}

// ownWrite reports whether o is the very pod our last status write
// returned: the reconcile that wrote it has acted on everything in it, so
// it is not queued again (at 100,000 pods a second, idle sync per pod
// doubles the work and holds the written copy meanwhile). The written copy
// is dropped: the cache holds the same now. A write whose event arrives
// before writeStatus recorded it is queued as before, and latest drops it.
func (a *Agent) ownWrite(o *kplanev1.Object) bool {
	md := o.Meta()
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.written[md.GetUid()]
	if !ok || w.GetMetadata().GetResourceVersion() != md.GetResourceVersion() {
		return false
	}
	delete(a.written, md.GetUid())
	return true
}

// latest returns the newer of the cached pod and the one our last status
// write returned (the cache may not have seen our write yet). When the two
// cannot be compared (a resourceVersion that is not a revision) it forgets
// the written copy, so the next try goes by the cache alone, and returns
// the error.
func (a *Agent) latest(pod *kplanev1.Pod) (*kplanev1.Pod, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	uid := pod.GetMetadata().GetUid()
	w, ok := a.written[uid]
	if !ok {
		return pod, nil
	}
	wrv, werr := apiutil.ParseResourceVersion(w.GetMetadata().GetResourceVersion())
	crv, cerr := apiutil.ParseResourceVersion(pod.GetMetadata().GetResourceVersion())
	if err := errors.Join(werr, cerr); err != nil {
		delete(a.written, uid)
		return nil, fmt.Errorf("pod %s/%s: compare cached and written status: %w", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), err)
	}
	if wrv > crv {
		return w, nil
	}
	delete(a.written, uid)
	return pod, nil
}

// syncPod drives one pod toward running per its spec and writes its
// status when it changed. It returns when the pod next needs a look
// (probe, back-off end, fake-runtime timer; zero for none).
func (a *Agent) syncPod(ctx context.Context, cached *kplanev1.Pod) (time.Time, error) {
	pod, err := a.latest(cached)
	if err != nil {
		return time.Time{}, err
	}
	md := pod.GetMetadata()
	uid, key := md.GetUid(), md.GetNamespace()+"/"+md.GetName()
	if md.GetDeletionTimestamp() != nil {
		return a.terminate(ctx, pod)
	}
	if f := a.admit(pod); f != nil {
		// Refused before anything was set up for it: no address, no
		// runtime state, just the Failed status.
		if pod.GetStatus().GetReason() != f.reason {
			a.log.Info("pod refused", "pod", key, "node", pod.GetSpec().GetNodeName(), "reason", f.reason, "message", f.message)
		}
		return time.Time{}, a.writeStatus(ctx, pod, refusedStatus(pod, f))
	}
	now := time.Now()
	st := a.state(uid)
	terminal := apiutil.IsPodTerminal(pod)
	// A finished pod keeps the address its status reports but holds none
	// once its containers are stopped (the kubelet tears the sandbox down
	// then): a node running Jobs would otherwise run out of addresses.
	ip := pod.GetStatus().GetPodIp()
	if !terminal {
		addr, err := a.podIP(pod)
		if errors.Is(err, errNoPodCIDR) {
			// Queued again when the node's range opens.
			a.log.Debug("pod waits for the node's pod CIDR", "pod", key, "node", pod.GetSpec().GetNodeName())
			return time.Time{}, nil
		}
		if err != nil {
			a.event(ctx, pod, record.Warning, "FailedCreatePodSandBox", "Failed to set up the pod's network: %v", err)
			return time.Time{}, fmt.Errorf("pod IP for %s: %w", key, err)
		}
		ip = addr.String()
	}
	if err := a.rt.PreparePod(pod, ip); err != nil {
		return time.Time{}, fmt.Errorf("prepare pod %s: %w", key, err)
	}
	a.track(key, uid)
	if st.startTime.IsZero() {
		st.startTime = now
		if t := pod.GetStatus().GetStartTime(); t != nil {
			st.startTime = t.AsTime()
		}
	}

	if !terminal {
		if ok, err := a.ensureVolumes(ctx, pod, st); !ok {
			return now.Add(volumeRetry), err
		}
	}
	var next time.Time
	wake := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !terminal {
		// Containers start only once their token is in place.
		refresh, err := a.ensureToken(ctx, pod, st, now)
		if err != nil {
			a.event(ctx, pod, record.Warning, "FailedMount", "Could not get a ServiceAccount token: %v", err)
			return refresh, err
		}
		wake(refresh)
	}
	sc := &syncCtx{pod: pod, uid: uid, ip: ip, st: st, now: now, wake: wake}
	in := statusInput{Pod: pod, Runtime: a.rt.Name(), PodIP: ip, HostIP: a.hostIP, StartTime: st.startTime, Now: now}
	if !terminal {
		in.Failure = a.checkDeadline(ctx, sc)
		terminal = in.Failure != nil
	}
	var initDone bool
	in.InitContainers, initDone, in.InitFailed = a.syncInitContainers(ctx, sc, terminal)
	in.InitPending = !initDone
	terminal = terminal || in.InitFailed
	policy := pod.GetSpec().GetRestartPolicy()
	in.Containers = make([]containerInput, 0, len(pod.GetSpec().GetContainers()))
	for _, c := range pod.GetSpec().GetContainers() {
		if !initDone {
			in.Containers = append(in.Containers, containerInput{Spec: c, State: a.rt.State(uid, c.GetName(), now), Initializing: true})
			continue
		}
		in.Containers = append(in.Containers, a.syncContainer(ctx, sc, c, policy, terminal))
	}
	if terminal {
		a.stopContainers(ctx, sc, allContainers(pod.GetSpec()))
	} else if initDone && appsFinished(in.Containers, policy) {
		// The app is done: its sidecars stop, and are not restarted.
		a.stopContainers(ctx, sc, sidecars(pod.GetSpec()))
	}
	wake(a.rt.NextChange(uid, now))

	status := buildStatus(in)
	volumeStatus(pod.GetStatus(), status, st.volumesReady, now)
	if err := a.writeStatus(ctx, pod, status); err != nil {
		return time.Time{}, err
	}
	if apiutil.IsTerminalPhase(status.GetPhase()) {
		// Only once the API records the pod finished (the write above):
		// until then its address may still be in Endpoints. A container
		// still stopping queues the pod again when it exits.
		if _, running := a.rt.Running(uid); !running {
			a.releaseIP(uid)
		}
	}
	return next, nil
}

// syncCtx is what one sync of a pod passes around.
type syncCtx struct {
	pod  *kplanev1.Pod
	uid  string
	ip   string
	st   *podState
	now  time.Time
	wake func(time.Time)
}

// syncContainer drives one container under policy: started when it never
// ran, restarted after its back-off when it exited and the policy says so
// (not when hold: the pod is terminal or the container is being stopped),
// probed while running. It returns what its status depends on.
func (a *Agent) syncContainer(ctx context.Context, sc *syncCtx, c *kplanev1.Container, policy string, hold bool) containerInput {
	pod, uid, st, now, wake := sc.pod, sc.uid, sc.st, sc.now, sc.wake
	cs := a.rt.State(uid, c.GetName(), now)
	in := containerInput{Spec: c, Ready: true}
	if k := st.kills[c.GetName()]; k != nil && k.attempt == cs.Attempt && k.final {
		hold = true
	}
	if !hold {
		switch {
		case !cs.Created:
			a.start(ctx, pod, c, 0, sc.ip, st)
			cs = a.rt.State(uid, c.GetName(), now)
			if !cs.Created {
				wake(now.Add(a.backoff.Base))
			}
		case cs.Exit != nil && shouldRestart(policy, cs.Exit):
			delay := a.backoff.Delay(cs.Attempt, cs.Exit.FinishedAt.Sub(cs.Exit.StartedAt))
			at := cs.Exit.FinishedAt.Add(delay)
			if now.Before(at) {
				in.BackOff, in.BackOffDelay = true, delay
				wake(at)
				if st.backoffSeen[c.GetName()] != cs.Attempt+1 && a.rt.Name() == "exec" {
					put(&st.backoffSeen, c.GetName(), cs.Attempt+1)
					a.event(ctx, pod, record.Warning, "BackOff", "Back-off %s restarting failed container %s", delay, c.GetName())
				}
				break
			}
			a.m.containerRestarts.Inc()
			a.start(ctx, pod, c, cs.Attempt+1, sc.ip, st)
			cs = a.rt.State(uid, c.GetName(), now)
			if !cs.Running && !cs.Waiting {
				wake(now.Add(a.backoff.Base)) // the start failed: retry
			}
		}
	}
	in.State = cs
	if f, ok := st.createErr[c.GetName()]; ok {
		in.CreateReason, in.CreateError = f.reason, f.message
	}
	if cs.Running && !hold {
		pr := a.probeContainer(ctx, pod, c, cs, sc.ip, st, now, wake)
		in.Ready, in.NotStarted = pr.ready, !pr.started
	} else if cs.Running {
		a.finishStop(sc, c, cs)
		in.Ready = false
	}
	return in
}

// createFailure is why the last start of a container failed before any
// process ran.
type createFailure struct{ reason, message string }

// start starts one run of a container, its environment resolved and its
// command expanded, recording a failure to create it (shown as
// CreateContainerConfigError or CreateContainerError until a start
// succeeds).
func (a *Agent) start(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, attempt int, ip string, st *podState) {
	res := &envResolver{api: a.api, pod: pod, podIP: ip, hostIP: a.hostIP, node: a.nodeRes}
	spec, err := res.resolve(ctx, c)
	if len(res.invalid) > 0 {
		a.event(ctx, pod, record.Warning, "InvalidEnvironmentVariableNames",
			"Keys [%s] from the envFrom of container %s were skipped since they are not valid environment variable names",
			strings.Join(res.invalid, ", "), c.GetName())
	}
	if err == nil && st.token != nil {
		spec.Env = append(spec.Env, &kplanev1.EnvVar{Name: TokenFileEnv, Value: st.token.path})
	}
	if err == nil {
		if a.exec != nil { // only hooks and exec probes read it; fake pods have neither
			put(&st.resolved, c.GetName(), spec)
		}
		err = a.rt.StartContainer(ctx, pod, spec, attempt, ip)
	}
	if err != nil {
		f := createFailure{reason: ReasonCreateError, message: err.Error()}
		if isConfigError(err) {
			f.reason = ReasonCreateConfigError
		}
		if st.createErr[c.GetName()] != f {
			a.log.Warn("could not start container", "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName(),
				"container", c.GetName(), "reason", f.reason, "error", err)
			a.event(ctx, pod, record.Warning, "Failed", "Error: %v", err)
		}
		put(&st.createErr, c.GetName(), f)
		return
	}
	delete(st.createErr, c.GetName())
	a.m.containerStarts.Inc()
	if a.rt.Name() == "exec" {
		a.event(ctx, pod, record.Normal, "Started", "Started container %s", c.GetName())
	}
	a.postStart(ctx, pod, spec, ip, st)
}

// Probe events are rate-limited per pod as the kubelet's event spam
// filter does: a burst, then one per interval, on top of the recorder
// folding identical repeats into one Event.
const (
	probeEventBurst = 25
	probeEventEvery = 5 * time.Minute
)

// killState is a container being stopped because a probe failed.
type killState struct {
	attempt  int
	deadline time.Time // SIGKILL then
	killed   bool
	// final: stopped for good (the pod is over, or a sidecar whose app
	// finished), not restarted.
	final bool
}

// probeResult is what the probes of a running container decided.
type probeResult struct {
	started bool // the startup probe succeeded (or there is none)
	ready   bool
}

// probeContainer runs the due probes of a running container: the startup
// probe first, holding back the others until it succeeds; then readiness
// and liveness. A startup or liveness probe that reaches its failure
// threshold stops the container (SIGTERM, SIGKILL after the grace
// period); the restart policy and back-off then apply to its exit. The
// next time a probe is due goes to wake.
func (a *Agent) probeContainer(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, cs ContainerState, ip string,
	st *podState, now time.Time, wake func(time.Time)) probeResult {
	res := probeResult{started: true, ready: true}
	if k := st.kills[c.GetName()]; k != nil && k.attempt == cs.Attempt {
		// Being stopped: no more probing, not ready.
		a.finishKill(pod, c, k, now, wake)
		return probeResult{started: true}
	}
	if p := c.GetStartupProbe(); p != nil {
		ps := a.runDueProbe(ctx, pod, c, cs, probeStartup, p, ip, st, now)
		if !ps.everOK {
			wake(ps.next)
			if ps.failed(p) {
				a.killUnhealthy(ctx, pod, c, cs, probeStartup, p, ip, st, now, wake)
			}
			return probeResult{}
		}
	}
	if p := c.GetReadinessProbe(); p != nil {
		ps := a.runDueProbe(ctx, pod, c, cs, probeReadiness, p, ip, st, now)
		res.ready = ps.ok
		wake(ps.next)
	}
	if p := c.GetLivenessProbe(); p != nil {
		ps := a.runDueProbe(ctx, pod, c, cs, probeLiveness, p, ip, st, now)
		wake(ps.next)
		if ps.failed(p) {
			a.killUnhealthy(ctx, pod, c, cs, probeLiveness, p, ip, st, now, wake)
			res.ready = false
		}
	}
	return res
}

// runDueProbe runs one probe when it is due and returns its state.
func (a *Agent) runDueProbe(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, cs ContainerState, kind probeKind,
	p *kplanev1.Probe, ip string, st *podState, now time.Time) *probeState {
	key := string(kind) + "/" + c.GetName()
	ps := st.probes[key]
	if ps == nil || ps.attempt != cs.Attempt {
		started := cs.StartedAt
		if started.IsZero() {
			started = now
		}
		ps = newProbeState(kind, p, cs.Attempt, started)
		put(&st.probes, key, ps)
	}
	if now.Before(ps.next) {
		return ps
	}
	var err error
	if a.exec != nil {
		err = runProbe(ctx, p, a.hookTarget(pod, c, ip, st))
	} else {
		err = fakeProbe(pod, kind)
	}
	was := ps.ok
	ps.record(p, err == nil, time.Now())
	podKey := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
	if was != ps.ok {
		a.log.Info("probe verdict changed", "pod", podKey, "container", c.GetName(), "probe", kind,
			"success", ps.ok, "probe_error", err)
	}
	if err != nil {
		a.probeEvent(ctx, pod, st, record.Warning, "Unhealthy", "%s probe failed: %v", kind, err)
	}
	return ps
}

// killUnhealthy starts stopping a container whose liveness or startup
// probe failed, with the probe's grace period if it has one, else the
// pod's.
func (a *Agent) killUnhealthy(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, cs ContainerState, kind probeKind,
	p *kplanev1.Probe, ip string, st *podState, now time.Time, wake func(time.Time)) {
	grace := int64(30)
	switch {
	case p.TerminationGracePeriodSeconds != nil:
		grace = p.GetTerminationGracePeriodSeconds()
	case pod.GetSpec().TerminationGracePeriodSeconds != nil:
		grace = pod.GetSpec().GetTerminationGracePeriodSeconds()
	}
	k := &killState{attempt: cs.Attempt, deadline: now.Add(time.Duration(grace) * time.Second)}
	put(&st.kills, c.GetName(), k)
	a.log.Info("container failed its probe; stopping it", "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName(),
		"container", c.GetName(), "probe", kind, "attempt", cs.Attempt, "grace_period", time.Duration(grace)*time.Second)
	a.probeEvent(ctx, pod, st, record.Normal, "Killing", "Container %s failed %s probe, will be restarted", c.GetName(), strings.ToLower(string(kind)))
	a.preStop(ctx, pod, c, ip, st, k.deadline)
	if err := a.rt.StopContainer(pod.GetMetadata().GetUid(), c.GetName(), grace == 0); err != nil {
		a.log.Warn("could not stop container", "container", c.GetName(), "error", err)
	}
	k.killed = grace == 0
	wake(k.deadline)
}

// finishKill sends SIGKILL to a container stopped for a failed probe that
// outlived its grace period.
func (a *Agent) finishKill(pod *kplanev1.Pod, c *kplanev1.Container, k *killState, now time.Time, wake func(time.Time)) {
	if k.killed {
		return
	}
	if now.Before(k.deadline) {
		wake(k.deadline)
		return
	}
	k.killed = true
	a.log.Info("grace period over; killing container", "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName(),
		"container", c.GetName())
	if err := a.rt.StopContainer(pod.GetMetadata().GetUid(), c.GetName(), true); err != nil {
		a.log.Warn("could not kill container", "container", c.GetName(), "error", err)
	}
}

// probeEvent records a probe event unless the pod's probe events are
// over their rate. Fake pods come by the thousand and get none, as for
// their other events.
func (a *Agent) probeEvent(ctx context.Context, pod *kplanev1.Pod, st *podState, typ, reason, format string, args ...any) {
	if a.exec == nil {
		return
	}
	if st.probeEvents == nil {
		st.probeEvents = rate.NewLimiter(rate.Every(probeEventEvery), probeEventBurst)
	}
	if !st.probeEvents.Allow() {
		return
	}
	a.event(ctx, pod, typ, reason, format, args...)
}

// writeStatus sends status when it differs from the pod's, with the
// resourceVersion it was computed from (a conflict retries the sync).
func (a *Agent) writeStatus(ctx context.Context, pod *kplanev1.Pod, status *kplanev1.PodStatus) error {
	if statusEqual(pod.GetStatus(), status) {
		return nil
	}
	next := proto.Clone(pod).(*kplanev1.Pod)
	next.Status = status
	out, err := client.For[*kplanev1.Pod](a.api).UpdateStatus(ctx, next)
	a.m.statusWrites.WithLabelValues(result(err)).Inc()
	if err != nil {
		if client.IsNotFound(err) {
			return nil // deleted meanwhile; the watch brings the news
		}
		return fmt.Errorf("update status of pod %s/%s: %w", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), err)
	}
	if old, now := pod.GetStatus().GetPhase(), status.GetPhase(); old != now {
		a.log.Info("pod phase changed", "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName(),
			"from", old, "to", now, "pod_ip", status.GetPodIp())
	}
	a.mu.Lock()
	a.written[out.GetMetadata().GetUid()] = out
	a.mu.Unlock()
	return nil
}

// terminate carries out a graceful deletion: SIGTERM, then SIGKILL after
// the grace period (deletionGracePeriodSeconds, which a second deletion
// may shorten), then the pod object is deleted with grace 0 and a uid
// precondition, and the runtime forgets the pod.
func (a *Agent) terminate(ctx context.Context, pod *kplanev1.Pod) (time.Time, error) {
	md := pod.GetMetadata()
	uid, key := md.GetUid(), md.GetNamespace()+"/"+md.GetName()
	st := a.state(uid)
	now := time.Now()
	grace := int64(30)
	switch {
	case md.DeletionGracePeriodSeconds != nil:
		grace = md.GetDeletionGracePeriodSeconds()
	case pod.GetSpec().TerminationGracePeriodSeconds != nil:
		grace = pod.GetSpec().GetTerminationGracePeriodSeconds()
	}
	// Sidecars stop after the other containers, in reverse order, as in
	// Kubernetes: the app may need them while it shuts down.
	side := sidecars(pod.GetSpec())
	others := make([]*kplanev1.Container, 0, len(pod.GetSpec().GetContainers())+len(pod.GetSpec().GetInitContainers()))
	for _, c := range allContainers(pod.GetSpec()) {
		if !isSidecar(c) {
			others = append(others, c)
		}
	}
	slices.Reverse(side)
	runningOf := func(cs []*kplanev1.Container) bool {
		for _, c := range cs {
			if s := a.rt.State(uid, c.GetName(), now); s.Running || s.Waiting {
				return true
			}
		}
		return false
	}
	running := func() bool { return runningOf(others) || runningOf(side) }
	// stop runs the preStop hooks of the running ones of cs, each cut off
	// at the end of the grace period, then sends them SIGTERM.
	stop := func(cs []*kplanev1.Container, deadline time.Time) error {
		ip := pod.GetStatus().GetPodIp()
		for _, c := range cs {
			if s := a.rt.State(uid, c.GetName(), now); s.Running {
				a.preStop(ctx, pod, c, ip, st, deadline)
			}
			if err := a.rt.StopContainer(uid, c.GetName(), false); err != nil {
				return err
			}
		}
		return nil
	}
	if running() {
		if st.termStart.IsZero() {
			st.termStart = now
		}
		deadline := st.termStart.Add(time.Duration(grace) * time.Second)
		if !st.termSignaled && now.Before(deadline) {
			st.termSignaled = true
			a.log.Info("stopping pod", "pod", key, "grace_period", time.Duration(grace)*time.Second)
			if a.exec != nil { // fake pods come by the thousand; no event each
				a.event(ctx, pod, record.Normal, "Killing", "Stopping containers (grace period %ds)", grace)
			}
			if err := stop(others, deadline); err != nil {
				return time.Time{}, err
			}
		}
		if st.termSignaled && !st.sidecarsSignaled && !runningOf(others) && now.Before(deadline) {
			st.sidecarsSignaled = true
			if err := stop(side, deadline); err != nil {
				return time.Time{}, err
			}
		}
		if !now.Before(deadline) && !st.killed {
			st.killed = true
			a.log.Info("grace period over; killing pod", "pod", key)
			if err := a.rt.Signal(uid, true); err != nil {
				return time.Time{}, err
			}
		}
		if running() {
			if st.killed {
				return now.Add(time.Second), nil // the monitor reports the exit sooner
			}
			// The monitor queues the pod when a container exits (then the
			// sidecars' turn comes); the deadline brings SIGKILL.
			return deadline, nil
		}
	}
	obj, err := kplanev1.Wrap(pod)
	if err != nil {
		return time.Time{}, fmt.Errorf("delete pod %s: %w", key, err)
	}
	zero := int64(0)
	if _, _, err := controller.DeleteIfSameUID(ctx, a.api, obj, client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return time.Time{}, err
	}
	a.log.Info("pod stopped and deleted", "pod", key, "uid", uid)
	if err := a.rt.RemovePod(uid); err != nil {
		return time.Time{}, fmt.Errorf("remove pod %s: %w", key, err)
	}
	a.releaseIP(uid)
	a.untrack(key, uid)
	return time.Time{}, nil
}

func (a *Agent) event(ctx context.Context, pod *kplanev1.Pod, typ, reason, format string, args ...any) {
	obj, err := kplanev1.Wrap(pod)
	if err != nil {
		return
	}
	a.rec.Eventf(ctx, obj, typ, reason, format, args...)
}
