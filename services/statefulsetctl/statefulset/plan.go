// Package statefulset is statefulsetctl's control loop. A StatefulSet of
// N replicas owns the pods <set>-0 .. <set>-(N-1); each ordinal is an
// identity with a stable name, hostname and claims (<template>-<set>-<i>)
// that outlive its pods. This file holds the decisions, as pure
// functions; controller.go reads the caches and writes.
package statefulset

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/rollout"
)

const (
	kindStatefulSet        = "StatefulSet"
	kindControllerRevision = "ControllerRevision"
	kindPVC                = "PersistentVolumeClaim"
)

// PodName is the name of the pod with ordinal i.
func PodName(set string, i int32) string { return set + "-" + strconv.Itoa(int(i)) }

// ClaimName is the claim of template tmpl for the pod with ordinal i.
func ClaimName(tmpl, set string, i int32) string { return tmpl + "-" + PodName(set, i) }

// Ordinal parses the ordinal of a pod named <set>-<i>; false for any
// other name (a foreign pod the selector matches, or a name with a
// leading zero or sign, which no ordinal produces).
func Ordinal(set, pod string) (int32, bool) {
	s, ok := strings.CutPrefix(pod, set+"-")
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') || strings.ContainsAny(s, "+-") {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}

// ClaimOrdinal parses a claim name <tmpl>-<set>-<i> for one of the set's
// templates.
func ClaimOrdinal(ss *kplanev1.StatefulSet, claim string) (int32, bool) {
	for _, t := range ss.GetSpec().GetVolumeClaimTemplates() {
		if rest, ok := strings.CutPrefix(claim, t.GetMetadata().GetName()+"-"); ok {
			if i, ok := Ordinal(ss.GetMetadata().GetName(), rest); ok {
				return i, true
			}
		}
	}
	return 0, false
}

// Bounds are a StatefulSet's spec, resolved.
type Bounds struct {
	Replicas int32
	Ordered  bool
	OnDelete bool
	// Partition: RollingUpdate replaces only ordinals >= Partition.
	Partition int32
	// MaxUnavailable: at most this many of the ordinals in [0, Replicas)
	// may be without an available pod while updating (at least 1).
	MaxUnavailable int32
	MinReady       time.Duration
}

// BoundsOf resolves the spec; an unparsable maxUnavailable is an error.
func BoundsOf(ss *kplanev1.StatefulSet) (Bounds, error) {
	s := ss.GetSpec()
	b := Bounds{
		Replicas: s.GetReplicas(), Ordered: s.GetPodManagementPolicy() != kplanev1.PodManagementParallel,
		OnDelete: s.GetUpdateStrategy().GetType() == kplanev1.UpdateStrategyOnDelete,
		MinReady: time.Duration(s.GetMinReadySeconds()) * time.Second, MaxUnavailable: 1,
	}
	if s.Replicas == nil {
		b.Replicas = 1
	}
	if ru := s.GetUpdateStrategy().GetRollingUpdate(); ru != nil {
		b.Partition = ru.GetPartition()
		if ru.MaxUnavailable != nil {
			v, err := rollout.Scaled(ru.MaxUnavailable, b.Replicas, false)
			if err != nil {
				return b, fmt.Errorf("spec.updateStrategy.rollingUpdate.maxUnavailable: %w", err)
			}
			b.MaxUnavailable = max(v, 1)
		}
	}
	return b, nil
}

// Plan is what one reconcile does to the pods.
type Plan struct {
	// Create are the ordinals to create (claims first, then the pod).
	Create []int32
	// Delete are the pods to delete: failed ones (to be recreated),
	// condemned ones (ordinal >= replicas), and rolling-update victims.
	Delete []*kplanev1.Pod
	// Waiting says why the plan stopped early ("" when it did not).
	Waiting string
	// Recheck is when a pod becomes available (minReadySeconds), 0 for never.
	Recheck time.Duration
}

// Revision is the ControllerRevision name a pod was made from.
func Revision(pod *kplanev1.Pod) string {
	return pod.GetMetadata().GetLabels()[kplanev1.LabelControllerRevisionHash]
}

func terminating(p *kplanev1.Pod) bool { return p.GetMetadata().GetDeletionTimestamp() != nil }

// runningReady is OrderedReady's test for a predecessor: Running and Ready.
func runningReady(p *kplanev1.Pod) bool {
	return p.GetStatus().GetPhase() == kplanev1.PodRunning && apiutil.IsPodReady(p)
}

// Decide plans one step for a set with the given pods, by ordinal
// (pods[i] is <set>-i, any ordinal). updateRev is the revision of the
// set's current template. The rules, as Kubernetes' StatefulSet
// controller:
//   - a missing ordinal below replicas is created; a failed pod deleted
//     (its successor under the same name follows once it is gone);
//   - OrderedReady creates 0..N-1 in order, each only after every lower
//     ordinal is Running and Ready, and stops at the first that is not;
//     Parallel does everything at once;
//   - condemned pods (ordinal >= replicas) go highest first, one at a
//     time for OrderedReady;
//   - RollingUpdate then replaces pods not at updateRev, highest ordinal
//     first, down to the partition, keeping at most maxUnavailable of
//     the ordinals below replicas unavailable; OnDelete never replaces.
//
// A pod is never created while an object of its name exists (a
// terminating one included): the apiserver's one-name rule and this
// wait are what keep one identity to one running pod.
func Decide(b Bounds, pods map[int32]*kplanev1.Pod, updateRev string, now time.Time) Plan {
	var p Plan
	ok := func(pod *kplanev1.Pod) bool {
		avail, wait := rollout.PodAvailable(pod, b.MinReady, now)
		if wait > 0 && (p.Recheck == 0 || wait < p.Recheck) {
			p.Recheck = wait
		}
		return avail
	}
	for i := range b.Replicas {
		pod := pods[i]
		switch {
		case pod == nil:
			p.Create = append(p.Create, i)
			if b.Ordered {
				p.Waiting = fmt.Sprintf("creating %d, waits for it to be Running and Ready", i)
				return p
			}
		case terminating(pod):
			if b.Ordered {
				p.Waiting = fmt.Sprintf("pod %s is terminating", pod.GetMetadata().GetName())
				return p
			}
		case apiutil.IsPodTerminal(pod):
			p.Delete = append(p.Delete, pod)
			if b.Ordered {
				p.Waiting = fmt.Sprintf("pod %s failed, recreating", pod.GetMetadata().GetName())
				return p
			}
		case b.Ordered && (!runningReady(pod) || !ok(pod)):
			p.Waiting = fmt.Sprintf("pod %s is not Running and Ready", pod.GetMetadata().GetName())
			return p
		}
	}

	var condemned []*kplanev1.Pod
	for i, pod := range pods {
		if i >= b.Replicas {
			condemned = append(condemned, pod)
		}
	}
	slices.SortFunc(condemned, func(a, c *kplanev1.Pod) int { return ordinalOf(c) - ordinalOf(a) })
	for _, pod := range condemned {
		if terminating(pod) {
			if b.Ordered {
				p.Waiting = fmt.Sprintf("condemned pod %s is terminating", pod.GetMetadata().GetName())
				return p
			}
			continue
		}
		p.Delete = append(p.Delete, pod)
		if b.Ordered {
			p.Waiting = fmt.Sprintf("scaling down: deleting %s", pod.GetMetadata().GetName())
			return p
		}
	}

	if b.OnDelete {
		return p
	}
	planned := map[string]bool{}
	for _, d := range p.Delete {
		planned[d.GetMetadata().GetName()] = true
	}
	unavailable := int32(0)
	for i := range b.Replicas {
		pod := pods[i]
		if pod == nil || terminating(pod) || planned[pod.GetMetadata().GetName()] || !runningReady(pod) || !ok(pod) {
			unavailable++
		}
	}
	budget := b.MaxUnavailable - unavailable
	for i := b.Replicas - 1; i >= b.Partition && i >= 0; i-- {
		pod := pods[i]
		if pod == nil || terminating(pod) || planned[pod.GetMetadata().GetName()] || Revision(pod) == updateRev {
			continue
		}
		if budget <= 0 {
			p.Waiting = fmt.Sprintf("rolling update: %d unavailable, maxUnavailable %d", unavailable, b.MaxUnavailable)
			break
		}
		p.Delete = append(p.Delete, pod)
		budget--
	}
	return p
}

func ordinalOf(p *kplanev1.Pod) int {
	s := p.GetMetadata().GetLabels()[kplanev1.LabelPodIndex]
	n, err := strconv.Atoi(s)
	if err != nil {
		// Adopted pods may lack the label; the name's suffix is the ordinal.
		name := p.GetMetadata().GetName()
		n, _ = strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	}
	return n
}

// FromCurrent reports whether ordinal i is (re)created from the current
// revision rather than the update revision: below the partition of a
// RollingUpdate, as in Kubernetes, so a partition holds those ordinals
// at the old template even when their pods are deleted. OnDelete and the
// ordinals the update covers get the update revision.
func FromCurrent(ss *kplanev1.StatefulSet, i int32) bool {
	us := ss.GetSpec().GetUpdateStrategy()
	return us.GetType() != kplanev1.UpdateStrategyOnDelete && i < us.GetRollingUpdate().GetPartition()
}

// Status is the set's observed state from its pods. currentRev and
// updateRev are the revisions in use; the update is complete (the
// current revision becomes the update revision) when every one of the
// replicas runs updateRev and is Ready.
func Status(ss *kplanev1.StatefulSet, b Bounds, pods map[int32]*kplanev1.Pod, currentRev, updateRev string, collision *int32, now time.Time) *kplanev1.StatefulSetStatus {
	st := &kplanev1.StatefulSetStatus{
		ObservedGeneration: ss.GetMetadata().GetGeneration(),
		CurrentRevision:    currentRev, UpdateRevision: updateRev, CollisionCount: collision,
		Conditions: ss.GetStatus().GetConditions(),
	}
	for _, pod := range pods {
		st.Replicas++
		if runningReady(pod) && !terminating(pod) {
			st.ReadyReplicas++
			if avail, _ := rollout.PodAvailable(pod, b.MinReady, now); avail {
				st.AvailableReplicas++
			}
		}
		if Revision(pod) == currentRev {
			st.CurrentReplicas++
		}
		if Revision(pod) == updateRev {
			st.UpdatedReplicas++
		}
	}
	if st.UpdatedReplicas == b.Replicas && st.ReadyReplicas == b.Replicas && st.Replicas == b.Replicas {
		st.CurrentRevision = updateRev
		st.CurrentReplicas = st.UpdatedReplicas
	}
	return st
}

// NewPod is the pod for ordinal i from template t (the template of the
// revision rev): its stable name and labels, its hostname under the
// governing Service, and each claim template's volume pointed at the
// ordinal's own claim.
func NewPod(ss *kplanev1.StatefulSet, t *kplanev1.PodTemplateSpec, rev string, i int32) *kplanev1.Pod {
	m := ss.GetMetadata()
	name := PodName(m.GetName(), i)
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{
			Name: name, Namespace: m.GetNamespace(),
			Labels:      map[string]string{},
			Annotations: map[string]string{},
			OwnerReferences: []*kplanev1.OwnerReference{{
				ApiVersion: kplanev1.APIVersion(kindStatefulSet), Kind: kindStatefulSet, Name: m.GetName(), Uid: m.GetUid(),
				Controller: true, BlockOwnerDeletion: true,
			}},
		},
		Spec: clonePodSpec(t.GetSpec()),
	}
	for k, v := range t.GetMetadata().GetLabels() {
		pod.Metadata.Labels[k] = v
	}
	for k, v := range t.GetMetadata().GetAnnotations() {
		pod.Metadata.Annotations[k] = v
	}
	if len(pod.Metadata.Annotations) == 0 {
		pod.Metadata.Annotations = nil
	}
	SetIdentityLabels(pod, i)
	pod.Metadata.Labels[kplanev1.LabelControllerRevisionHash] = rev
	pod.Spec.Hostname = name
	pod.Spec.Subdomain = ss.GetSpec().GetServiceName()
	for _, ct := range ss.GetSpec().GetVolumeClaimTemplates() {
		tn := ct.GetMetadata().GetName()
		src := &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(tn, m.GetName(), i)}
		replaced := false
		for _, v := range pod.Spec.Volumes {
			if v.GetName() == tn {
				*v = kplanev1.Volume{Name: tn, PersistentVolumeClaim: src}
				replaced = true
			}
		}
		if !replaced {
			pod.Spec.Volumes = append(pod.Spec.Volumes, &kplanev1.Volume{Name: tn, PersistentVolumeClaim: src})
		}
	}
	return pod
}

// IdentityLabelsMissing reports whether pod (ordinal i) lacks the
// pod-name or pod-index label of its identity.
func IdentityLabelsMissing(pod *kplanev1.Pod, i int32) bool {
	l := pod.GetMetadata().GetLabels()
	return l[kplanev1.LabelStatefulSetPodName] != pod.GetMetadata().GetName() || l[kplanev1.LabelPodIndex] != strconv.Itoa(int(i))
}

// SetIdentityLabels sets pod's pod-name and pod-index labels.
func SetIdentityLabels(pod *kplanev1.Pod, i int32) {
	if pod.Metadata.Labels == nil {
		pod.Metadata.Labels = map[string]string{}
	}
	pod.Metadata.Labels[kplanev1.LabelStatefulSetPodName] = pod.Metadata.Name
	pod.Metadata.Labels[kplanev1.LabelPodIndex] = strconv.Itoa(int(i))
}

// NewClaim is ordinal i's claim from template ct: the template's spec,
// the set's selector labels (so the claims of a set can be listed), and,
// with whenDeleted Delete, an owner reference to the set so the garbage
// collector removes the claim with it.
func NewClaim(ss *kplanev1.StatefulSet, ct *kplanev1.PersistentVolumeClaim, i int32) *kplanev1.PersistentVolumeClaim {
	m := ss.GetMetadata()
	c := &kplanev1.PersistentVolumeClaim{
		Metadata: &kplanev1.ObjectMeta{
			Name: ClaimName(ct.GetMetadata().GetName(), m.GetName(), i), Namespace: m.GetNamespace(),
			Labels: map[string]string{}, Annotations: ct.GetMetadata().GetAnnotations(),
		},
		Spec: cloneClaimSpec(ct.GetSpec()),
	}
	for k, v := range ct.GetMetadata().GetLabels() {
		c.Metadata.Labels[k] = v
	}
	for k, v := range ss.GetSpec().GetSelector().GetMatchLabels() {
		c.Metadata.Labels[k] = v
	}
	if ClaimOwnedBySet(ss) {
		c.Metadata.OwnerReferences = []*kplanev1.OwnerReference{SetRef(ss)}
	}
	return c
}

// ClaimOwnedBySet reports whether the set's claims carry an owner
// reference to it (persistentVolumeClaimRetentionPolicy.whenDeleted Delete).
func ClaimOwnedBySet(ss *kplanev1.StatefulSet) bool {
	return ss.GetSpec().GetPersistentVolumeClaimRetentionPolicy().GetWhenDeleted() == kplanev1.RetentionPolicyDelete
}

// SetRef is the non-controller owner reference a claim gets to its set.
func SetRef(ss *kplanev1.StatefulSet) *kplanev1.OwnerReference {
	m := ss.GetMetadata()
	return &kplanev1.OwnerReference{ApiVersion: kplanev1.APIVersion(kindStatefulSet), Kind: kindStatefulSet, Name: m.GetName(), Uid: m.GetUid()}
}

func clonePodSpec(s *kplanev1.PodSpec) *kplanev1.PodSpec {
	if s == nil {
		return &kplanev1.PodSpec{}
	}
	return proto.Clone(s).(*kplanev1.PodSpec)
}

func cloneClaimSpec(s *kplanev1.PersistentVolumeClaimSpec) *kplanev1.PersistentVolumeClaimSpec {
	if s == nil {
		return &kplanev1.PersistentVolumeClaimSpec{}
	}
	return proto.Clone(s).(*kplanev1.PersistentVolumeClaimSpec)
}
