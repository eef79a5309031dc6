package core

import (
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/volume"
)

// Volume binding reasons, as Kubernetes' VolumeBinding plugin words them.
const (
	ReasonVolumeNodeAffinity = "node(s) had volume node affinity conflict"
	ReasonNoVolumeToBind     = "node(s) didn't find available persistent volumes to bind"
	ReasonSelectedNode       = "node(s) were not the node selected for the pod's volumes"
	// ReasonUnboundImmediate is a whole-pod reason: the claim waits for
	// pvctl, not for a node.
	ReasonUnboundImmediate = "pod has unbound immediate PersistentVolumeClaims"
)

// PodVolumes is what the volume binding filter knows of a pod's claims,
// resolved from the scheduler's caches before the decision (the filters
// themselves do no lookups).
type PodVolumes struct {
	// Bound are the volumes of the pod's bound claims: each one's node
	// affinity must admit the node.
	Bound []*kplanev1.PersistentVolume
	// Unbound are the pod's WaitForFirstConsumer claims not bound yet.
	Unbound []UnboundClaim
}

// UnboundClaim is a WaitForFirstConsumer claim waiting for its first
// consumer's node.
type UnboundClaim struct {
	Claim *kplanev1.PersistentVolumeClaim
	// Candidates are the static volumes that fit the claim, node aside.
	Candidates []*kplanev1.PersistentVolume
	// CanProvision: the claim's class provisions a volume on any node.
	CanProvision bool
	// SelectedNode is the node an earlier decision chose for the claim
	// (volume.kubernetes.io/selected-node): binding or provisioning is
	// under way there, so only that node fits.
	SelectedNode string
}

// FilterVolumes requires every bound volume's node affinity to admit the
// node, and for each unbound WaitForFirstConsumer claim a volume that
// fits it there or a provisioner that can make one.
func FilterVolumes(pod *PodInfo, node *NodeInfo) []string {
	v := pod.Volumes
	if v == nil {
		return nil
	}
	n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: node.Name, Labels: node.Labels}}
	for _, pv := range v.Bound {
		if ok, err := volume.NodeAdmits(pv, n); err != nil || !ok {
			return []string{ReasonVolumeNodeAffinity}
		}
	}
	for _, u := range v.Unbound {
		if u.SelectedNode != "" {
			if u.SelectedNode != node.Name {
				return []string{ReasonSelectedNode}
			}
			continue
		}
		if u.CanProvision {
			continue
		}
		found := false
		for _, pv := range u.Candidates {
			if ok, _ := volume.Match(u.Claim, pv, n); ok {
				found = true
				break
			}
		}
		if !found {
			return []string{ReasonNoVolumeToBind}
		}
	}
	return nil
}
