package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/record"
	"github.com/kplane/kplane/pkg/workqueue"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// Sizes of the per-term machinery.
const (
	statusWorkers     = 2
	eventBuffer       = 4096
	housekeepInterval = time.Second
)

// run is one leadership term: it schedules until ctx ends (lease lost or
// shutdown), then stops every goroutine it started and hands back what is
// in flight (assumed pods whose binding was not written are forgotten).
func (s *Scheduler) run(ctx context.Context, ac *app.Context) error {
	t := &term{
		ctx:    ctx,
		queue:  newSchedulingQueue(s.queueLess(), s.now),
		status: workqueue.New(workqueue.Config{Name: Name + "-status", MetricsProvider: s.qmp}),
		binds:  make(chan bindTask, 4*s.cfg.BindWorkers),
		events: make(chan eventTask, eventBuffer),
	}
	n := s.startTerm(t)
	s.log.Info("scheduling", "pending_pods", n, "bind_workers", s.cfg.BindWorkers)

	var wg sync.WaitGroup
	spawn := func(count int, fn func()) {
		for range count {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn()
			}()
		}
	}
	spawn(s.cfg.BindWorkers, func() {
		for b := range t.binds {
			if ctx.Err() != nil {
				s.cache.Forget(b.info.UID)
				continue
			}
			s.bind(ctx, t, b)
		}
	})
	// Status writes fail and retry like any reconcile: pkg/app's workers.
	spawn(1, func() { ac.RunWorkers(ctx, Name+"-status", t.status, statusWorkers, app.ReconcileFunc(s.writeStatus)) })
	spawn(s.cfg.EventWorkers, func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-t.events:
				s.rec.Eventf(ctx, e.obj, e.typ, e.reason, "%s", e.message)
			}
		}
	})
	spawn(1, func() { s.housekeep(ctx) })
	spawn(1, func() {
		<-ctx.Done()
		s.endTerm()
		t.queue.ShutDown()
		t.status.ShutDown()
	})

	// One goroutine decides, so decisions see each other's assumed pods;
	// a pod's retries are paced by its own back-off (backoffLeftLocked).
	for {
		key, ok := t.queue.Pop(ctx)
		if !ok {
			break
		}
		s.scheduleOne(ctx, t, key)
		t.queue.Done(key)
	}
	close(t.binds) // binders forget what they did not write
	wg.Wait()
	t.bg.Wait() // plugins' goroutines (preemption's evictions) end with ctx
	s.log.Info("scheduling stopped")
	return nil
}

// startTerm installs t and queues every pending pod: events that arrived
// while standing by were not queued, and pods found unschedulable in an
// earlier term get a fresh look.
func (s *Scheduler) startTerm(t *term) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t = t
	for _, obj := range s.pods.Store().List() {
		pod := obj.GetPod()
		if s.needsScheduling(pod) {
			if p := s.pending[obj.Key()]; p == nil || p.uid != pod.GetMetadata().GetUid() {
				s.pending[obj.Key()] = &pendingPod{uid: pod.GetMetadata().GetUid(), firstSeen: s.now()}
			}
			s.pending[obj.Key()].pod = pod
		}
	}
	for key, p := range s.pending {
		p.unschedulable, p.attempts = false, 0
		t.queue.Add(key, p.queued())
	}
	for key := range s.statusWant {
		t.status.Add(key)
	}
	return len(s.pending)
}

func (s *Scheduler) endTerm() {
	s.mu.Lock()
	s.t = nil
	s.mu.Unlock()
}

// scheduleOne decides for one pod and hands the binding to the binders.
func (s *Scheduler) scheduleOne(ctx context.Context, t *term, key string) {
	obj, ok := s.pods.Store().Get(key)
	if !ok {
		return
	}
	pod := obj.GetPod()
	uid := pod.GetMetadata().GetUid()
	if !s.needsScheduling(pod) || s.cache.IsAssumed(uid) {
		return // bound (perhaps by us, not yet seen), going away, or not ours
	}
	s.mu.Lock()
	p := s.pending[key]
	if p == nil || p.uid != uid {
		p = &pendingPod{uid: uid, firstSeen: s.now()}
		s.pending[key] = p
	}
	p.pod = pod
	p.attempts++
	p.lastAttempt = s.now()
	moves := s.moves
	s.mu.Unlock()

	fwk := s.profileFor(pod)
	info, err := core.NewPodInfo(pod)
	if err != nil {
		s.m.attempts.WithLabelValues(resultError).Inc()
		s.unschedulable(t, obj, key, moves, err.Error())
		return
	}
	state := framework.NewCycleState()
	if st := fwk.RunPreFilterPlugins(ctx, state, info); !st.IsSuccess() {
		if st.Code() == framework.Error {
			s.m.attempts.WithLabelValues(resultError).Inc()
			s.log.Warn("prefilter failed; will retry", "pod", key, "plugin", st.Plugin(), "error", st.AsError())
			s.retryLater(t, key, uid)
			return
		}
		// As in Kubernetes, a PreFilter rejection is every node's reason
		// and preemption still runs: it skips the nodes where the
		// rejection is UnschedulableAndUnresolvable.
		s.m.attempts.WithLabelValues(resultUnschedulable).Inc()
		snapshot := s.cache.Snapshot()
		filtered := make(framework.NodeToStatus, len(snapshot))
		for _, n := range snapshot {
			filtered[n.Name] = st
		}
		msg := fmt.Sprintf("0/%d nodes are available: %s.", len(snapshot), st.Message())
		s.preempt(ctx, t, fwk, state, obj, info, key, moves, msg, snapshot, filtered)
		return
	}
	nominatedTo := s.cache.NominatedNode(uid)
	start := time.Now()
	var filtered framework.NodeToStatus
	node, err := s.cache.Schedule(info, func(nodes []*core.NodeInfo) (*core.NodeInfo, error) {
		best, f, err := fwk.SelectNode(ctx, state, info, nodes)
		filtered = f
		return best, err
	})
	s.m.algorithm.Observe(time.Since(start).Seconds())
	if err != nil {
		var fit *core.FitError
		switch {
		case errors.As(err, &fit):
			s.m.attempts.WithLabelValues(resultUnschedulable).Inc()
			// Preemption simulates on a copy of the cache, so it may call
			// the apiserver without holding the cache's lock.
			var snapshot []*core.NodeInfo
			if fwk.HasPostFilter() {
				snapshot = s.cache.Snapshot()
			}
			s.preempt(ctx, t, fwk, state, obj, info, key, moves, fit.Error(), snapshot, filtered)
		case errors.Is(err, core.ErrAlreadyAssigned):
			// The watch confirmed a binding between our checks.
			s.log.Debug("not scheduling", "pod", key, "error", err)
		default:
			s.m.attempts.WithLabelValues(resultError).Inc()
			s.log.Warn("scheduling failed; will retry", "pod", key, "error", err)
			s.retryLater(t, key, uid)
		}
		return
	}
	if st := fwk.RunReservePlugins(ctx, state, info, node); !st.IsSuccess() {
		s.cache.Forget(uid)
		s.m.attempts.WithLabelValues(resultError).Inc()
		s.log.Warn("reserve failed; will retry", "pod", key, "plugin", st.Plugin(), "error", st.AsError())
		s.retryLater(t, key, uid)
		return
	}
	s.m.attempts.WithLabelValues(resultScheduled).Inc()
	select {
	case t.binds <- bindTask{obj: obj, info: info, node: node, fwk: fwk, state: state, nominated: nominatedTo}:
	case <-ctx.Done():
		fwk.RunUnreservePlugins(ctx, state, info, node)
		s.cache.Forget(uid)
	}
}

// preempt runs the PostFilter plugins (when the profile has any) for a
// pod that fits no node, then parks it as unschedulable with msg. On a
// nomination, the pod's room is kept in the cache and lower-priority pods
// nominated to the same node lose theirs (Kubernetes clears their
// nominatedNodeName); when preemption finds that it cannot help, the
// pod's own nomination is cleared.
func (s *Scheduler) preempt(ctx context.Context, t *term, fwk *framework.Framework, state *framework.CycleState, obj *kplanev1.Object,
	info *core.PodInfo, key string, moves uint64, msg string, nodes []*core.NodeInfo, filtered framework.NodeToStatus) {
	if !fwk.HasPostFilter() {
		s.unschedulable(t, obj, key, moves, msg)
		return
	}
	res, st := fwk.RunPostFilterPlugins(ctx, state, info, nodes, filtered)
	w := statusWant{uid: info.UID, message: msg}
	switch {
	case st.IsSuccess() && res != nil && res.NominatedNodeName != "":
		w.nominated = res.NominatedNodeName
		s.cache.Nominate(info, w.nominated)
		for _, lower := range s.cache.UnnominateBelow(w.nominated, info.UID, info.Pod.GetSpec().GetPriority()) {
			s.log.Debug("nomination taken by a more important pod", "pod", lower.Key, "node", w.nominated, "by", key)
			s.wantStatus(t, lower.Key, statusWant{uid: lower.UID, clearNominated: true, nominationOnly: true})
		}
		s.log.Debug("preemption nominated a node", "pod", key, "node", w.nominated)
	case st.Code() == framework.Error:
		s.log.Warn("preemption failed", "pod", key, "plugin", st.Plugin(), "error", st.AsError())
	default:
		w.message += " preemption: " + st.Message()
		if res != nil && res.NominatedNodeName == "" {
			// Preemption no longer helps: the room kept for the pod is
			// given up.
			s.cache.Unnominate(info.UID)
			w.clearNominated = true
		}
	}
	s.park(t, obj, key, moves, w)
}

// unschedulable parks a pod that fits nowhere until the cluster changes
// (or retries it after its back-off if it changed while we decided), and
// reports why on the pod and in an Event.
func (s *Scheduler) unschedulable(t *term, obj *kplanev1.Object, key string, moves uint64, message string) {
	s.park(t, obj, key, moves, statusWant{uid: obj.Meta().GetUid(), message: message})
}

// park is unschedulable with the status to write (w.message is the
// reason; w may also set or clear status.nominatedNodeName).
func (s *Scheduler) park(t *term, obj *kplanev1.Object, key string, moves uint64, w statusWant) {
	uid, message := w.uid, w.message
	s.mu.Lock()
	if p := s.pending[key]; p != nil && p.uid == uid {
		if s.moves != moves {
			t.queue.AddAfter(key, p.queued(), s.backoffLeftLocked(p))
		} else {
			p.unschedulable = true
		}
	}
	s.mu.Unlock()
	s.log.Debug("pod is unschedulable", "pod", key, "reason", message)
	s.wantStatus(t, key, w)
	s.event(t, obj, record.Warning, "FailedScheduling", message)
}

// retryLater queues a pod again after its back-off (a failed binding).
func (s *Scheduler) retryLater(t *term, key, uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[key]; p != nil && p.uid == uid {
		t.queue.AddAfter(key, p.queued(), s.backoffLeftLocked(p))
	}
}

// bind is the binding cycle: Permit, PreBind, Bind (DefaultBinder writes
// spec.nodeName with the resourceVersion the decision was made on, so a
// pod changed meanwhile is not bound blindly) and PostBind. A failure
// undoes Reserve and frees the room the pod held.
func (s *Scheduler) bind(ctx context.Context, t *term, b bindTask) {
	key, uid := b.obj.Key(), b.info.UID
	start := time.Now()
	st := b.fwk.RunPermitPlugins(ctx, b.state, b.info, b.node)
	if st.IsSuccess() {
		st = b.fwk.RunPreBindPlugins(ctx, b.state, b.info, b.node)
	}
	if st.Code() == framework.Pending {
		s.pendingPreBind(t, b, st)
		return
	}
	if st.IsSuccess() {
		st = b.fwk.RunBindPlugins(ctx, b.state, b.info, b.node)
	}
	elapsed := time.Since(start).Seconds()
	if st.IsSuccess() {
		s.m.binding.WithLabelValues("ok").Observe(elapsed)
		s.cache.FinishBinding(uid)
		if p := s.donePending(key, uid); p != nil {
			s.m.e2e.Observe(s.now().Sub(p.firstSeen).Seconds())
		}
		s.log.Trace("bound", "pod", key, "node", b.node)
		s.event(t, b.obj, record.Normal, "Scheduled", fmt.Sprintf("Successfully assigned %s to %s", key, b.node))
		// PodScheduled=True and, when the pod was nominated elsewhere by
		// preemption, the nomination cleared.
		c := podScheduledCondition(b.obj.GetPod())
		nominated := b.obj.GetPod().GetStatus().GetNominatedNodeName()
		if (c != nil && c.GetStatus() != kplanev1.ConditionTrue) || (nominated != "" && nominated != b.node) || (b.nominated != "" && b.nominated != b.node) {
			s.wantStatus(t, key, statusWant{uid: uid, scheduled: true, clearNominated: true, boundTo: b.node})
		}
		b.fwk.RunPostBindPlugins(ctx, b.state, b.info, b.node)
		return
	}
	// The room it held is free again.
	b.fwk.RunUnreservePlugins(ctx, b.state, b.info, b.node)
	if s.cache.Forget(uid) {
		s.moveAll("binding failed")
	}
	err := st.AsError()
	switch {
	case client.IsNotFound(err):
		s.m.binding.WithLabelValues("gone").Observe(elapsed)
		s.donePending(key, uid)
	case client.IsConflict(err):
		// The pod changed since the decision: decide again on the new
		// version (or drop it if someone else bound it).
		s.m.binding.WithLabelValues("conflict").Observe(elapsed)
		s.log.Debug("binding conflict; rescheduling", "pod", key, "node", b.node)
		s.retryLater(t, key, uid)
	case ctx.Err() != nil:
		// Stopping: the next leader schedules it.
	case st.IsRejected():
		// Permit rejected it (or timed out): like a failed fit.
		s.m.binding.WithLabelValues("rejected").Observe(elapsed)
		s.mu.Lock()
		moves := s.moves
		s.mu.Unlock()
		s.unschedulable(t, b.obj, key, moves, fmt.Sprintf("0/%d nodes are available: %s.", s.knownNodes(), st.Message()))
	default:
		s.m.binding.WithLabelValues("error").Observe(elapsed)
		s.log.Warn("binding failed; will retry", "pod", key, "node", b.node, "plugin", st.Plugin(), "error", err)
		s.event(t, b.obj, record.Warning, "FailedScheduling", fmt.Sprintf("Binding rejected: %v", err))
		s.retryLater(t, key, uid)
	}
}

// pendingPreBind holds a pod whose PreBind started work it must wait for
// (VolumeBinding wrote the node on its claims): the room it held is freed
// and the pod parked until a cluster event (its claims bound) brings it
// back.
func (s *Scheduler) pendingPreBind(t *term, b bindTask, st *framework.Status) {
	key, uid := b.obj.Key(), b.info.UID
	b.fwk.RunUnreservePlugins(context.Background(), b.state, b.info, b.node)
	if s.cache.Forget(uid) {
		s.moveAll("room held for a pending pod is free")
	}
	s.mu.Lock()
	moves := s.moves
	s.mu.Unlock()
	s.log.Debug("pod waits before binding", "pod", key, "node", b.node, "plugin", st.Plugin(), "reason", st.Message())
	s.mu.Lock()
	if p := s.pending[key]; p != nil && p.uid == uid {
		if s.moves != moves {
			t.queue.AddAfter(key, p.queued(), s.backoffLeftLocked(p))
		} else {
			p.unschedulable = true
		}
	}
	s.mu.Unlock()
}

// event hands an Event to the writers, or drops it when over the Event
// rate or when the writers are far behind: events are advice and must not
// slow scheduling down.
func (s *Scheduler) event(t *term, obj *kplanev1.Object, typ, reason, message string) {
	if !s.eventLimit.Allow() {
		s.m.eventsDropped.Inc()
		return
	}
	select {
	case t.events <- eventTask{obj: obj, typ: typ, reason: reason, message: message}:
	default:
		s.m.eventsDropped.Inc()
	}
}

// wantStatus asks the status writers to set the pod's PodScheduled
// condition; only the latest wish per pod is written.
func (s *Scheduler) wantStatus(t *term, key string, w statusWant) {
	s.mu.Lock()
	old, ok := s.statusWant[key]
	s.statusWant[key] = w.merge(old, ok)
	s.mu.Unlock()
	t.status.Add(key)
}

// writeStatus sets PodScheduled as wished for the pod, with UpdateStatus,
// only when it differs from what the pod already says.
func (s *Scheduler) writeStatus(ctx context.Context, key string) error {
	s.mu.Lock()
	w, ok := s.statusWant[key]
	delete(s.statusWant, key)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	obj, ok := s.pods.Store().Get(key)
	var pod *kplanev1.Pod
	var err error
	if ok {
		pod, err = s.whole(ctx, obj.GetPod())
	}
	if pod != nil {
		_, _, err = controller.UpdateStatus(ctx, s.api, pod, func(cur *kplanev1.Pod) *kplanev1.Pod {
			if cur.GetMetadata().GetUid() != w.uid || (!w.scheduled && !w.nominationOnly && cur.GetSpec().GetNodeName() != "") {
				return nil // gone, replaced, or bound meanwhile
			}
			pod := proto.Clone(cur).(*kplanev1.Pod)
			if !setPodScheduled(pod, w, s.now()) {
				return nil
			}
			return pod
		})
	}
	if err != nil {
		s.mu.Lock()
		if _, newer := s.statusWant[key]; !newer {
			s.statusWant[key] = w
		}
		s.mu.Unlock()
		return fmt.Errorf("update status of %s: %w", key, err)
	}
	return nil
}

// whole returns pod, a cached pod, as a write may start from it: a
// pending pod is cached whole, an assigned one trimmed (trimAssignedPod),
// so that one is read afresh from the apiserver; a status written from
// the trimmed copy while its resourceVersion is current would drop the
// node agent's conditions, container statuses and IPs. nil when the pod
// is gone.
func (s *Scheduler) whole(ctx context.Context, pod *kplanev1.Pod) (*kplanev1.Pod, error) {
	if pod.GetSpec().GetNodeName() == "" {
		return pod, nil
	}
	md := pod.GetMetadata()
	resp, err := s.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: md.GetNamespace(), Name: md.GetName()})
	switch {
	case client.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	return resp.GetObject().GetPod(), nil
}

func podScheduledCondition(pod *kplanev1.Pod) *kplanev1.Condition {
	return apiutil.FindCondition(pod.GetStatus().GetConditions(), kplanev1.PodScheduled)
}

// setPodScheduled sets the pod's PodScheduled condition as wished and
// reports whether that changed anything.
func setPodScheduled(pod *kplanev1.Pod, w statusWant, now time.Time) bool {
	want := &kplanev1.Condition{Type: kplanev1.PodScheduled, Status: kplanev1.ConditionTrue}
	if !w.scheduled {
		want.Status, want.Reason, want.Message = kplanev1.ConditionFalse, "Unschedulable", w.message
	}
	if pod.Status == nil {
		pod.Status = &kplanev1.PodStatus{}
	}
	if pod.Status.Phase == "" {
		pod.Status.Phase = kplanev1.PodPending
	}
	nominatedChanged := false
	switch nn := pod.Status.NominatedNodeName; {
	case w.nominated != "" && nn != w.nominated:
		pod.Status.NominatedNodeName = w.nominated
		nominatedChanged = true
	case w.nominated == "" && w.clearNominated && nn != "" && (!w.scheduled || nn != w.boundTo):
		pod.Status.NominatedNodeName = ""
		nominatedChanged = true
	}
	if w.nominationOnly {
		return nominatedChanged
	}
	c := podScheduledCondition(pod)
	if c != nil && c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message {
		return nominatedChanged
	}
	ts := timestamppb.New(now)
	want.LastProbeTime = ts
	want.LastTransitionTime = ts
	pod.Status.Conditions = apiutil.SetStatusCondition(pod.Status.Conditions, want)
	return true
}

// housekeep expires assumed pods whose binding never showed up in the
// watch, and retries pods that have been unschedulable for long.
func (s *Scheduler) housekeep(ctx context.Context) {
	tick := time.NewTicker(housekeepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range s.cache.Expire() {
			s.log.Warn("binding never showed up in the watch; forgetting it", "pod", p.Key, "node", p.NodeName)
			if obj, ok := s.pods.Store().Get(p.Key); ok && s.needsScheduling(obj.GetPod()) {
				s.addPending(p.Key, obj.GetPod(), true)
			}
		}
		s.mu.Lock()
		if s.t != nil {
			now := s.now()
			for key, p := range s.pending {
				if p.unschedulable && now.Sub(p.lastAttempt) >= s.cfg.UnschedulableRetry {
					p.unschedulable = false
					s.t.queue.Add(key, p.queued())
				}
			}
		}
		s.mu.Unlock()
	}
}
