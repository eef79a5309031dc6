package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/daemonsetctl/daemonset"
)

// The workload's StatefulSet and DaemonSet, in a namespace of their own
// (<ns>-sets: the ReplicaSet checks own the main one). Through the chaos
// their pods are deleted and the StatefulSet's template is rolled; an
// observer checks at every pod event that no two pod objects ever hold
// one StatefulSet identity, and after convergence every ordinal has its
// Ready pod at the update revision and every node the DaemonSet fits has
// exactly one pod of it (none where it may not run).
const (
	chaosStatefulSet = "chaos-sts"
	chaosDaemonSet   = "chaos-ds"
	stsReplicas      = 3
	labelChaosSet    = "kplane.io/chaos-set"
)

// setsState is the workload's part for StatefulSets and DaemonSets.
type setsState struct {
	ns      string
	podDels atomic.Int64
	rolls   atomic.Int64
	events  atomic.Int64

	mu         sync.Mutex
	identities map[string]string // pod-name label -> uid of the pod object holding it
	violations []string
}

func (w *workload) setsNamespace() string { return setsNamespace(w.ns) }

// setsNamespace is the StatefulSet's and DaemonSet's namespace beside
// the workload's ns.
func setsNamespace(ns string) string { return ns + "-sets" }

func (w *workload) setsTemplate(name string, rev int) *kplanev1.PodTemplateSpec {
	return &kplanev1.PodTemplateSpec{
		Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{labelApp: name, labelChaosSet: name},
			Annotations: map[string]string{annotationChaosRev: strconv.Itoa(rev)}},
		Spec: &kplanev1.PodSpec{TerminationGracePeriodSeconds: proto.Int64(1),
			// The compose nodes' exec runtime has no image entrypoint: a
			// container without a command never starts there.
			Containers: []*kplanev1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "100000"}}}},
	}
}

func (w *workload) setupSets(ctx context.Context) error {
	ns := w.setsNamespace()
	w.setsState = &setsState{ns: ns, identities: map[string]string{}}
	sel := func(name string) *kplanev1.LabelSelector {
		return &kplanev1.LabelSelector{MatchLabels: map[string]string{labelChaosSet: name}}
	}
	objs := []*kplanev1.Object{
		kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: ns, Labels: map[string]string{labelChaos: "true"}}}),
		kplanev1.MustWrap(&kplanev1.StatefulSet{Metadata: &kplanev1.ObjectMeta{Name: chaosStatefulSet, Namespace: ns},
			Spec: &kplanev1.StatefulSetSpec{Replicas: proto.Int32(stsReplicas), ServiceName: chaosStatefulSet,
				Selector: sel(chaosStatefulSet), Template: w.setsTemplate(chaosStatefulSet, 0)}}),
		kplanev1.MustWrap(&kplanev1.DaemonSet{Metadata: &kplanev1.ObjectMeta{Name: chaosDaemonSet, Namespace: ns},
			Spec: &kplanev1.DaemonSetSpec{Selector: sel(chaosDaemonSet), Template: w.setsTemplate(chaosDaemonSet, 0)}}),
	}
	for _, o := range objs {
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := w.api.Create(ctx, &kplanev1.CreateRequest{Object: o})
			if status.Code(err) == codes.AlreadyExists {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("create %s %s: %w", o.KindName(), o.Key(), err)
		}
	}
	return nil
}

// setStep deletes a random pod of either set, or rolls the StatefulSet's
// template (its partition stays 0, so every ordinal is replaced).
func (w *workload) setStep(ctx context.Context) {
	cctx, cancel := w.call(ctx)
	defer cancel()
	s := w.setsState
	if w.rng.IntN(3) == 0 {
		resp, err := w.api.Get(cctx, &kplanev1.GetRequest{Kind: "StatefulSet", Namespace: s.ns, Name: chaosStatefulSet})
		if err != nil {
			return
		}
		o := resp.GetObject()
		t := o.GetStatefulSet().GetSpec().GetTemplate()
		rev, _ := strconv.Atoi(t.GetMetadata().GetAnnotations()[annotationChaosRev])
		o.GetStatefulSet().Spec.Template = w.setsTemplate(chaosStatefulSet, rev+1)
		if _, err := w.api.Update(cctx, &kplanev1.UpdateRequest{Object: o}); err == nil {
			s.rolls.Add(1)
		}
		return
	}
	resp, err := w.api.List(cctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: s.ns})
	if err != nil || len(resp.GetItems()) == 0 {
		return
	}
	p := resp.GetItems()[w.rng.IntN(len(resp.GetItems()))]
	if _, err := w.api.Delete(cctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: s.ns, Name: p.Meta().GetName(),
		Preconditions: &kplanev1.Preconditions{Uid: p.Meta().GetUid()}}); err == nil {
		s.podDels.Add(1)
	}
}

// observeSetPods checks the one-identity rule at every pod event of the
// sets' namespace; after a watch gap it relists and starts over.
func (w *workload) observeSetPods(ctx context.Context) {
	s := w.setsState
	for ctx.Err() == nil {
		stream, err := w.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: s.ns})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		s.mu.Lock()
		s.identities = map[string]string{} // a fresh watch starts with ADDED for every pod
		s.mu.Unlock()
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			p := resp.GetObject().GetPod()
			id := p.GetMetadata().GetLabels()[kplanev1.LabelStatefulSetPodName]
			if p == nil || id == "" {
				continue
			}
			s.events.Add(1)
			uid := p.GetMetadata().GetUid()
			s.mu.Lock()
			switch resp.GetType() {
			case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
				if holder, ok := s.identities[id]; ok && holder != uid {
					s.violations = append(s.violations, fmt.Sprintf("statefulset identity %s held by pods %s and %s at once", id, holder, uid))
				}
				s.identities[id] = uid
			case kplanev1.EventType_EVENT_TYPE_DELETED:
				if s.identities[id] == uid {
					delete(s.identities, id)
				}
			}
			s.mu.Unlock()
		}
	}
}

// checkSets is the convergence invariant of the sets.
func checkSets(ctx context.Context, w *workload, nodes []*kplanev1.Node) []string {
	s := w.setsState
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	items, err := list(ctx, w.api, "Pod", s.ns)
	if err != nil {
		return []string{err.Error()}
	}
	ssObj, err := w.api.Get(ctx, &kplanev1.GetRequest{Kind: "StatefulSet", Namespace: s.ns, Name: chaosStatefulSet})
	if err != nil {
		return []string{fmt.Sprintf("statefulset %s: %v", chaosStatefulSet, err)}
	}
	dsObj, err := w.api.Get(ctx, &kplanev1.GetRequest{Kind: "DaemonSet", Namespace: s.ns, Name: chaosDaemonSet})
	if err != nil {
		return []string{fmt.Sprintf("daemonset %s: %v", chaosDaemonSet, err)}
	}
	st := ssObj.GetObject().GetStatefulSet().GetStatus()
	byName := map[string]*kplanev1.Pod{}
	perNode := map[string]int{}
	for _, o := range items {
		p := o.GetPod()
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			add("pod %s/%s is still terminating", s.ns, p.GetMetadata().GetName())
			continue
		}
		switch p.GetMetadata().GetLabels()[labelChaosSet] {
		case chaosStatefulSet:
			byName[p.GetMetadata().GetName()] = p
		case chaosDaemonSet:
			if p.GetSpec().GetNodeName() == "" {
				add("daemonset %s: pod %s is not bound (scheduler: %v)", chaosDaemonSet, p.GetMetadata().GetName(),
					apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodScheduled).GetMessage())
			}
			perNode[daemonset.TargetNode(p)]++
		}
	}
	if len(byName) != stsReplicas || st.GetReadyReplicas() != stsReplicas || st.GetUpdatedReplicas() != stsReplicas ||
		st.GetCurrentRevision() != st.GetUpdateRevision() {
		add("statefulset %s: %d pods, status %v", chaosStatefulSet, len(byName), st)
	}
	for i := range stsReplicas {
		name := fmt.Sprintf("%s-%d", chaosStatefulSet, i)
		if p := byName[name]; p == nil || p.GetMetadata().GetLabels()[kplanev1.LabelControllerRevisionHash] != st.GetUpdateRevision() {
			add("statefulset %s: ordinal %d has no pod at the update revision", chaosStatefulSet, i)
		}
	}
	tmpl := dsObj.GetObject().GetDaemonSet().GetSpec().GetTemplate().GetSpec()
	names := make([]string, 0, len(nodes))
	fits := map[string][2]bool{}
	for _, n := range nodes {
		run, cont := daemonset.Fits(tmpl, n)
		fits[n.GetMetadata().GetName()] = [2]bool{run, cont}
		names = append(names, n.GetMetadata().GetName())
	}
	sort.Strings(names)
	for _, n := range names {
		f := fits[n]
		switch {
		case f[0] && perNode[n] != 1:
			add("daemonset %s: node %s has %d pods, want 1", chaosDaemonSet, n, perNode[n])
		case !f[1] && perNode[n] != 0:
			add("daemonset %s: node %s may not run it but has %d pods", chaosDaemonSet, n, perNode[n])
		}
		delete(perNode, n)
	}
	for n, k := range perNode {
		add("daemonset %s: %d pods on node %q, which does not exist", chaosDaemonSet, k, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out = append(out, s.violations...)
	if s.events.Load() == 0 {
		add("statefulset %s: no pod event was observed", chaosStatefulSet)
	}
	return out
}

// setsSummary is the report's line on the StatefulSet and DaemonSet.
func (w *workload) setsSummary() string {
	s := w.setsState
	return fmt.Sprintf("statefulset/daemonset: %d pods deleted, %d statefulset rolls, %d identity events checked",
		s.podDels.Load(), s.rolls.Load(), s.events.Load())
}
