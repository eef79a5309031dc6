package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Labels on everything the workload creates.
const (
	labelChaos = "kplane.io/chaos"
	labelApp   = "app"
)

func absent() state { return state{replicas: -1} }

// workload drives the cluster while services are killed: several
// ReplicaSets scaled up and down, their pods deleted, ReplicaSets deleted
// and created again, and a stream of ledger Secrets created and deleted.
// Every write goes into the ledger, acknowledged or not.
type workload struct {
	api       kplanev1.ResourcesClient
	ns        string
	rng       *rand.Rand
	ledger    *ledger
	sets      []*rsState
	maxRep    int32
	interval  time.Duration
	callLimit time.Duration

	secrets  []string // ledger Secrets created (acknowledged or not) and not deleted
	nextSeq  int
	scales   atomic.Int64
	podDels  atomic.Int64
	rsCycles atomic.Int64
	jobs     atomic.Int64 // Jobs created
	jobSeq   int          // the next Job's number
	deploys  deployments
	// setsState is the StatefulSet and DaemonSet part (sets.go).
	setsState *setsState
	writes    atomic.Int64
	failures  atomic.Int64
}

// rsState is what the workload knows of one ReplicaSet name.
type rsState struct {
	name string
	// uid of the current object; "" when unknown (a create or delete
	// whose outcome is unknown), which the next action resolves first.
	uid      string
	exists   bool
	replicas int32
}

func newWorkload(api kplanev1.ResourcesClient, ns string, seed uint64, sets int, maxReplicas int32, l *ledger) *workload {
	w := &workload{
		api: api, ns: ns, ledger: l, maxRep: maxReplicas,
		rng:       rand.New(rand.NewPCG(seed, 0x776f726b6c6f6164)),
		interval:  150 * time.Millisecond,
		callLimit: 5 * time.Second,
	}
	for i := 0; i < sets; i++ {
		w.sets = append(w.sets, &rsState{name: fmt.Sprintf("chaos-rs-%d", i)})
	}
	return w
}

// replicaSet is the manifest of one of the workload's ReplicaSets. The
// command is for the exec runtime (busybox in the compose image); the
// fake runtime ignores it.
func (w *workload) replicaSet(name string, replicas int32) *kplanev1.Object {
	l := map[string]string{labelApp: name, labelChaos: "true"}
	return kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: w.ns, Labels: l},
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec: &kplanev1.PodSpec{
					Containers:                    []*kplanev1.Container{{Name: "sleep", Image: "busybox", Command: []string{"sleep", "100000"}}},
					TerminationGracePeriodSeconds: proto.Int64(1),
				},
			},
		},
	})
}

func (w *workload) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.callLimit)
}

// Setup creates the namespace and the ReplicaSets; it retries until the
// cluster answers, since nothing has been killed yet.
func (w *workload) Setup(ctx context.Context) error {
	ns := kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: w.ns, Labels: map[string]string{labelChaos: "true"}}})
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := w.api.Create(ctx, &kplanev1.CreateRequest{Object: ns})
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("create namespace %s: %w", w.ns, err)
	}
	for _, rs := range w.sets {
		rs.replicas = 1 + w.rng.Int32N(w.maxRep)
		obj := w.replicaSet(rs.name, rs.replicas)
		var resp *kplanev1.CreateResponse
		if err := retry(ctx, func(ctx context.Context) error {
			var err error
			resp, err = w.api.Create(ctx, &kplanev1.CreateRequest{Object: obj})
			return err
		}); err != nil {
			return fmt.Errorf("create %s: %w", rs.name, err)
		}
		rs.uid, rs.exists = resp.GetObject().Meta().GetUid(), true
		w.ledger.Ack(w.rsKey(rs.name), state{exists: true, uid: rs.uid, replicas: rs.replicas})
		// A Service over the set's pods: endpointsctl must keep its
		// Endpoints equal to them through the kills.
		svc := w.service(rs.name)
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := w.api.Create(ctx, &kplanev1.CreateRequest{Object: svc})
			if status.Code(err) == codes.AlreadyExists {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("create service %s: %w", rs.name, err)
		}
	}
	if err := w.setupStorage(ctx); err != nil {
		return err
	}
	if err := w.setupDeployments(ctx); err != nil {
		return err
	}
	return w.setupSets(ctx)
}

// service is the manifest of the Service over one ReplicaSet's pods.
func (w *workload) service(name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{labelChaos: "true"}},
		Spec: &kplanev1.ServiceSpec{
			Selector: map[string]string{labelApp: name, labelChaos: "true"},
			Ports:    []*kplanev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromInt32(8080)}},
		},
	})
}

func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *workload) rsKey(name string) string { return ledgerKey("ReplicaSet", w.ns, name) }

// Run acts until ctx ends.
func (w *workload) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rs := w.sets[w.rng.IntN(len(w.sets))]
		if rs.uid == "" {
			w.resolve(ctx, rs)
			continue
		}
		switch n := w.rng.IntN(100); {
		case n < 45:
			w.scale(ctx, rs)
		case n < 70:
			w.deletePod(ctx, rs)
		case n < 75:
			w.cycle(ctx, rs)
		case n < 80:
			w.jobStep(ctx)
		case n < 86:
			w.deployStep(ctx)
		case n < 91:
			w.setStep(ctx)
		default:
			w.ledgerSecret(ctx)
		}
	}
}

// resolve reads a ReplicaSet whose last write had an unknown outcome and
// makes it exist again when it does not.
func (w *workload) resolve(ctx context.Context, rs *rsState) {
	cctx, cancel := w.call(ctx)
	defer cancel()
	resp, err := w.api.Get(cctx, &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: w.ns, Name: rs.name})
	switch {
	case err == nil:
		o := resp.GetObject()
		rs.uid, rs.exists, rs.replicas = o.Meta().GetUid(), true, o.GetReplicaSet().GetSpec().GetReplicas()
		w.ledger.Observe(w.rsKey(rs.name), state{exists: true, uid: rs.uid, replicas: rs.replicas})
	case status.Code(err) == codes.NotFound:
		w.ledger.Observe(w.rsKey(rs.name), absent())
		rs.exists = false
		w.create(ctx, rs)
	default:
		w.failures.Add(1) // still unknown; try again later
	}
}

func (w *workload) create(ctx context.Context, rs *rsState) {
	replicas := w.rng.Int32N(w.maxRep + 1)
	cctx, cancel := w.call(ctx)
	defer cancel()
	resp, err := w.api.Create(cctx, &kplanev1.CreateRequest{Object: w.replicaSet(rs.name, replicas)})
	w.writes.Add(1)
	if err != nil {
		w.failures.Add(1)
		if status.Code(err) == codes.AlreadyExists {
			rs.uid = "" // someone's (an unknown earlier create's) object: read it
			return
		}
		w.ledger.Unknown(w.rsKey(rs.name), state{exists: true, replicas: replicas})
		rs.uid = ""
		return
	}
	rs.uid, rs.exists, rs.replicas = resp.GetObject().Meta().GetUid(), true, replicas
	w.ledger.Ack(w.rsKey(rs.name), state{exists: true, uid: rs.uid, replicas: replicas})
}

// scale sets spec.replicas with a compare-and-swap update.
func (w *workload) scale(ctx context.Context, rs *rsState) {
	replicas := w.rng.Int32N(w.maxRep + 1)
	cctx, cancel := w.call(ctx)
	defer cancel()
	resp, err := w.api.Get(cctx, &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: w.ns, Name: rs.name})
	if err != nil {
		w.failures.Add(1)
		if status.Code(err) == codes.NotFound {
			rs.uid = ""
		}
		return
	}
	o := resp.GetObject()
	if o.Meta().GetUid() != rs.uid {
		rs.uid = "" // replaced behind our back: resolve
		return
	}
	o.GetReplicaSet().Spec.Replicas = proto.Int32(replicas)
	_, err = w.api.Update(cctx, &kplanev1.UpdateRequest{Object: o})
	w.writes.Add(1)
	w.scales.Add(1)
	switch {
	case err == nil:
		rs.replicas = replicas
		w.ledger.Ack(w.rsKey(rs.name), state{exists: true, uid: rs.uid, replicas: replicas})
	case status.Code(err) == codes.Aborted:
		// A conflict is a definite "not written".
		w.failures.Add(1)
	default:
		w.failures.Add(1)
		w.ledger.Unknown(w.rsKey(rs.name), state{exists: true, uid: rs.uid, replicas: replicas})
	}
}

// deletePod deletes one pod of the ReplicaSet, as a user or an eviction
// would; the ReplicaSet must replace it.
func (w *workload) deletePod(ctx context.Context, rs *rsState) {
	cctx, cancel := w.call(ctx)
	defer cancel()
	resp, err := w.api.List(cctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: w.ns, LabelSelector: labelApp + "=" + rs.name})
	if err != nil {
		w.failures.Add(1)
		return
	}
	var live []*kplanev1.Object
	for _, p := range resp.GetItems() {
		if p.Meta().GetDeletionTimestamp() == nil {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	p := live[w.rng.IntN(len(live))]
	m := p.Meta()
	_, err = w.api.Delete(cctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: w.ns, Name: m.GetName(),
		Preconditions: &kplanev1.Preconditions{Uid: m.GetUid()}})
	w.writes.Add(1)
	w.podDels.Add(1)
	key := ledgerKey("Pod", w.ns, m.GetName())
	switch {
	case err == nil:
		w.ledger.Ack(key, absent())
	case status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition:
		w.failures.Add(1)
	default:
		w.failures.Add(1)
		// Either still there (owned by the ReplicaSet, checked by the
		// pod invariants) or gone: nothing to hold against the store.
	}
}

// cycle deletes the ReplicaSet (its pods go with it, through gcctl) and
// creates it again under a new uid.
func (w *workload) cycle(ctx context.Context, rs *rsState) {
	w.rsCycles.Add(1)
	cctx, cancel := w.call(ctx)
	_, err := w.api.Delete(cctx, &kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: w.ns, Name: rs.name,
		Preconditions: &kplanev1.Preconditions{Uid: rs.uid}, PropagationPolicy: "Background"})
	cancel()
	w.writes.Add(1)
	switch {
	case err == nil:
		w.ledger.Ack(w.rsKey(rs.name), absent())
		rs.exists = false
		w.create(ctx, rs)
	case status.Code(err) == codes.NotFound, status.Code(err) == codes.FailedPrecondition, status.Code(err) == codes.Aborted:
		w.failures.Add(1)
		rs.uid = ""
	default:
		w.failures.Add(1)
		w.ledger.Unknown(w.rsKey(rs.name), absent())
		rs.uid = ""
	}
}

// ledgerSecret creates a Secret with a payload, or deletes an older one.
func (w *workload) ledgerSecret(ctx context.Context) {
	cctx, cancel := w.call(ctx)
	defer cancel()
	if len(w.secrets) > 20 && w.rng.IntN(3) == 0 {
		i := w.rng.IntN(len(w.secrets))
		name := w.secrets[i]
		w.secrets = append(w.secrets[:i], w.secrets[i+1:]...)
		_, err := w.api.Delete(cctx, &kplanev1.DeleteRequest{Kind: "Secret", Namespace: w.ns, Name: name})
		w.writes.Add(1)
		key := ledgerKey("Secret", w.ns, name)
		switch {
		case err == nil, status.Code(err) == codes.NotFound:
			// NotFound: an unknown create never happened, or an
			// unknown delete did; absent either way.
			w.ledger.Ack(key, absent())
		default:
			w.failures.Add(1)
			w.ledger.Unknown(key, absent())
		}
		return
	}
	w.nextSeq++
	name := fmt.Sprintf("ledger-%05d", w.nextSeq)
	data := fmt.Sprintf("seq=%d rand=%d", w.nextSeq, w.rng.Uint32())
	obj := kplanev1.MustWrap(&kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{labelChaos: "true"}},
		Data:     map[string][]byte{"payload": []byte(data)},
	})
	resp, err := w.api.Create(cctx, &kplanev1.CreateRequest{Object: obj})
	w.writes.Add(1)
	w.secrets = append(w.secrets, name)
	key := ledgerKey("Secret", w.ns, name)
	if err != nil {
		w.failures.Add(1)
		w.ledger.Unknown(key, state{exists: true, replicas: -1, data: data})
		return
	}
	w.ledger.Ack(key, state{exists: true, uid: resp.GetObject().Meta().GetUid(), replicas: -1, data: data})
}

// Settle resolves every ReplicaSet whose last write had an unknown
// outcome, so that the final check knows every uid.
func (w *workload) Settle(ctx context.Context) error {
	for _, rs := range w.sets {
		for rs.uid == "" {
			if ctx.Err() != nil {
				return errors.New("settle the workload: " + ctx.Err().Error())
			}
			w.resolve(ctx, rs)
			if rs.uid == "" {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return nil
}
