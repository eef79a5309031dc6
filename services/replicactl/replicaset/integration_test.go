package replicaset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// instance is one replicactl running in-process, leader-elected with
// short leases so that hand-overs are quick.
type instance struct {
	id  string
	ctl *controllertest.Controller
}

func startInstance(t *testing.T, addr, id string) *instance {
	t.Helper()
	return &instance{id: id, ctl: controllertest.Run(t, addr, NewService(), controllertest.LeaderElection(id)...)}
}

// stop is the in-process SIGTERM: in-flight work finishes, the lease is released.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if err := in.ctl.Stop(); err != nil {
		t.Errorf("replicactl %s: %v", in.id, err)
	}
}

func eventually(t *testing.T, d time.Duration, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := what()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", msg)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func rsObject(name string, replicas int32) *kplanev1.Object {
	l := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchExpressions: []*kplanev1.LabelSelectorRequirement{{Key: "app", Operator: "In", Values: []string{name}}}},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	})
}

func rcObject(name string, replicas int32) *kplanev1.Object {
	l := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.ReplicationController{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.ReplicationControllerSpec{
			Replicas: proto.Int32(replicas),
			Selector: l,
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	})
}

func setReplicas(o *kplanev1.Object, n int32) {
	switch {
	case o.GetReplicaSet() != nil:
		o.GetReplicaSet().Spec.Replicas = proto.Int32(n)
	case o.GetReplicationController() != nil:
		o.GetReplicationController().Spec.Replicas = proto.Int32(n)
	}
}

// podWatch follows every pod event from the start of the test: it checks
// that no name is ADDED twice with no DELETED between (a name drawn again
// after its pod went is no fault), and that the active pods an owner
// controls never exceed the ceiling the test allows (the highest replicas
// asked for since the last quiescence, plus orphans offered for adoption):
// a controller that creates twice on a lagging cache would go above it,
// even if it deletes the extra pods later.
type podWatch struct {
	mu         sync.Mutex
	added      map[string]bool
	live       map[string]*kplanev1.Pod
	ceiling    map[string]int // owner uid -> allowed active pods
	violations []string
	events     int
}

func newPodWatch(t *testing.T, api kplanev1.ResourcesClient) *podWatch {
	w := &podWatch{added: map[string]bool{}, live: map[string]*kplanev1.Pod{}, ceiling: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					w.violate(fmt.Sprintf("pod watch ended: %v", err))
				}
				return
			}
			w.apply(resp)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *podWatch) violate(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, msg)
}

func (w *podWatch) apply(resp *kplanev1.WatchResponse) {
	pod := resp.GetObject().GetPod()
	if pod == nil {
		return
	}
	name := pod.GetMetadata().GetName()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	switch resp.GetType() {
	case kplanev1.EventType_EVENT_TYPE_ADDED:
		if _, ok := w.live[name]; ok {
			w.violations = append(w.violations, "pod name ADDED twice with no DELETED between: "+name)
		}
		w.added[name] = true
		w.live[name] = pod
	case kplanev1.EventType_EVENT_TYPE_MODIFIED:
		w.live[name] = pod
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		delete(w.live, name)
		return
	}
	ref := ownerUID(pod)
	if ref == "" || !apiutil.IsPodActive(pod) {
		return
	}
	n := 0
	for _, p := range w.live {
		if ownerUID(p) == ref && apiutil.IsPodActive(p) {
			n++
		}
	}
	if c, ok := w.ceiling[ref]; ok && n > c {
		w.violations = append(w.violations, fmt.Sprintf("owner %s had %d active pods, more than the %d ever asked for (pod %s)", ref, n, c, name))
	}
}

func ownerUID(p *kplanev1.Pod) string {
	for _, r := range p.GetMetadata().GetOwnerReferences() {
		if r.GetController() {
			return r.GetUid()
		}
	}
	return ""
}

func (w *podWatch) setCeiling(uid string, n int, raiseOnly bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if raiseOnly && w.ceiling[uid] >= n {
		return
	}
	w.ceiling[uid] = n
}

func (w *podWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
	if len(w.violations) > 0 {
		t.FailNow()
	}
}

// harness drives the randomised test.
type harness struct {
	t      *testing.T
	rng    *rand.Rand
	api    kplanev1.ResourcesClient
	ctx    context.Context
	watch  *podWatch
	owners []*kplanev1.Object // latest known version of each owner
	want   []int32
}

func (h *harness) get(i int) *kplanev1.Object {
	h.t.Helper()
	o := h.owners[i]
	resp, err := h.api.Get(h.ctx, &kplanev1.GetRequest{Kind: o.KindName(), Namespace: "default", Name: o.Meta().GetName()})
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.GetObject()
}

// scale sets owner i's replicas, retrying on conflicts (the controller
// writes status concurrently).
func (h *harness) scale(i int, n int32) {
	h.t.Helper()
	h.watch.setCeiling(h.owners[i].Meta().GetUid(), int(n), true)
	h.want[i] = n
	for attempt := 0; ; attempt++ {
		o := h.get(i)
		setReplicas(o, n)
		_, err := h.api.Update(h.ctx, &kplanev1.UpdateRequest{Object: o})
		if status.Code(err) == codes.Aborted && attempt < 20 {
			continue
		}
		if err != nil {
			h.t.Fatalf("scale %s to %d: %v", o.Key(), n, err)
		}
		return
	}
}

func (h *harness) listPods() []*kplanev1.Pod {
	h.t.Helper()
	resp, err := h.api.List(h.ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]*kplanev1.Pod, 0, len(resp.GetItems()))
	for _, o := range resp.GetItems() {
		out = append(out, o.GetPod())
	}
	return out
}

func (h *harness) selector(i int) labels.Selector {
	o, err := OwnerOf(h.owners[i])
	if err != nil {
		h.t.Fatal(err)
	}
	return o.Selector
}

// deleteRandomPods deletes up to n pods (any owner, orphans included).
func (h *harness) deleteRandomPods(n int) {
	pods := h.listPods()
	h.rng.Shuffle(len(pods), func(a, b int) { pods[a], pods[b] = pods[b], pods[a] })
	for _, p := range pods[:min(n, len(pods))] {
		_, err := h.api.Delete(h.ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: p.GetMetadata().GetName()})
		if err != nil && status.Code(err) != codes.NotFound {
			h.t.Fatalf("delete pod: %v", err)
		}
	}
}

// markSomeReady plays the node agent for a random part of the pods.
func (h *harness) markSomeReady() {
	for _, p := range h.listPods() {
		if p.GetStatus().GetPhase() != kplanev1.PodPending || h.rng.IntN(2) == 0 {
			continue
		}
		p.Status.Phase = kplanev1.PodRunning
		p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: "True", LastTransitionTime: timestamppb.Now()}}
		_, err := h.api.UpdateStatus(h.ctx, &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(p)})
		if err != nil && status.Code(err) != codes.Aborted && status.Code(err) != codes.NotFound {
			h.t.Fatalf("mark pod ready: %v", err)
		}
	}
}

// relabelOne moves one pod of owner i out of its selector: it must be
// released (and replaced).
func (h *harness) relabelOne(i int) {
	sel := h.selector(i)
	for _, p := range h.listPods() {
		if !sel.Matches(p.GetMetadata().GetLabels()) || !apiutil.IsPodActive(p) {
			continue
		}
		p.Metadata.Labels = map[string]string{"app": "released"}
		_, err := h.api.Update(h.ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(p)})
		if err != nil && status.Code(err) != codes.Aborted && status.Code(err) != codes.NotFound {
			h.t.Fatalf("relabel pod: %v", err)
		}
		return
	}
}

// addOrphan creates a pod matching owner i with no owner: it must be adopted.
func (h *harness) addOrphan(i int) {
	h.watch.setCeiling(h.owners[i].Meta().GetUid(), int(h.want[i])+1+h.ceilingSlack(i), false)
	name := h.owners[i].Meta().GetName()
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{GenerateName: "orphan-", Namespace: "default", Labels: map[string]string{"app": name}},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := h.api.Create(h.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(p)}); err != nil {
		h.t.Fatalf("create orphan: %v", err)
	}
}

func (h *harness) ceilingSlack(i int) int {
	h.watch.mu.Lock()
	defer h.watch.mu.Unlock()
	return max(0, h.watch.ceiling[h.owners[i].Meta().GetUid()]-int(h.want[i]))
}

// converged reports what is still off ("" when every owner has exactly
// its replicas as active pods, all controlled by it, and a status that
// says so for the current generation).
func (h *harness) converged() string {
	pods := h.listPods()
	for i := range h.owners {
		o := h.get(i)
		owner, err := OwnerOf(o)
		if err != nil {
			return err.Error()
		}
		matching, owned := 0, 0
		for _, p := range pods {
			if !apiutil.IsPodActive(p) {
				continue
			}
			m := owner.Selector.Matches(p.GetMetadata().GetLabels())
			mine := ownerUID(p) == owner.Meta.GetUid()
			if m {
				matching++
			}
			if mine {
				owned++
			}
			if m && !mine {
				return fmt.Sprintf("%s: pod %s matches but is not controlled by it", o.Key(), p.GetMetadata().GetName())
			}
			if mine && !m {
				return fmt.Sprintf("%s: pod %s no longer matches but is still controlled by it", o.Key(), p.GetMetadata().GetName())
			}
		}
		if matching != int(h.want[i]) || owned != int(h.want[i]) {
			return fmt.Sprintf("%s: %d matching / %d owned active pods, want %d", o.Key(), matching, owned, h.want[i])
		}
		st := owner.Status
		if st.GetReplicas() != h.want[i] || st.GetObservedGeneration() != owner.Meta.GetGeneration() {
			return fmt.Sprintf("%s: status replicas %d observedGeneration %d, want %d and %d", o.Key(), st.GetReplicas(), st.GetObservedGeneration(), h.want[i], owner.Meta.GetGeneration())
		}
	}
	return ""
}

func seed(t *testing.T) uint64 {
	if s := os.Getenv("REPLICACTL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("REPLICACTL_SEED: %v", err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// TestRandomisedConvergence scales a ReplicaSet and a ReplicationController
// up and down in storms, deletes random pods, relabels and adds orphans,
// stops the controllers (informers paused) while changes happen, and
// restarts them mid-way; after each round, once quiet, the active pods
// equal the replicas exactly. Rerun a failure with REPLICACTL_SEED=<seed>.
func TestRandomisedConvergence(t *testing.T) {
	s := seed(t)
	t.Logf("seed %d (rerun with REPLICACTL_SEED=%d)", s, s)
	rng := rand.New(rand.NewPCG(s, s^0x5eed))

	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	api := srv.Client()
	h := &harness{t: t, rng: rng, api: api, ctx: ctx, watch: newPodWatch(t, api)}
	for _, o := range []*kplanev1.Object{rsObject("web", 0), rcObject("legacy", 0)} {
		resp, err := api.Create(ctx, &kplanev1.CreateRequest{Object: o})
		if err != nil {
			t.Fatal(err)
		}
		h.owners = append(h.owners, resp.GetObject())
		h.want = append(h.want, 0)
		h.watch.setCeiling(resp.GetObject().Meta().GetUid(), 0, false)
	}

	// Two replicas of the controller, as in production: one leads.
	instances := []*instance{startInstance(t, srv.Addr(), "rc-a"), startInstance(t, srv.Addr(), "rc-b")}
	defer func() {
		for _, in := range instances {
			if in != nil {
				in.stop(t)
			}
		}
	}()
	restart := func(i int) {
		instances[i].stop(t)
		instances[i] = startInstance(t, srv.Addr(), instances[i].id)
	}

	const rounds = 12
	for round := 1; round <= rounds; round++ {
		ops := []string{}
		for step := 0; step < 3+rng.IntN(4); step++ {
			i := rng.IntN(len(h.owners))
			switch op := rng.IntN(8); op {
			case 0, 1: // a single scale
				n := int32(rng.IntN(31))
				h.scale(i, n)
				ops = append(ops, fmt.Sprintf("scale %d->%d", i, n))
			case 2: // a storm: many scales with no pause
				for range 4 + rng.IntN(6) {
					h.scale(i, int32(rng.IntN(31)))
				}
				ops = append(ops, fmt.Sprintf("storm %d->%d", i, h.want[i]))
			case 3:
				n := 1 + rng.IntN(8)
				h.deleteRandomPods(n)
				ops = append(ops, fmt.Sprintf("delete %d pods", n))
			case 4: // informers paused: every controller stops, changes land, they return
				for _, in := range instances {
					in.stop(t)
				}
				h.scale(i, int32(rng.IntN(31)))
				h.deleteRandomPods(rng.IntN(5))
				for k := range instances {
					instances[k] = startInstance(t, srv.Addr(), instances[k].id)
				}
				ops = append(ops, fmt.Sprintf("pause+scale %d->%d", i, h.want[i]))
			case 5: // restart one controller right after a scale-up, mid-way
				h.scale(i, int32(10+rng.IntN(21)))
				restart(rng.IntN(len(instances)))
				ops = append(ops, fmt.Sprintf("scale %d->%d+restart", i, h.want[i]))
			case 6:
				h.relabelOne(i)
				h.addOrphan(i)
				ops = append(ops, fmt.Sprintf("release+orphan %d", i))
			case 7:
				h.markSomeReady()
				ops = append(ops, "ready")
			}
		}
		start := time.Now()
		eventually(t, 60*time.Second, h.converged)
		h.watch.check(t)
		t.Logf("round %d: %v; converged in %v (replicas %v)", round, ops, time.Since(start).Round(time.Millisecond), h.want)
		// Quiet again: the ceiling drops to what is asked for now.
		for i, o := range h.owners {
			h.watch.setCeiling(o.Meta().GetUid(), int(h.want[i]), false)
		}
	}
	h.watch.check(t)
	h.watch.mu.Lock()
	t.Logf("%d pod events, %d distinct pods created", h.watch.events, len(h.watch.added))
	h.watch.mu.Unlock()
}

// startSingle runs one replicactl without leader election.
func startSingle(t *testing.T, addr string) *replicaController {
	t.Helper()
	rc := newReplicaController()
	controllertest.Run(t, addr, rc.service(), "--log-level", "error")
	return rc
}

// TestRejectedTemplateFailsFast: pods the apiserver rejects (here, a
// template finalizer that is not a valid name: the ReplicaSet is accepted,
// every pod made from it is not) are tried a handful of times per
// reconcile, not replicas times, and the failure shows as a FailedCreate
// Event and a ReplicaFailure condition naming the error.
func TestRejectedTemplateFailsFast(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "badtmpl"
	rs := rsObject(name, 50)
	rs.GetReplicaSet().Spec.Template.Metadata.Finalizers = []string{"not a valid finalizer!"}
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: rs}); err != nil {
		t.Fatal(err)
	}
	rc := startSingle(t, srv.Addr())

	var cond *kplanev1.Condition
	eventually(t, 30*time.Second, func() string {
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: kindReplicaSet, Namespace: "default", Name: name})
		if err != nil {
			return err.Error()
		}
		cond = failureCondition(resp.GetObject().GetReplicaSet().GetStatus())
		if cond == nil {
			return "no ReplicaFailure condition yet"
		}
		return ""
	})
	if cond.GetReason() != reasonFailedCreate || !strings.Contains(cond.GetMessage(), "finalizers") {
		t.Fatalf("condition %v does not name the error", cond)
	}
	eventually(t, 30*time.Second, func() string {
		resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: "default"})
		if err != nil {
			return err.Error()
		}
		for _, o := range resp.GetItems() {
			if ev := o.GetEvent(); ev.GetReason() == reasonFailedCreate && strings.Contains(ev.GetMessage(), "finalizers") {
				return ""
			}
		}
		return "no FailedCreate event"
	})
	pods, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pods.GetItems()); n != 0 {
		t.Fatalf("%d pods exist from a template the apiserver rejects", n)
	}

	// Slow start: every failing reconcile made a single call (the first
	// batch, of one), not one per missing replica.
	if calls, rounds := rc.control.Counts.Creates.Load(), rc.createRounds.Load(); calls == 0 || calls > rounds {
		t.Fatalf("%d create calls in %d reconciles; slow start should stop each after its first failed batch of one", calls, rounds)
	}

	// Fixing the template heals the ReplicaSet: pods appear and the
	// condition goes away.
	for attempt := 0; ; attempt++ {
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: kindReplicaSet, Namespace: "default", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		o := resp.GetObject()
		o.GetReplicaSet().Spec.Template.Metadata.Finalizers = nil
		o.GetReplicaSet().Spec.Replicas = proto.Int32(3)
		if _, err = api.Update(ctx, &kplanev1.UpdateRequest{Object: o}); status.Code(err) == codes.Aborted && attempt < 10 {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		break
	}
	eventually(t, 30*time.Second, func() string {
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: kindReplicaSet, Namespace: "default", Name: name})
		if err != nil {
			return err.Error()
		}
		st := resp.GetObject().GetReplicaSet().GetStatus()
		if st.GetReplicas() != 3 || failureCondition(st) != nil {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
}

// TestAvailabilityHonoursMinReadySeconds: a ready pod becomes available
// only minReadySeconds after it turned ready, and the status catches up
// by itself (a requeue after the remaining time, no event needed).
func TestAvailabilityHonoursMinReadySeconds(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs := rsObject("slow", 2)
	rs.GetReplicaSet().Spec.MinReadySeconds = 1
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: rs}); err != nil {
		t.Fatal(err)
	}
	startSingle(t, srv.Addr())
	getStatus := func() *kplanev1.ReplicaSetStatus {
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: kindReplicaSet, Namespace: "default", Name: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetObject().GetReplicaSet().GetStatus()
	}
	eventually(t, 30*time.Second, func() string {
		if st := getStatus(); st.GetReplicas() != 2 {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
	pods, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	// Condition times are stored to the second, so the controller counts
	// from the truncated time: so does the test.
	readyAt := time.Now().Truncate(time.Second)
	for _, o := range pods.GetItems() {
		p := o.GetPod()
		p.Status.Phase = kplanev1.PodRunning
		p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: "True", LastTransitionTime: timestamppb.New(readyAt)}}
		if _, err := api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: o}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() string {
		if st := getStatus(); st.GetReadyReplicas() != 2 {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
	st := getStatus()
	if st.GetAvailableReplicas() == 2 && time.Since(readyAt) < time.Second {
		t.Fatalf("available before minReadySeconds passed: %v", st)
	}
	eventually(t, 30*time.Second, func() string {
		if st := getStatus(); st.GetAvailableReplicas() != 2 {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
}

// TestDoesNotFightOtherControllers: pods controlled by something else are
// never adopted or deleted, even when they match.
func TestDoesNotFightOtherControllers(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	foreign := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "foreign", Namespace: "default", Labels: map[string]string{"app": "shared"},
			OwnerReferences: []*kplanev1.OwnerReference{{Kind: "Job", Name: "j", Uid: "job-uid", Controller: true}}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(foreign)}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: rsObject("shared", 2)}); err != nil {
		t.Fatal(err)
	}
	startSingle(t, srv.Addr())
	eventually(t, 30*time.Second, func() string {
		resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
		if err != nil {
			return err.Error()
		}
		mine := 0
		for _, o := range resp.GetItems() {
			if ref := ownerUID(o.GetPod()); ref == "job-uid" {
				continue
			}
			if !strings.HasPrefix(o.Meta().GetName(), "shared-") {
				return "unexpected pod " + o.Meta().GetName()
			}
			mine++
		}
		if mine != 2 {
			return fmt.Sprintf("%d pods of the ReplicaSet", mine)
		}
		return ""
	})
	resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "foreign"})
	if err != nil {
		t.Fatal(errors.Join(errors.New("the foreign pod was deleted"), err))
	}
	if ownerUID(resp.GetObject().GetPod()) != "job-uid" {
		t.Fatalf("foreign pod's controller changed: %v", resp.GetObject().Meta().GetOwnerReferences())
	}
}

func TestBadFlags(t *testing.T) {
	srv := testserver.Start(t)
	for flag, want := range map[string]string{
		"--burst-replicas=0":            "--burst-replicas must be at least 1",
		"--pod-update-batch-period=-1s": "--pod-update-batch-period must not be negative",
	} {
		err := app.Run(context.Background(), NewService(), []string{"--apiserver", srv.Addr(), "--health-addr", "", "--leader-elect=false", flag})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v", flag, err)
		}
	}
}

// TestAdoptAndReleaseKeepThePodWhole: replicactl caches pods trimmed
// (trimPod), so its two writes of a pod, adoption and release, must start
// from a fresh read. Written from the cache, the pod would lose its
// containers (the apiserver refuses that, and adoption never happens) or,
// for a field the apiserver does not require, quietly lose it.
func TestAdoptAndReleaseKeepThePodWhole(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	whole := func(name string) *kplanev1.Pod {
		return &kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "keep"},
				Annotations: map[string]string{"note": "kept"}},
			Spec: &kplanev1.PodSpec{ActiveDeadlineSeconds: proto.Int64(600),
				Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Args: []string{"sleep", "3600"}}}},
		}
	}
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(whole("orphan"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: rsObject("keep", 1)}); err != nil {
		t.Fatal(err)
	}
	startSingle(t, srv.Addr())
	get := func() *kplanev1.Pod {
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "orphan"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetObject().GetPod()
	}
	intact := func(p *kplanev1.Pod) string {
		c := p.GetSpec().GetContainers()
		if len(c) != 1 || c[0].GetImage() != "busybox" || len(c[0].GetArgs()) != 2 || p.GetSpec().GetActiveDeadlineSeconds() != 600 ||
			p.GetMetadata().GetAnnotations()["note"] != "kept" {
			return fmt.Sprintf("pod lost fields in the write: %v", p)
		}
		return ""
	}
	eventually(t, 30*time.Second, func() string {
		if p := get(); ownerUID(p) == "" {
			return "the orphan is not adopted"
		}
		return ""
	})
	if msg := intact(get()); msg != "" {
		t.Fatalf("after adoption: %s", msg)
	}
	p := get()
	p.Metadata.Labels = map[string]string{"app": "elsewhere"}
	if _, err := api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(p)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string {
		if p := get(); ownerUID(p) != "" {
			return "the relabelled pod is not released"
		}
		return ""
	})
	if msg := intact(get()); msg != "" {
		t.Fatalf("after release: %s", msg)
	}
}
