package rollout

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The ControllerRevision history of StatefulSets and DaemonSets: each
// template a set has run is snapshotted once, numbered, and the snapshot
// named <set>-<hash> is what pods point at (controller-revision-hash) and
// what a rollback copies back. Pure functions, as the rest of the package.

// EncodeTemplate is a ControllerRevision's data for template t: its
// deterministic protobuf encoding, so equal templates give equal bytes.
func EncodeTemplate(t *kplanev1.PodTemplateSpec) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(t)
	if err != nil {
		// A PodTemplateSpec built from valid protobuf always marshals.
		panic(fmt.Sprintf("rollout: marshal pod template: %v", err))
	}
	return b
}

// DecodeTemplate reads the template a ControllerRevision holds.
func DecodeTemplate(cr *kplanev1.ControllerRevision) (*kplanev1.PodTemplateSpec, error) {
	t := &kplanev1.PodTemplateSpec{}
	if err := proto.Unmarshal(cr.GetData(), t); err != nil {
		return nil, fmt.Errorf("controllerrevision %s: data is not a pod template: %w", cr.GetMetadata().GetName(), err)
	}
	return t, nil
}

// RevisionName is the name of the revision of template t for the set
// named owner: <owner>-<hash>, the hash counted up by collisionCount
// after a collision with a foreign revision of that name.
func RevisionName(owner string, t *kplanev1.PodTemplateSpec, collisionCount *int32) string {
	return owner + "-" + TemplateHash(t, collisionCount)
}

// NewRevision is the ControllerRevision snapshotting t for the set
// (ownerKind apps/v1, controller reference with blockOwnerDeletion, so
// the garbage collector removes the history with the set). It carries
// the template's labels, as Kubernetes' revisions do, so `kubectl get
// controllerrevisions -l app=x` finds a set's history.
func NewRevision(ownerKind string, owner *kplanev1.ObjectMeta, t *kplanev1.PodTemplateSpec, revision int64, collisionCount *int32) *kplanev1.ControllerRevision {
	return &kplanev1.ControllerRevision{
		Metadata: &kplanev1.ObjectMeta{
			Name:      RevisionName(owner.GetName(), t, collisionCount),
			Namespace: owner.GetNamespace(),
			Labels:    maps.Clone(t.GetMetadata().GetLabels()),
			OwnerReferences: []*kplanev1.OwnerReference{{
				ApiVersion: kplanev1.APIVersion(ownerKind), Kind: ownerKind, Name: owner.GetName(), Uid: owner.GetUid(),
				Controller: true, BlockOwnerDeletion: true,
			}},
		},
		Data:     EncodeTemplate(t),
		Revision: revision,
	}
}

// SameTemplate reports whether cr snapshots t.
func SameTemplate(cr *kplanev1.ControllerRevision, t *kplanev1.PodTemplateSpec) bool {
	got, err := DecodeTemplate(cr)
	return err == nil && proto.Equal(got, t)
}

// SortRevisions orders revisions oldest first (by number, then name).
func SortRevisions(revs []*kplanev1.ControllerRevision) {
	slices.SortFunc(revs, func(a, b *kplanev1.ControllerRevision) int {
		if a.GetRevision() != b.GetRevision() {
			if a.GetRevision() < b.GetRevision() {
				return -1
			}
			return 1
		}
		switch an, bn := a.GetMetadata().GetName(), b.GetMetadata().GetName(); {
		case an < bn:
			return -1
		case an > bn:
			return 1
		}
		return 0
	})
}

// MaxRevisionNumber is the highest revision number among revs (0 for none).
func MaxRevisionNumber(revs []*kplanev1.ControllerRevision) int64 {
	var m int64
	for _, r := range revs {
		m = max(m, r.GetRevision())
	}
	return m
}

// StaleRevisions are the revisions to delete to keep at most limit of
// history: the oldest ones first, never a revision named in live (the
// current and update revisions, and any a pod still runs).
func StaleRevisions(revs []*kplanev1.ControllerRevision, live map[string]bool, limit int32) []*kplanev1.ControllerRevision {
	var history []*kplanev1.ControllerRevision
	for _, r := range revs {
		if !live[r.GetMetadata().GetName()] {
			history = append(history, r)
		}
	}
	if int32(len(history)) <= limit {
		return nil
	}
	SortRevisions(history)
	return history[:int32(len(history))-max(limit, 0)]
}
