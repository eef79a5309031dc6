package volume

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func claim(mut ...func(*kplanev1.PersistentVolumeClaim)) *kplanev1.PersistentVolumeClaim {
	class := "fast"
	c := &kplanev1.PersistentVolumeClaim{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "data", Uid: "claim-uid"},
		Spec: &kplanev1.PersistentVolumeClaimSpec{
			AccessModes:      []string{kplanev1.ReadWriteOnce},
			Resources:        &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}},
			StorageClassName: &class,
			VolumeMode:       kplanev1.VolumeModeFilesystem,
		},
	}
	for _, m := range mut {
		m(c)
	}
	return c
}

func pv(name, size string, mut ...func(*kplanev1.PersistentVolume)) *kplanev1.PersistentVolume {
	v := &kplanev1.PersistentVolume{
		Metadata: &kplanev1.ObjectMeta{Name: name, Labels: map[string]string{"tier": "ssd"}},
		Spec: &kplanev1.PersistentVolumeSpec{
			Capacity:         map[string]string{"storage": size},
			AccessModes:      []string{kplanev1.ReadWriteOnce, kplanev1.ReadOnlyMany},
			StorageClassName: "fast",
			VolumeMode:       kplanev1.VolumeModeFilesystem,
		},
		Status: &kplanev1.PersistentVolumeStatus{Phase: kplanev1.VolumeAvailable},
	}
	for _, m := range mut {
		m(v)
	}
	return v
}

func node(name string, lbls map[string]string) *kplanev1.Node {
	return &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name, Labels: lbls}}
}

func TestMatch(t *testing.T) {
	n1 := node("n1", map[string]string{kplanev1.LabelHostname: "n1", "disks": "4"})
	n2 := node("n2", map[string]string{kplanev1.LabelHostname: "n2"})
	cases := []struct {
		name   string
		claim  *kplanev1.PersistentVolumeClaim
		pv     *kplanev1.PersistentVolume
		node   *kplanev1.Node
		reason string // "" = fits
	}{
		{"fits", claim(), pv("a", "1Gi"), nil, ""},
		{"larger fits", claim(), pv("a", "10Gi"), nil, ""},
		{"quantities compared by value, not text", claim(), pv("a", "1073741824"), nil, ""},
		{"decimal vs binary units", claim(), pv("a", "1G"), nil, ReasonCapacity},
		{"too small", claim(), pv("a", "512Mi"), nil, ReasonCapacity},
		{"class differs", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Spec.StorageClassName = "slow" }), nil, ReasonClass},
		{"class-less claim wants class-less volume", claim(func(c *kplanev1.PersistentVolumeClaim) { c.Spec.StorageClassName = nil }),
			pv("a", "1Gi"), nil, ReasonClass},
		{"class-less both", claim(func(c *kplanev1.PersistentVolumeClaim) { c.Spec.StorageClassName = nil }),
			pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Spec.StorageClassName = "" }), nil, ""},
		{"access mode missing", claim(func(c *kplanev1.PersistentVolumeClaim) { c.Spec.AccessModes = []string{kplanev1.ReadWriteMany} }),
			pv("a", "1Gi"), nil, ReasonAccessModes},
		{"access modes subset", claim(func(c *kplanev1.PersistentVolumeClaim) { c.Spec.AccessModes = []string{kplanev1.ReadOnlyMany} }),
			pv("a", "1Gi"), nil, ""},
		{"volume mode", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Spec.VolumeMode = kplanev1.VolumeModeBlock }), nil, ReasonVolumeMode},
		{"empty volume mode is Filesystem", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Spec.VolumeMode = "" }), nil, ""},
		{"selector matches", claim(func(c *kplanev1.PersistentVolumeClaim) {
			c.Spec.Selector = &kplanev1.LabelSelector{MatchLabels: map[string]string{"tier": "ssd"}}
		}), pv("a", "1Gi"), nil, ""},
		{"selector mismatch", claim(func(c *kplanev1.PersistentVolumeClaim) {
			c.Spec.Selector = &kplanev1.LabelSelector{MatchExpressions: []*kplanev1.LabelSelectorRequirement{{Key: "tier", Operator: "In", Values: []string{"hdd"}}}}
		}), pv("a", "1Gi"), nil, ReasonSelector},
		{"bound elsewhere", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) {
			v.Spec.ClaimRef = &kplanev1.ObjectReference{Namespace: "default", Name: "other", Uid: "x"}
			v.Status.Phase = kplanev1.VolumeBound
		}), nil, ReasonBoundElsewhere},
		{"claimRef to a former claim of the same name", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) {
			v.Spec.ClaimRef = &kplanev1.ObjectReference{Namespace: "default", Name: "data", Uid: "old-uid"}
			v.Status.Phase = kplanev1.VolumeReleased
		}), nil, ReasonBoundElsewhere},
		{"pre-bound by name only", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) {
			v.Spec.ClaimRef = &kplanev1.ObjectReference{Namespace: "default", Name: "data"}
		}), nil, ""},
		{"pre-bound still checks size", claim(), pv("a", "1Mi", func(v *kplanev1.PersistentVolume) {
			v.Spec.ClaimRef = &kplanev1.ObjectReference{Namespace: "default", Name: "data", Uid: "claim-uid"}
		}), nil, ReasonCapacity},
		{"released", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Status.Phase = kplanev1.VolumeReleased }), nil, ReasonNotAvailable},
		{"being deleted", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Metadata.DeletionTimestamp = timestamppb.Now() }), nil, ReasonBeingDeleted},
		{"invalid capacity", claim(), pv("a", "lots"), nil, ReasonInvalid},
		{"node admitted", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Spec.NodeAffinity = HostnameAffinity("n1") }), n1, ""},
		{"node not admitted", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) { v.Spec.NodeAffinity = HostnameAffinity("n1") }), n2, ReasonNodeAffinity},
		{"no affinity admits any node", claim(), pv("a", "1Gi"), n2, ""},
		{"Gt on a numeric label", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) {
			v.Spec.NodeAffinity = &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
				{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "disks", Operator: "Gt", Values: []string{"2"}}}}}}}
		}), n1, ""},
		{"second term admits", claim(), pv("a", "1Gi", func(v *kplanev1.PersistentVolume) {
			v.Spec.NodeAffinity = &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
				{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "disks", Operator: "DoesNotExist"}}},
				{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: kplanev1.LabelHostname, Operator: "NotIn", Values: []string{"n1"}}}}}}}
		}), n2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := Match(tc.claim, tc.pv, tc.node)
			if ok != (tc.reason == "") || reason != tc.reason {
				t.Errorf("Match = %v, %q; want reason %q", ok, reason, tc.reason)
			}
		})
	}
}

func TestBestMatch(t *testing.T) {
	bound := func(v *kplanev1.PersistentVolume) {
		v.Spec.ClaimRef = &kplanev1.ObjectReference{Namespace: "default", Name: "data", Uid: "claim-uid"}
	}
	cases := []struct {
		name  string
		claim *kplanev1.PersistentVolumeClaim
		pvs   []*kplanev1.PersistentVolume
		want  string
	}{
		{"none", claim(), nil, ""},
		{"smallest that fits", claim(), []*kplanev1.PersistentVolume{pv("big", "10Gi"), pv("small", "512Mi"), pv("mid", "2Gi"), pv("exact", "1024Mi")}, "exact"},
		{"pre-bound wins over smaller", claim(), []*kplanev1.PersistentVolume{pv("small", "1Gi"), pv("big", "5Gi", bound)}, "big"},
		{"volumeName restricts", claim(func(c *kplanev1.PersistentVolumeClaim) { c.Spec.VolumeName = "mid" }),
			[]*kplanev1.PersistentVolume{pv("small", "1Gi"), pv("mid", "2Gi")}, "mid"},
		{"nothing fits", claim(), []*kplanev1.PersistentVolume{pv("tiny", "1Mi")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := BestMatch(tc.claim, tc.pvs, nil)
			if got.GetMetadata().GetName() != tc.want {
				t.Errorf("BestMatch = %q, want %q", got.GetMetadata().GetName(), tc.want)
			}
		})
	}
}

// Equal volumes: one claim always gets the same one; different claims
// spread over them.
func TestBestMatchSpreadsTies(t *testing.T) {
	var pvs []*kplanev1.PersistentVolume
	for i := range 10 {
		pvs = append(pvs, pv(fmt.Sprintf("pv-%d", i), "1Gi"))
	}
	picked := map[string]bool{}
	for i := range 20 {
		c := claim(func(c *kplanev1.PersistentVolumeClaim) { c.Metadata.Uid = fmt.Sprintf("uid-%d", i) })
		first := BestMatch(c, pvs, nil).GetMetadata().GetName()
		for range 3 {
			if again := BestMatch(c, slices.Clone(pvs), nil).GetMetadata().GetName(); again != first {
				t.Fatalf("claim %d got %s, then %s", i, first, again)
			}
		}
		picked[first] = true
	}
	if len(picked) < 3 {
		t.Errorf("20 claims picked only %v of 10 equal volumes", picked)
	}
	// Still the smallest first.
	c := claim()
	if got := BestMatch(c, append(slices.Clone(pvs), pv("small", "1Gi"), pv("big", "2Gi")), nil).GetSpec().GetCapacity()["storage"]; got != "1Gi" {
		t.Errorf("picked a %s volume", got)
	}
}
