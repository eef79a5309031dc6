package core

import (
	"slices"
	"testing"

	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestFilterVolumes(t *testing.T) {
	class := "late"
	claim := &kplanev1.PersistentVolumeClaim{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "data", Uid: "c1"},
		Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{kplanev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}},
	}
	pinned := func(node string) *kplanev1.PersistentVolume {
		return &kplanev1.PersistentVolume{Metadata: &kplanev1.ObjectMeta{Name: "pv-" + node},
			Spec: &kplanev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{kplanev1.ReadWriteOnce},
				StorageClassName: class, NodeAffinity: volume.HostnameAffinity(node)},
			Status: &kplanev1.PersistentVolumeStatus{Phase: kplanev1.VolumeAvailable}}
	}
	n1 := nodeInfo(testNode("n1", "1", "1Gi", 10, withLabels(kplanev1.LabelHostname, "n1")))
	n2 := nodeInfo(testNode("n2", "1", "1Gi", 10, withLabels(kplanev1.LabelHostname, "n2")))
	tests := []struct {
		name string
		vols *PodVolumes
		node *NodeInfo
		want []string
	}{
		{"no claims", nil, n1, nil},
		{"bound volume admits the node", &PodVolumes{Bound: []*kplanev1.PersistentVolume{pinned("n1")}}, n1, nil},
		{"bound volume pinned elsewhere", &PodVolumes{Bound: []*kplanev1.PersistentVolume{pinned("n1")}}, n2, []string{ReasonVolumeNodeAffinity}},
		{"unbound, provisioner makes one anywhere", &PodVolumes{Unbound: []UnboundClaim{{Claim: claim, CanProvision: true}}}, n2, nil},
		{"unbound, static volume on this node", &PodVolumes{Unbound: []UnboundClaim{{Claim: claim, Candidates: []*kplanev1.PersistentVolume{pinned("n2")}}}}, n2, nil},
		{"unbound, static volume only elsewhere", &PodVolumes{Unbound: []UnboundClaim{{Claim: claim, Candidates: []*kplanev1.PersistentVolume{pinned("n1")}}}}, n2,
			[]string{ReasonNoVolumeToBind}},
		{"unbound, no volume, no provisioner", &PodVolumes{Unbound: []UnboundClaim{{Claim: claim}}}, n1, []string{ReasonNoVolumeToBind}},
		{"node already selected: only it", &PodVolumes{Unbound: []UnboundClaim{{Claim: claim, CanProvision: true, SelectedNode: "n1"}}}, n2, []string{ReasonSelectedNode}},
		{"node already selected: it fits", &PodVolumes{Unbound: []UnboundClaim{{Claim: claim, SelectedNode: "n1"}}}, n1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustInfo(testPod("p"))
			p.Volumes = tt.vols
			if got := FilterVolumes(p, tt.node); !slices.Equal(got, tt.want) {
				t.Errorf("FilterVolumes = %v, want %v", got, tt.want)
			}
		})
	}
}
