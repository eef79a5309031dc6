package deployment

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/rollout"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	kindDeployment = "Deployment"
	kindReplicaSet = "ReplicaSet"
)

// Set is one ReplicaSet of a Deployment as the reconcile sees it: the
// newest version this controller knows (its own writes included) and
// what the pod cache shows of its pods.
type Set struct {
	RS *kplanev1.ReplicaSet
	// Pods counts the set's pods that are neither terminating nor
	// terminal; Available those of them available (minReadySeconds);
	// AllPods every pod of the set still present, terminating included.
	Pods, Available, AllPods int32
}

// add counts one of the set's pods; it reports whether the pod is active
// (neither terminating nor terminal).
func (s *Set) add(p *kplanev1.Pod) bool {
	s.AllPods++
	if !apiutil.IsPodActive(p) {
		return false
	}
	s.Pods++
	return true
}

// Replicas is the set's spec.replicas.
func (s Set) Replicas() int32 { return s.RS.GetSpec().GetReplicas() }

// Revision is the set's revision annotation.
func (s Set) Revision() int64 { return rollout.Revision(s.RS.GetMetadata()) }

// occupied is what the set counts towards the surge bound: its desired
// pods, or more while pods it is giving up still exist.
func (s Set) occupied() int32 { return max(s.Replicas(), s.Pods) }

// availableKept is what the set counts towards the availability floor:
// its available pods, but no more than it keeps (replicactl removes the
// unavailable pods first when it scales down).
func (s Set) availableKept() int32 { return min(s.Replicas(), s.Available) }

// settled reports whether replicactl has acted on the set's spec and no
// pod of it remains (Recreate waits for this).
func (s Set) settled() bool {
	st := s.RS.GetStatus()
	return s.Replicas() == 0 && s.AllPods == 0 && st.GetReplicas() == 0 &&
		st.GetObservedGeneration() >= s.RS.GetMetadata().GetGeneration()
}

// SortByRevision orders sets oldest revision first (creation time, then
// name, among equals).
func SortByRevision(sets []Set) {
	sort.SliceStable(sets, func(i, j int) bool {
		ri, rj := sets[i].Revision(), sets[j].Revision()
		if ri != rj {
			return ri < rj
		}
		ti := sets[i].RS.GetMetadata().GetCreationTimestamp().AsTime()
		tj := sets[j].RS.GetMetadata().GetCreationTimestamp().AsTime()
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return sets[i].RS.GetMetadata().GetName() < sets[j].RS.GetMetadata().GetName()
	})
}

// FindNew splits sets into the one running d's template (the oldest such
// when several do) and the others. A set being deleted is never the new
// one (its pods still count, as an old set's).
func FindNew(d *kplanev1.Deployment, sets []Set) (newSet *Set, olds []Set) {
	idx := -1
	for i, s := range sets {
		if s.RS.GetMetadata().GetDeletionTimestamp() == nil && rollout.TemplatesEqual(s.RS.GetSpec().GetTemplate(), d.GetSpec().GetTemplate()) {
			if idx < 0 || s.RS.GetMetadata().GetCreationTimestamp().AsTime().Before(sets[idx].RS.GetMetadata().GetCreationTimestamp().AsTime()) {
				idx = i
			}
		}
	}
	for i, s := range sets {
		if i != idx {
			olds = append(olds, s)
		}
	}
	if idx >= 0 {
		s := sets[idx]
		newSet = &s
	}
	return newSet, olds
}

// Bounds are a Deployment's resolved rolling-update limits.
type Bounds struct {
	Replicas, Surge, Unavailable int32
}

// BoundsOf resolves d's maxSurge and maxUnavailable against its replicas;
// Recreate has neither (surge 0, every pod may go).
func BoundsOf(d *kplanev1.Deployment) (Bounds, error) {
	s := d.GetSpec()
	b := Bounds{Replicas: s.GetReplicas()}
	if s.GetStrategy().GetType() == kplanev1.DeploymentStrategyRecreate {
		b.Unavailable = b.Replicas
		return b, nil
	}
	ru := s.GetStrategy().GetRollingUpdate()
	var err error
	b.Surge, b.Unavailable, err = rollout.Fenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), b.Replicas)
	return b, err
}

// RollingStep is one step of a rolling update from what the caches show:
// the new set's target and each old set's target (same order as olds).
// Scaling up uses room under replicas+surge counted from every set's
// occupied pods; scaling down removes old sets' unavailable pods freely
// and available ones only while replicas-unavailable stay available,
// oldest revision first. Applying both at once stays within the bounds:
// the count for the surge bound does not include the scale-down, the
// availability count does not include the new pods.
func RollingStep(b Bounds, newSet Set, olds []Set) (newTarget int32, oldTargets []int32) {
	var occupied, available int32
	for _, s := range append([]Set{newSet}, olds...) {
		occupied += s.occupied()
		available += s.availableKept()
	}
	newTarget = newSet.Replicas()
	switch {
	case newTarget > b.Replicas:
		newTarget = b.Replicas
	case newTarget < b.Replicas:
		newTarget = min(b.Replicas, newTarget+rollout.MaxScaleUp(b.Replicas, b.Surge, occupied))
	}
	budget := rollout.MaxScaleDown(b.Replicas, b.Unavailable, available)
	oldTargets = make([]int32, len(olds))
	for i, s := range olds {
		r := s.Replicas()
		r -= r - s.availableKept() // unavailable pods cost nothing
		cut := min(budget, r)
		budget -= cut
		oldTargets[i] = r - cut
	}
	return newTarget, oldTargets
}

// Observed reports whether replicactl has acted on the set's current
// size: its status carries the set's generation. A set being deleted
// gets no more pods from replicactl, so it counts as observed.
func (s Set) Observed() bool {
	return s.RS.GetMetadata().GetDeletionTimestamp() != nil ||
		s.RS.GetStatus().GetObservedGeneration() >= s.RS.GetMetadata().GetGeneration()
}

// GuardScaleUps bounds the scale-ups among targets (planned from the
// caches). A scale-up spends the room other sets' pods leave under the
// surge bound, and those pods may be more than the caches show: a set just
// lowered from 4 to 3 can still get the 4th pod replicactl was creating
// for the old size, and the pod cache can lag creates that already
// happened. So while any set is not Observed, every scale-up is held at
// the set's current replicas (the sets' status writes wake the reconcile
// again). Once all are, every create replicactl made for an older size
// has returned, and each scale-up is at most what replan allows from the
// sets recount returns (the same sets, in order, their pods counted by a
// fresh read). Scale-downs pass unchanged; recount is called only when
// something scales up.
func GuardScaleUps(sets []Set, targets []int32, recount func() ([]Set, error), replan func([]Set) []int32) ([]int32, error) {
	if !ScalesUp(sets, targets) {
		return targets, nil
	}
	out := slices.Clone(targets)
	if !AllObserved(sets) {
		for i, s := range sets {
			out[i] = min(out[i], s.Replicas())
		}
		return out, nil
	}
	fresh, err := recount()
	if err != nil {
		return nil, err
	}
	again := replan(fresh)
	for i, s := range sets {
		if out[i] > s.Replicas() {
			out[i] = max(s.Replicas(), min(out[i], again[i]))
		}
	}
	return out, nil
}

// ScalesUp reports whether targets raise any set's replicas.
func ScalesUp(sets []Set, targets []int32) bool {
	for i, s := range sets {
		if targets[i] > s.Replicas() {
			return true
		}
	}
	return false
}

// AllObserved reports whether every set is Observed.
func AllObserved(sets []Set) bool {
	for _, s := range sets {
		if !s.Observed() {
			return false
		}
	}
	return true
}

// stepOf is d's strategy's step: RecreateStep or RollingStep.
func stepOf(d *kplanev1.Deployment) func(Bounds, Set, []Set) (int32, []int32) {
	if d.GetSpec().GetStrategy().GetType() == kplanev1.DeploymentStrategyRecreate {
		return RecreateStep
	}
	return RollingStep
}

// RecreateStep: every old set goes to 0; the new set gets its replicas
// only once no old pod remains.
func RecreateStep(b Bounds, newSet Set, olds []Set) (newTarget int32, oldTargets []int32) {
	oldTargets = make([]int32, len(olds))
	newTarget = newSet.Replicas()
	for _, s := range olds {
		if !s.settled() {
			return newTarget, oldTargets
		}
	}
	return b.Replicas, oldTargets
}

// IsScalingEvent reports whether spec.replicas changed since the active
// sets were last sized: a set with replicas whose desired-replicas
// annotation differs from the Deployment's.
func IsScalingEvent(d *kplanev1.Deployment, sets []Set) bool {
	want := strconv.Itoa(int(d.GetSpec().GetReplicas()))
	for _, s := range sets {
		if s.Replicas() > 0 {
			if v, ok := s.RS.GetMetadata().GetAnnotations()[kplanev1.AnnotationDesiredReplicas]; !ok || v != want {
				return true
			}
		}
	}
	return false
}

// ScaleTargets sizes the active sets for a changed spec.replicas: a single
// active set (or none: the new one) gets replicas; several share the
// change to replicas+surge in proportion to their sizes, so a rollout
// keeps its shape. The result is the target per set, in sets' order.
func ScaleTargets(b Bounds, sets []Set, newIdx int) []int32 {
	out := make([]int32, len(sets))
	var active []int
	for i, s := range sets {
		out[i] = s.Replicas()
		if s.Replicas() > 0 {
			active = append(active, i)
		}
	}
	switch {
	case len(active) == 0:
		if newIdx >= 0 {
			out[newIdx] = b.Replicas
		}
		return out
	case len(active) == 1:
		out[active[0]] = b.Replicas
		return out
	}
	var specSum, occupied int32
	for _, i := range active {
		specSum += sets[i].Replicas()
		occupied += sets[i].occupied()
	}
	allowed := b.Replicas + b.Surge
	delta := allowed - specSum
	if delta > 0 {
		delta = max(0, allowed-occupied) // pods still leaving take room too
	}
	sizes := make([]int32, len(active))
	for k, i := range active {
		sizes[k] = sets[i].Replicas()
	}
	for k, d := range rollout.Proportional(sizes, delta) {
		out[active[k]] += d
	}
	return out
}

// NewReplicaSet is the ReplicaSet running d's template: named
// <deployment>-<hash>, selecting and labelling its pods with the
// pod-template-hash as well, owned by d.
func NewReplicaSet(d *kplanev1.Deployment, hash string, revision int64, replicas int32, b Bounds) *kplanev1.ReplicaSet {
	tmpl := proto.Clone(d.GetSpec().GetTemplate()).(*kplanev1.PodTemplateSpec)
	if tmpl.Metadata == nil {
		tmpl.Metadata = &kplanev1.ObjectMeta{}
	}
	tmpl.Metadata.Labels = withLabel(tmpl.Metadata.Labels, kplanev1.LabelPodTemplateHash, hash)
	sel := proto.Clone(d.GetSpec().GetSelector()).(*kplanev1.LabelSelector)
	sel.MatchLabels = withLabel(sel.MatchLabels, kplanev1.LabelPodTemplateHash, hash)
	meta := d.GetMetadata()
	rs := &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{
			Name:            meta.GetName() + "-" + hash,
			Namespace:       meta.GetNamespace(),
			Labels:          maps.Clone(tmpl.Metadata.Labels),
			Annotations:     map[string]string{},
			OwnerReferences: []*kplanev1.OwnerReference{OwnerRef(d)},
		},
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(replicas), MinReadySeconds: d.GetSpec().GetMinReadySeconds(),
			Selector: sel, Template: tmpl,
		},
	}
	if cause, ok := meta.GetAnnotations()[kplanev1.AnnotationChangeCause]; ok {
		rs.Metadata.Annotations[kplanev1.AnnotationChangeCause] = cause
	}
	rollout.SetRevision(rs.Metadata, revision)
	SetSizeAnnotations(rs.Metadata, b)
	return rs
}

// SetSizeAnnotations records the Deployment's replicas and
// replicas+surge on a set; it reports whether they changed.
func SetSizeAnnotations(m *kplanev1.ObjectMeta, b Bounds) bool {
	want := map[string]string{
		kplanev1.AnnotationDesiredReplicas: strconv.Itoa(int(b.Replicas)),
		kplanev1.AnnotationMaxReplicas:     strconv.Itoa(int(b.Replicas + b.Surge)),
	}
	changed := false
	for k, v := range want {
		if m.Annotations[k] != v {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[k] = v
			changed = true
		}
	}
	return changed
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}

// OwnerRef is the controller reference a Deployment's ReplicaSets carry.
func OwnerRef(d *kplanev1.Deployment) *kplanev1.OwnerReference {
	return &kplanev1.OwnerReference{
		ApiVersion: kplanev1.APIVersion(kindDeployment), Kind: kindDeployment,
		Name: d.GetMetadata().GetName(), Uid: d.GetMetadata().GetUid(),
		Controller: true, BlockOwnerDeletion: true,
	}
}

// HistoryToDelete returns the old sets beyond revisionHistoryLimit,
// oldest first; only sets that are fully scaled down count as history.
func HistoryToDelete(d *kplanev1.Deployment, olds []Set) []Set {
	var dead []Set
	for _, s := range olds {
		if s.settled() && s.RS.GetMetadata().GetDeletionTimestamp() == nil {
			dead = append(dead, s)
		}
	}
	limit := int(d.GetSpec().GetRevisionHistoryLimit())
	if len(dead) <= limit {
		return nil
	}
	SortByRevision(dead)
	return dead[:len(dead)-limit]
}

// Progress says what the reconcile did about the rollout, for the
// Progressing condition.
type Progress struct {
	// Reason is NewReplicaSetCreated, FoundNewReplicaSet or
	// ReplicaSetUpdated when the reconcile moved the rollout, else "".
	Reason string
	// NewName is the new ReplicaSet's name ("" when there is none).
	NewName string
}

// ComputeStatus derives d's status from its sets and what the reconcile
// did, and how soon to look again for the progress deadline (0: no need).
// The Progressing condition's lastUpdateTime moves whenever the rollout
// moves (a write, or the sets' counts changed); a rollout that stands
// still past progressDeadlineSeconds gets Progressing=False with
// ProgressDeadlineExceeded. A complete rollout keeps NewReplicaSetAvailable.
func ComputeStatus(d *kplanev1.Deployment, b Bounds, newSet *Set, sets []Set, p Progress, now time.Time) (*kplanev1.DeploymentStatus, time.Duration) {
	old := d.GetStatus()
	st := &kplanev1.DeploymentStatus{
		ObservedGeneration: d.GetMetadata().GetGeneration(),
		Conditions:         cloneConditions(old.GetConditions()),
	}
	if old.GetCollisionCount() != 0 || (old != nil && old.CollisionCount != nil) {
		st.CollisionCount = proto.Int32(old.GetCollisionCount())
	}
	var oldPods int32
	for _, s := range sets {
		rs := s.RS.GetStatus()
		st.Replicas += rs.GetReplicas()
		st.ReadyReplicas += rs.GetReadyReplicas()
		st.AvailableReplicas += rs.GetAvailableReplicas()
		if newSet == nil || s.RS.GetMetadata().GetUid() != newSet.RS.GetMetadata().GetUid() {
			oldPods += max(rs.GetReplicas(), s.AllPods)
		}
	}
	if newSet != nil {
		st.UpdatedReplicas = newSet.RS.GetStatus().GetReplicas()
	}
	st.UnavailableReplicas = max(0, b.Replicas-st.AvailableReplicas)

	t := timestamppb.New(now.Truncate(time.Second))
	minAvailable := b.Replicas - b.Unavailable
	if st.AvailableReplicas >= minAvailable {
		st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentAvailable, kplanev1.ConditionTrue,
			kplanev1.ReasonMinimumReplicasAvailable, "Deployment has minimum availability.", t, false)
	} else {
		st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentAvailable, kplanev1.ConditionFalse,
			kplanev1.ReasonMinimumReplicasUnavailable, "Deployment does not have minimum availability.", t, false)
	}

	prog := apiutil.FindCondition(st.Conditions, kplanev1.DeploymentProgressing)
	rsName := p.NewName
	complete := newSet != nil && st.UpdatedReplicas == b.Replicas && newSet.Replicas() == b.Replicas &&
		st.AvailableReplicas >= b.Replicas && oldPods == 0 &&
		newSet.RS.GetStatus().GetAvailableReplicas() == b.Replicas
	moved := p.Reason != "" || countsChanged(old, st)
	switch {
	case d.GetSpec().GetPaused():
		st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentProgressing, kplanev1.ConditionUnknown,
			kplanev1.ReasonDeploymentPaused, "Deployment is paused", t, true)
		return st, 0
	case prog.GetReason() == kplanev1.ReasonDeploymentPaused:
		st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentProgressing, kplanev1.ConditionUnknown,
			kplanev1.ReasonDeploymentResumed, "Deployment is resumed", t, true)
	case complete:
		if prog.GetReason() != kplanev1.ReasonNewReplicaSetAvailable || prog.GetStatus() != kplanev1.ConditionTrue {
			st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentProgressing, kplanev1.ConditionTrue,
				kplanev1.ReasonNewReplicaSetAvailable, fmt.Sprintf("ReplicaSet %q has successfully progressed.", rsName), t, true)
		}
		return st, 0
	case moved || prog == nil:
		reason := p.Reason
		if reason == "" {
			reason = kplanev1.ReasonReplicaSetUpdated
		}
		msg := fmt.Sprintf("ReplicaSet %q is progressing.", rsName)
		switch reason {
		case kplanev1.ReasonNewReplicaSetCreated:
			msg = fmt.Sprintf("Created new replica set %q", rsName)
		case kplanev1.ReasonFoundNewReplicaSet:
			msg = fmt.Sprintf("Found new replica set %q", rsName)
		}
		st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentProgressing, kplanev1.ConditionTrue, reason, msg, t, true)
	}
	prog = apiutil.FindCondition(st.Conditions, kplanev1.DeploymentProgressing)
	if prog.GetStatus() == kplanev1.ConditionFalse {
		return st, 0 // already timed out; progress makes it True again
	}
	deadline := time.Duration(d.GetSpec().GetProgressDeadlineSeconds()) * time.Second
	last := prog.GetLastUpdateTime().AsTime()
	if left := last.Add(deadline).Sub(now); left > 0 {
		return st, left
	}
	st.Conditions = setCondition(st.Conditions, kplanev1.DeploymentProgressing, kplanev1.ConditionFalse,
		kplanev1.ReasonProgressDeadlineExceeded, fmt.Sprintf("ReplicaSet %q has timed out progressing.", rsName), t, true)
	return st, 0
}

func countsChanged(a, b *kplanev1.DeploymentStatus) bool {
	return a.GetReplicas() != b.GetReplicas() || a.GetUpdatedReplicas() != b.GetUpdatedReplicas() ||
		a.GetReadyReplicas() != b.GetReadyReplicas() || a.GetAvailableReplicas() != b.GetAvailableReplicas()
}

func cloneConditions(in []*kplanev1.Condition) []*kplanev1.Condition {
	out := make([]*kplanev1.Condition, len(in))
	for i, c := range in {
		out[i] = proto.Clone(c).(*kplanev1.Condition)
	}
	return out
}

// setCondition sets a condition: lastTransitionTime moves only when the
// status changes; lastUpdateTime moves when touch is set or anything
// about the condition changed.
func setCondition(conds []*kplanev1.Condition, typ, status, reason, msg string, now *timestamppb.Timestamp, touch bool) []*kplanev1.Condition {
	cur := apiutil.FindCondition(conds, typ)
	if cur != nil && cur.GetStatus() == status && cur.GetReason() == reason && cur.GetMessage() == msg && !touch {
		return conds
	}
	c := &kplanev1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now}
	if cur != nil && cur.GetStatus() == status {
		c.LastTransitionTime = cur.GetLastTransitionTime()
	}
	for i, x := range conds {
		if x.GetType() == typ {
			conds[i] = c // conds is this reconcile's copy
			return conds
		}
	}
	return append(conds, c)
}

// StatusEqual compares statuses.
func StatusEqual(a, b *kplanev1.DeploymentStatus) bool { return proto.Equal(a, b) }
