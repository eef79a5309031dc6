package replicaset

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Kinds this controller manages. ReplicaSet and ReplicationController share
// one code path; they differ only in how the selector is written.
const (
	kindReplicaSet            = "ReplicaSet"
	kindReplicationController = "ReplicationController"
)

// Reasons of the ReplicaFailure condition and its Events.
const (
	reasonFailedCreate = "FailedCreate"
	reasonFailedDelete = "FailedDelete"
)

// Owner is the part of a ReplicaSet or ReplicationController that the
// reconcile needs, in one shape for both kinds.
type Owner struct {
	// Object is the owner as cached (read-only).
	Object *kplanev1.Object
	// Kind is "ReplicaSet" or "ReplicationController".
	Kind            string
	Meta            *kplanev1.ObjectMeta
	Replicas        int32
	MinReadySeconds int32
	Selector        labels.Selector
	Template        *kplanev1.PodTemplateSpec
	Status          *kplanev1.ReplicaSetStatus
}

// OwnerOf reads a ReplicaSet or ReplicationController. A selector that
// does not parse is an error: the apiserver validates it, so it means a
// client wrote something this controller cannot act on safely.
func OwnerOf(obj *kplanev1.Object) (*Owner, error) {
	o := &Owner{Object: obj, Kind: obj.KindName(), Meta: obj.Meta()}
	switch {
	case obj.GetReplicaSet() != nil:
		rs := obj.GetReplicaSet()
		o.Replicas = replicasOrDefault(rs.GetSpec().Replicas)
		o.MinReadySeconds = rs.GetSpec().GetMinReadySeconds()
		o.Template = rs.GetSpec().GetTemplate()
		o.Status = rs.GetStatus()
		sel, err := labels.FromLabelSelector(rs.GetSpec().GetSelector())
		if err != nil {
			return nil, fmt.Errorf("ReplicaSet %s: spec.selector: %w", obj.Key(), err)
		}
		o.Selector = sel
	case obj.GetReplicationController() != nil:
		rc := obj.GetReplicationController()
		o.Replicas = replicasOrDefault(rc.GetSpec().Replicas)
		o.MinReadySeconds = rc.GetSpec().GetMinReadySeconds()
		o.Template = rc.GetSpec().GetTemplate()
		o.Status = rc.GetStatus()
		sel, err := labels.ValidatedSelectorFromSet(rc.GetSpec().GetSelector())
		if err != nil {
			return nil, fmt.Errorf("ReplicationController %s: spec.selector: %w", obj.Key(), err)
		}
		o.Selector = sel
	default:
		return nil, fmt.Errorf("%s %s is not a ReplicaSet or ReplicationController", obj.KindName(), obj.Key())
	}
	if o.Selector.Empty() {
		// Validation forbids it; if one slips through, adopting every pod
		// of the namespace would be the worst possible reading.
		o.Selector = labels.Nothing()
	}
	return o, nil
}

func replicasOrDefault(r *int32) int32 {
	if r == nil {
		return 1 // the apiserver's default, for objects written before defaulting
	}
	return *r
}

// Key is the work-queue key of the owner: "Kind/namespace/name", since a
// ReplicaSet and a ReplicationController may share a name.
func (o *Owner) Key() string { return ownerKey(o.Kind, o.Meta.GetNamespace(), o.Meta.GetName()) }

// Deleting reports whether the owner is being deleted (finalizers pending):
// it then neither adopts nor creates nor deletes, as in Kubernetes, so
// that an orphaning delete is not undone by re-adoption.
func (o *Owner) Deleting() bool { return o.Meta.GetDeletionTimestamp() != nil }

func ownerKey(kind, namespace, name string) string {
	return kind + "/" + kplanev1.MetaKey(namespace, name)
}

// Plan is what one reconcile does for an owner.
type Plan struct {
	// Adopt are orphans that match the selector; they get a controller
	// reference to the owner.
	Adopt []*kplanev1.Pod
	// Release are pods the owner controls that no longer match; their
	// reference to the owner is removed.
	Release []*kplanev1.Pod
	// Owned are the active pods the owner controls once adoption and
	// release are done; status is computed from them.
	Owned []*kplanev1.Pod
	// Create is the number of pods to create.
	Create int
	// Delete are the pods to delete, the best victims first.
	Delete []*kplanev1.Pod
}

// Decide computes the plan for owner from the pods of its namespace (the
// reconcile passes the pods that match its selector or name it as owner;
// others are ignored anyway). When manage is false (expectations not yet
// met) the plan adopts and releases but neither creates nor deletes.
// burst caps creates and deletes per reconcile, so expectations stay small
// and a failing apiserver is not stormed.
func Decide(owner *Owner, pods []*kplanev1.Pod, manage bool, burst int) Plan {
	p := Plan{Owned: make([]*kplanev1.Pod, 0, len(pods))}
	uid := owner.Meta.GetUid()
	for _, pod := range pods {
		if !apiutil.IsPodActive(pod) {
			// Finished pods are replaced, pods being deleted are already
			// going: neither counts, and neither is worth adopting.
			continue
		}
		ref := controller.ControllerRef(pod.GetMetadata())
		matches := owner.Selector.Matches(pod.GetMetadata().GetLabels())
		switch {
		case ref != nil && ref.GetUid() == uid:
			if matches {
				p.Owned = append(p.Owned, pod)
			} else {
				p.Release = append(p.Release, pod)
			}
		case ref != nil:
			// Controlled by someone else (or by an earlier owner of the
			// same name): not ours to touch.
		case matches && !owner.Deleting():
			p.Adopt = append(p.Adopt, pod)
			p.Owned = append(p.Owned, pod)
		}
	}
	create, deleteN := manageCounts(owner, len(p.Owned), manage, burst)
	p.Create = create
	if deleteN > 0 {
		p.Delete = Victims(p.Owned, deleteN)
	}
	return p
}

// manageCounts is how many pods to create and how many to delete for an
// owner with active owned pods: none unless manage and the owner is not
// being deleted, at most burst either way.
func manageCounts(owner *Owner, active int, manage bool, burst int) (create, deleteN int) {
	if !manage || owner.Deleting() {
		return 0, 0
	}
	if burst <= 0 {
		burst = defaultBurstReplicas
	}
	diff := active - int(owner.Replicas)
	switch {
	case diff < 0:
		return min(-diff, burst), 0
	case diff > 0:
		return 0, min(diff, burst)
	}
	return 0, 0
}

// tallyActivePods is the pod store's tally of active pods by the uid of
// their controller, marked when Ready (tallyActive). With it, a reconcile
// of a set whose pods all match its selector, with nothing to adopt and
// nothing to delete (a set growing or steady, the common case) counts
// its pods without walking them: walking 100,000 pods on every batch of
// creates made replicactl's cost per pod grow with the set.
const tallyActivePods = "replicaset.active"

// tallyActive counts a pod under its controller's uid when it is
// active, marked when it is Ready.
func tallyActive(obj *kplanev1.Object) (string, bool, bool) {
	pod := obj.GetPod()
	ref := controller.ControllerRef(obj.Meta())
	if pod == nil || ref == nil || !apiutil.IsPodActive(pod) {
		return "", false, false
	}
	ready, _ := readyTime(pod)
	return ref.GetUid(), ready, true
}

// DecideCounted is Decide from the pod store's tally (tallyActivePods),
// without walking the owner's pods, together with the counts its status
// reports. ok is false, and the caller walks the pods with Decide and
// CountPods, when the tally cannot say: some owned active pod no longer
// matches the selector (it must be released), an orphan matches it (it
// may be adopted), pods must be deleted (victims are ranked pod by pod),
// or minReadySeconds is set (availability is a time per pod). Plan.Owned
// is left empty.
func DecideCounted(pods *informer.Store, owner *Owner, manage bool, burst int) (Plan, Counts, bool) {
	if owner.MinReadySeconds > 0 {
		return Plan{}, Counts{}, false
	}
	groups, err := pods.Tally(tallyActivePods, owner.Meta.GetUid())
	if err != nil {
		return Plan{}, Counts{}, false
	}
	tmpl := labels.SelectorFromSet(owner.Template.GetMetadata().GetLabels())
	var c Counts
	for _, g := range groups {
		if !owner.Selector.Matches(g.Labels) {
			return Plan{}, Counts{}, false
		}
		c.Replicas += int32(g.Count)
		c.Ready += int32(g.Marked)
		if tmpl.Matches(g.Labels) {
			c.FullyLabeled += int32(g.Count)
		}
	}
	c.Available = c.Ready // no minReadySeconds: ready is available
	if !owner.Deleting() && pods.HasOrphan(owner.Meta.GetNamespace(), owner.Selector) {
		return Plan{}, Counts{}, false
	}
	create, deleteN := manageCounts(owner, int(c.Replicas), manage, burst)
	if deleteN > 0 {
		return Plan{}, Counts{}, false
	}
	return Plan{Create: create}, c, true
}

// Victims returns the n pods to delete first, ranked as Kubernetes does
// (see victimLess).
func Victims(pods []*kplanev1.Pod, n int) []*kplanev1.Pod {
	if n <= 0 {
		return nil
	}
	ranked := rankPods(pods)
	// Ties go by name, so the choice does not depend on the order the
	// pods came in (the informer hands them over unsorted).
	sort.Slice(ranked, func(i, j int) bool {
		a, b := ranked[i], ranked[j]
		if victimLess(a, b) {
			return true
		}
		if victimLess(b, a) {
			return false
		}
		return a.pod.GetMetadata().GetName() < b.pod.GetMetadata().GetName()
	})
	n = min(n, len(ranked))
	out := make([]*kplanev1.Pod, n)
	for i := range n {
		out[i] = ranked[i].pod
	}
	return out
}

type rankedPod struct {
	pod *kplanev1.Pod
	// colocated is how many of the owner's active pods share this pod's
	// node: spreading is kept by removing from crowded nodes first.
	colocated int
}

func rankPods(pods []*kplanev1.Pod) []rankedPod {
	perNode := map[string]int{}
	for _, p := range pods {
		if apiutil.IsPodActive(p) {
			perNode[p.GetSpec().GetNodeName()]++
		}
	}
	out := make([]rankedPod, len(pods))
	for i, p := range pods {
		out[i] = rankedPod{pod: p, colocated: perNode[p.GetSpec().GetNodeName()]}
	}
	return out
}

// victimLess reports whether a should be deleted before b:
//  1. unscheduled before scheduled;
//  2. Pending before Unknown before Running;
//  3. not ready before ready;
//  4. lower pod-deletion-cost annotation first;
//  5. pods on nodes crowded with this owner's pods first;
//  6. ready for less time before ready for longer;
//  7. more container restarts first;
//  8. newer before older (unknown creation time first).
func victimLess(a, b rankedPod) bool {
	pa, pb := a.pod, b.pod
	if sa, sb := pa.GetSpec().GetNodeName() != "", pb.GetSpec().GetNodeName() != ""; sa != sb {
		return !sa
	}
	if oa, ob := phaseOrdinal(pa), phaseOrdinal(pb); oa != ob {
		return oa < ob
	}
	ra, rta := readyTime(pa)
	rb, rtb := readyTime(pb)
	if ra != rb {
		return !ra
	}
	if ca, cb := deletionCost(pa), deletionCost(pb); ca != cb {
		return ca < cb
	}
	if a.colocated != b.colocated {
		return a.colocated > b.colocated
	}
	if ra && rb && !rta.Equal(rtb) {
		return afterOrZero(rta, rtb)
	}
	if xa, xb := maxRestarts(pa), maxRestarts(pb); xa != xb {
		return xa > xb
	}
	ta := pa.GetMetadata().GetCreationTimestamp()
	tb := pb.GetMetadata().GetCreationTimestamp()
	var tta, ttb time.Time
	if ta != nil {
		tta = ta.AsTime()
	}
	if tb != nil {
		ttb = tb.AsTime()
	}
	if !tta.Equal(ttb) {
		return afterOrZero(tta, ttb)
	}
	return false
}

// afterOrZero orders a zero time first, then later times first: a pod we
// know least about, or the most recent one, is the cheapest to lose.
func afterOrZero(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero()
	}
	return a.After(b)
}

func phaseOrdinal(p *kplanev1.Pod) int {
	switch p.GetStatus().GetPhase() {
	case kplanev1.PodPending, "":
		return 0
	case kplanev1.PodUnknown:
		return 1
	case kplanev1.PodRunning:
		return 2
	}
	return 3
}

func deletionCost(p *kplanev1.Pod) int64 {
	v, ok := p.GetMetadata().GetAnnotations()[kplanev1.AnnotationPodDeletionCost]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0 // Kubernetes rejects such values; here they rank as unset
	}
	return n
}

func maxRestarts(p *kplanev1.Pod) int32 {
	var m int32
	for _, cs := range p.GetStatus().GetContainerStatuses() {
		m = max(m, cs.GetRestartCount())
	}
	return m
}

// readyTime reports whether the pod is ready and since when.
func readyTime(p *kplanev1.Pod) (bool, time.Time) {
	c := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodReady)
	if c.GetStatus() != kplanev1.ConditionTrue {
		return false, time.Time{}
	}
	var t time.Time
	if c.GetLastTransitionTime() != nil {
		t = c.GetLastTransitionTime().AsTime()
	}
	return true, t
}

// availableAt reports whether a pod ready since since (readyTime) has
// been ready for minReady at now, and otherwise, for a ready pod, how
// long until it will be.
func availableAt(ready bool, since time.Time, minReady time.Duration, now time.Time) (bool, time.Duration) {
	if !ready {
		return false, 0
	}
	if minReady <= 0 {
		return true, 0
	}
	if since.IsZero() {
		// No transition time recorded: we cannot tell, so count from now
		// rather than guess the pod has long been ready.
		return false, minReady
	}
	if left := since.Add(minReady).Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}

// Counts are what an owner's status says of its pods.
type Counts struct {
	Replicas, FullyLabeled, Ready, Available int32
	// Recheck is, when some ready pods are not yet available because of
	// minReadySeconds, how soon the first of them will be.
	Recheck time.Duration
}

// CountPods counts the owner's owned active pods for its status.
func CountPods(owner *Owner, owned []*kplanev1.Pod, now time.Time) Counts {
	c := Counts{Replicas: int32(len(owned))}
	// The template's labels as a selector, built once (as Kubernetes
	// counts fullyLabeledReplicas): ranging over the map for each of
	// 100,000 pods was most of a large set's reconcile.
	tmpl := labels.SelectorFromSet(owner.Template.GetMetadata().GetLabels())
	minReady := time.Duration(owner.MinReadySeconds) * time.Second
	for _, p := range owned {
		if tmpl.Matches(p.GetMetadata().GetLabels()) {
			c.FullyLabeled++
		}
		ready, since := readyTime(p)
		if ready {
			c.Ready++
		}
		ok, left := availableAt(ready, since, minReady, now)
		if ok {
			c.Available++
		} else if left > 0 && (c.Recheck == 0 || left < c.Recheck) {
			c.Recheck = left
		}
	}
	return c
}

// ComputeStatus returns the owner's status for its owned active pods and
// the outcome of creating or deleting, and how soon to look again
// (Counts.Recheck): CountPods, then StatusFor.
func ComputeStatus(owner *Owner, owned []*kplanev1.Pod, manageErr error, reason string, now time.Time) (*kplanev1.ReplicaSetStatus, time.Duration) {
	c := CountPods(owner, owned, now)
	return StatusFor(owner, c, manageErr, reason, now), c.Recheck
}

// StatusFor returns the owner's status for counts c of its pods and the
// outcome of creating or deleting (manageErr with reason
// FailedCreate/FailedDelete, or nil). An unchanged condition keeps its
// transition time, so an unchanged status compares equal.
func StatusFor(owner *Owner, c Counts, manageErr error, reason string, now time.Time) *kplanev1.ReplicaSetStatus {
	st := &kplanev1.ReplicaSetStatus{
		Replicas:             c.Replicas,
		FullyLabeledReplicas: c.FullyLabeled,
		ReadyReplicas:        c.Ready,
		AvailableReplicas:    c.Available,
		ObservedGeneration:   owner.Meta.GetGeneration(),
	}
	for _, cond := range owner.Status.GetConditions() {
		if cond.GetType() != kplanev1.ReplicaSetReplicaFailure {
			st.Conditions = append(st.Conditions, cond)
		}
	}
	old := apiutil.FindCondition(owner.Status.GetConditions(), kplanev1.ReplicaSetReplicaFailure)
	if manageErr != nil {
		msg := manageErr.Error()
		if old != nil && old.GetStatus() == kplanev1.ConditionTrue && old.GetReason() == reason && old.GetMessage() == msg {
			st.Conditions = append(st.Conditions, old)
		} else {
			st.Conditions = append(st.Conditions, &kplanev1.Condition{
				Type: kplanev1.ReplicaSetReplicaFailure, Status: kplanev1.ConditionTrue, Reason: reason, Message: msg,
				LastTransitionTime: timestamppb.New(now),
			})
		}
	}
	// Without an error the condition is dropped, as Kubernetes does once
	// creating and deleting work again.
	return st
}

// statusEqual compares statuses, treating nil as empty.
func statusEqual(a, b *kplanev1.ReplicaSetStatus) bool {
	if a == nil {
		a = &kplanev1.ReplicaSetStatus{}
	}
	if b == nil {
		b = &kplanev1.ReplicaSetStatus{}
	}
	return proto.Equal(a, b)
}

// NewPod builds a pod from the owner's template, named <owner>-<random> by
// the apiserver and controlled by the owner.
func NewPod(owner *Owner) *kplanev1.Pod {
	t := owner.Template
	meta := &kplanev1.ObjectMeta{
		GenerateName: owner.Meta.GetName() + "-",
		Namespace:    owner.Meta.GetNamespace(),
		Labels:       maps.Clone(t.GetMetadata().GetLabels()),
		Annotations:  maps.Clone(t.GetMetadata().GetAnnotations()),
		Finalizers:   append([]string(nil), t.GetMetadata().GetFinalizers()...),
		OwnerReferences: []*kplanev1.OwnerReference{{
			ApiVersion:         kplanev1.APIVersion(owner.Kind),
			Kind:               owner.Kind,
			Name:               owner.Meta.GetName(),
			Uid:                owner.Meta.GetUid(),
			Controller:         true,
			BlockOwnerDeletion: true,
		}},
	}
	spec := &kplanev1.PodSpec{}
	if t.GetSpec() != nil {
		spec = proto.Clone(t.GetSpec()).(*kplanev1.PodSpec)
	}
	return &kplanev1.Pod{Metadata: meta, Spec: spec}
}

// ownerRef is the controller reference adoption adds.
func ownerRef(owner *Owner) *kplanev1.OwnerReference {
	return &kplanev1.OwnerReference{
		ApiVersion: kplanev1.APIVersion(owner.Kind), Kind: owner.Kind, Name: owner.Meta.GetName(),
		Uid: owner.Meta.GetUid(), Controller: true, BlockOwnerDeletion: true,
	}
}
