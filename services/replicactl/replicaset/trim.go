package replicaset

import (
	"github.com/kplane/kplane/pkg/intern"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// trimPod is the Pod informer's transform when replicactl runs as a
// binary of its own (informer.Factory.ForKindTrimmed): a set of 100,000
// pods is cached whole at 3-4 KB apiece, most of replicactl's memory, and
// the loop reads few of their fields. It keeps:
//
//   - metadata.name, namespace, uid, resourceVersion: the pod's identity
//     (cache keys, expectations, the uid precondition of a deletion);
//   - metadata.labels: the selector match, adoption and release, and
//     fullyLabeledReplicas;
//   - metadata.ownerReferences: the controller reference, and the owner
//     and orphan indexes ClaimCandidates reads;
//   - metadata.annotations' pod-deletion-cost only: victim ranking;
//   - metadata.creationTimestamp, deletionTimestamp: ranking, and
//     whether a pod still counts;
//   - spec.nodeName: ranking (unscheduled first, crowded nodes first);
//   - status.phase: whether a pod counts, and ranking;
//   - status.conditions' Ready only (status and transition time): ready
//     and available replicas, ranking;
//   - status.containerStatuses' restartCount only: ranking.
//
// Everything else goes (the spec's containers and volumes, the other
// conditions, IPs, managedFields). Adoption and release, the only writes
// of a pod, read it afresh first (see claim).
func trimPod(o *kplanev1.Object) *kplanev1.Object {
	p := o.GetPod()
	if p == nil {
		return o
	}
	// What a set's pods share (namespace, labels, owner, node, phase,
	// condition) is interned: one copy for all of them.
	md := p.GetMetadata()
	meta := &kplanev1.ObjectMeta{
		Name: md.GetName(), Namespace: intern.String(md.GetNamespace()), Uid: md.GetUid(), ResourceVersion: md.GetResourceVersion(),
		Labels: intern.Map(md.GetLabels()), CreationTimestamp: md.GetCreationTimestamp(), DeletionTimestamp: md.GetDeletionTimestamp(),
	}
	for _, ref := range md.GetOwnerReferences() {
		meta.OwnerReferences = append(meta.OwnerReferences, &kplanev1.OwnerReference{
			ApiVersion: intern.String(ref.GetApiVersion()), Kind: intern.String(ref.GetKind()), Name: intern.String(ref.GetName()),
			Uid: intern.String(ref.GetUid()), Controller: ref.GetController(), BlockOwnerDeletion: ref.GetBlockOwnerDeletion(),
		})
	}
	if cost, ok := md.GetAnnotations()[kplanev1.AnnotationPodDeletionCost]; ok {
		meta.Annotations = intern.Map(map[string]string{kplanev1.AnnotationPodDeletionCost: cost})
	}
	trimmed := &kplanev1.Pod{Metadata: meta}
	if n := p.GetSpec().GetNodeName(); n != "" {
		trimmed.Spec = &kplanev1.PodSpec{NodeName: intern.String(n)}
	}
	if st := p.GetStatus(); st != nil {
		kept := &kplanev1.PodStatus{Phase: intern.String(st.GetPhase())}
		for _, c := range st.GetConditions() {
			if c.GetType() == kplanev1.PodReady {
				kept.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: intern.String(c.GetStatus()), LastTransitionTime: c.GetLastTransitionTime()}}
				break
			}
		}
		for _, cs := range st.GetContainerStatuses() {
			if cs.GetRestartCount() > 0 {
				kept.ContainerStatuses = append(kept.ContainerStatuses, &kplanev1.ContainerStatus{RestartCount: cs.GetRestartCount()})
			}
		}
		trimmed.Status = kept
	}
	return kplanev1.MustWrap(trimmed)
}
