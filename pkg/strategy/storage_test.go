package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validPV() *kplanev1.PersistentVolume {
	return &kplanev1.PersistentVolume{Metadata: meta("", "pv-1"), Spec: &kplanev1.PersistentVolumeSpec{
		Capacity:         map[string]string{"storage": "10Gi"},
		AccessModes:      []string{"ReadWriteOnce", "ReadOnlyMany"},
		StorageClassName: "standard",
		HostPath:         &kplanev1.HostPathVolumeSource{Path: "/mnt/pv-1"},
	}}
}

func TestPersistentVolume(t *testing.T) {
	pv := created(validPV())
	if pv.Spec.PersistentVolumeReclaimPolicy != "Retain" || pv.Spec.VolumeMode != "Filesystem" || pv.Status.GetPhase() != "Pending" {
		t.Errorf("defaults: %v %v", pv.Spec, pv.Status)
	}
	checkValidate(t, "PersistentVolume", validPV, []tc[*kplanev1.PersistentVolume]{
		{"capacity missing", func(pv *kplanev1.PersistentVolume) { pv.Spec.Capacity = nil },
			[]string{`spec.capacity["storage"]: Required value`}},
		{"capacity quantity", func(pv *kplanev1.PersistentVolume) { pv.Spec.Capacity["storage"] = "ten" },
			[]string{`spec.capacity["storage"]: Invalid value: "ten": quantities must match...`}},
		{"capacity zero", func(pv *kplanev1.PersistentVolume) { pv.Spec.Capacity["storage"] = "0" },
			[]string{`spec.capacity["storage"]: Invalid value: "0": must be greater than zero`}},
		{"capacity other resource", func(pv *kplanev1.PersistentVolume) { pv.Spec.Capacity["cpu"] = "1" },
			[]string{`spec.capacity: Unsupported value: "cpu": supported values: "storage"`}},
		{"access modes missing", func(pv *kplanev1.PersistentVolume) { pv.Spec.AccessModes = nil },
			[]string{"spec.accessModes: Required value"}},
		{"access mode", func(pv *kplanev1.PersistentVolume) { pv.Spec.AccessModes[1] = "ReadMany" },
			[]string{`spec.accessModes[1]: Unsupported value: "ReadMany": supported values: "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"`}},
		{"duplicate access mode", func(pv *kplanev1.PersistentVolume) { pv.Spec.AccessModes[1] = "ReadWriteOnce" },
			[]string{`spec.accessModes[1]: Duplicate value: "ReadWriteOnce"`}},
		{"RWOP with others", func(pv *kplanev1.PersistentVolume) { pv.Spec.AccessModes[1] = "ReadWriteOncePod" },
			[]string{"spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"}},
		{"reclaim policy", func(pv *kplanev1.PersistentVolume) { pv.Spec.PersistentVolumeReclaimPolicy = "Keep" },
			[]string{`spec.persistentVolumeReclaimPolicy: Unsupported value: "Keep": supported values: "Retain", "Delete", "Recycle"`}},
		{"volume mode", func(pv *kplanev1.PersistentVolume) { pv.Spec.VolumeMode = "Raw" },
			[]string{`spec.volumeMode: Unsupported value: "Raw": supported values: "Filesystem", "Block"`}},
		{"claim ref", func(pv *kplanev1.PersistentVolume) { pv.Spec.ClaimRef = &kplanev1.ObjectReference{Name: "data"} },
			[]string{"spec.claimRef.namespace: Required value"}},
		{"host path", func(pv *kplanev1.PersistentVolume) { pv.Spec.HostPath.Path = "" }, []string{"spec.hostPath.path: Required value"}},
		{"storage class", func(pv *kplanev1.PersistentVolume) { pv.Spec.StorageClassName = "Fast" },
			[]string{`spec.storageClassName: Invalid value: "Fast": ...`}},
		{"node affinity without terms", func(pv *kplanev1.PersistentVolume) {
			pv.Spec.NodeAffinity = &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{}}
		}, []string{"spec.nodeAffinity.required.nodeSelectorTerms: Required value: must have at least one node selector term"}},
		{"node affinity operator", func(pv *kplanev1.PersistentVolume) {
			pv.Spec.NodeAffinity = &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
				{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: "Is", Values: []string{"n1"}}}},
			}}}
		}, []string{`spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Is": supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"`}},
		{"node affinity values", func(pv *kplanev1.PersistentVolume) {
			pv.Spec.NodeAffinity = &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
				{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: "In"}}},
			}}}
		}, []string{"spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"}},
		{"namespace", func(pv *kplanev1.PersistentVolume) { pv.Metadata.Namespace = "default" },
			[]string{"metadata.namespace: Forbidden: not allowed on this type"}},
	})
	checkUpdate(t, "PersistentVolume", validPV, []utc[*kplanev1.PersistentVolume]{
		{"bind", func(pv *kplanev1.PersistentVolume) {
			pv.Spec.ClaimRef = &kplanev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "data", Uid: "u"}
		}, nil},
		{"reclaim policy", func(pv *kplanev1.PersistentVolume) { pv.Spec.PersistentVolumeReclaimPolicy = "Delete" }, nil},
		{"volume mode", func(pv *kplanev1.PersistentVolume) { pv.Spec.VolumeMode = "Block" },
			[]string{`spec.volumeMode: Invalid value: "Block": field is immutable`}},
		{"source", func(pv *kplanev1.PersistentVolume) { pv.Spec.HostPath.Path = "/elsewhere" },
			[]string{`spec.hostPath: Invalid value: {"path":"/elsewhere"}: field is immutable`}},
	})
}

func validPVC() *kplanev1.PersistentVolumeClaim {
	return &kplanev1.PersistentVolumeClaim{Metadata: meta("default", "data"), Spec: &kplanev1.PersistentVolumeClaimSpec{
		AccessModes:      []string{"ReadWriteOnce"},
		Resources:        &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}},
		StorageClassName: ptr("standard"),
		Selector:         &kplanev1.LabelSelector{MatchLabels: map[string]string{"tier": "fast"}},
	}}
}

func TestPersistentVolumeClaim(t *testing.T) {
	pvc := created(validPVC())
	if pvc.Spec.VolumeMode != "Filesystem" || pvc.Status.GetPhase() != "Pending" {
		t.Errorf("defaults: %v", pvc.Spec)
	}
	checkValidate(t, "PersistentVolumeClaim", validPVC, []tc[*kplanev1.PersistentVolumeClaim]{
		{"access modes", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }, []string{"spec.accessModes: Required value"}},
		{"storage missing", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Resources = nil },
			[]string{`spec.resources.requests["storage"]: Required value`}},
		{"storage zero", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Resources.Requests["storage"] = "0" },
			[]string{`spec.resources.requests["storage"]: Invalid value: "0": must be greater than zero`}},
		{"storage quantity", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Resources.Requests["storage"] = "1 Gi" },
			[]string{`spec.resources.requests["storage"]: Invalid value: "1 Gi": unable to parse quantity's suffix`}},
		{"storage above limit", func(c *kplanev1.PersistentVolumeClaim) {
			c.Spec.Resources.Limits = map[string]string{"storage": "512Mi"}
		},
			[]string{`spec.resources.requests["storage"]: Invalid value: "1Gi": must be less than or equal to storage limit of 512Mi`}},
		{"volume mode", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.VolumeMode = "Raw" },
			[]string{`spec.volumeMode: Unsupported value: "Raw": supported values: "Filesystem", "Block"`}},
		{"selector", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Selector.MatchLabels["tier"] = "-" },
			[]string{`spec.selector.matchLabels["tier"]: Invalid value: "-": ...`}},
		{"empty storage class", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr("") }, nil},
		{"storage class", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr("A") },
			[]string{`spec.storageClassName: Invalid value: "A": ...`}},
	})
	bound := func() *kplanev1.PersistentVolumeClaim { c := validPVC(); c.Spec.VolumeName = "pv-1"; return c }
	checkUpdate(t, "PersistentVolumeClaim", validPVC, []utc[*kplanev1.PersistentVolumeClaim]{
		{"bind", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-1" }, nil},
		{"grow", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Resources.Requests["storage"] = "2Gi" }, nil},
		{"shrink", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Resources.Requests["storage"] = "512Mi" },
			[]string{`spec.resources.requests["storage"]: Forbidden: field can not be less than previous value`}},
		{"access modes", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.AccessModes = []string{"ReadWriteMany"} },
			[]string{"spec: Forbidden: spec is immutable after creation except resources.requests, volumeName (once, when unset) and storageClassName (once, when unset)"}},
		{"limits", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.Resources.Limits = map[string]string{"storage": "5Gi"} },
			[]string{"spec: Forbidden: spec is immutable after creation..."}},
		{"status", func(c *kplanev1.PersistentVolumeClaim) { c.Status.Phase = "Bound" }, nil},
		{"storage class changed", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr("fast") },
			[]string{"spec: Forbidden: spec is immutable after creation..."}},
	})
	noClass := func() *kplanev1.PersistentVolumeClaim { c := validPVC(); c.Spec.StorageClassName = nil; return c }
	checkUpdate(t, "PersistentVolumeClaim", noClass, []utc[*kplanev1.PersistentVolumeClaim]{
		{"default class set later", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr("standard") }, nil},
	})
	checkUpdate(t, "PersistentVolumeClaim", bound, []utc[*kplanev1.PersistentVolumeClaim]{
		{"rebind", func(c *kplanev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-2" },
			[]string{`spec.volumeName: Invalid value: "pv-2": field is immutable once set`}},
	})
}

func validStorageClass() *kplanev1.StorageClass {
	return &kplanev1.StorageClass{Metadata: meta("", "standard"), Provisioner: "kplane.io/hostpath",
		Parameters: map[string]string{"root": "/mnt"}}
}

func TestStorageClass(t *testing.T) {
	sc := defaulted(validStorageClass())
	if sc.ReclaimPolicy != "Delete" || sc.VolumeBindingMode != "Immediate" {
		t.Errorf("defaults: %v", sc)
	}
	checkValidate(t, "StorageClass", validStorageClass, []tc[*kplanev1.StorageClass]{
		{"provisioner missing", func(s *kplanev1.StorageClass) { s.Provisioner = "" }, []string{"provisioner: Required value"}},
		{"provisioner format", func(s *kplanev1.StorageClass) { s.Provisioner = "a b" }, []string{`provisioner: Invalid value: "a b": ...`}},
		{"reclaim policy", func(s *kplanev1.StorageClass) { s.ReclaimPolicy = "Recycle" },
			[]string{`reclaimPolicy: Unsupported value: "Recycle": supported values: "Delete", "Retain"`}},
		{"binding mode", func(s *kplanev1.StorageClass) { s.VolumeBindingMode = "Later" },
			[]string{`volumeBindingMode: Unsupported value: "Later": supported values: "Immediate", "WaitForFirstConsumer"`}},
		{"empty parameter name", func(s *kplanev1.StorageClass) { s.Parameters[""] = "x" },
			[]string{`parameters: Invalid value: "": parameter names may not be empty`}},
	})
	checkUpdate(t, "StorageClass", validStorageClass, []utc[*kplanev1.StorageClass]{
		{"expansion", func(s *kplanev1.StorageClass) { s.AllowVolumeExpansion = ptr(true) }, nil},
		{"parameters", func(s *kplanev1.StorageClass) { s.Parameters["root"] = "/srv" },
			[]string{"parameters: Forbidden: updates to parameters are forbidden"}},
		{"provisioner", func(s *kplanev1.StorageClass) { s.Provisioner = "example.com/nfs" },
			[]string{"provisioner: Forbidden: updates to provisioner are forbidden"}},
		{"reclaim policy", func(s *kplanev1.StorageClass) { s.ReclaimPolicy = "Retain" },
			[]string{"reclaimPolicy: Forbidden: updates to reclaimPolicy are forbidden"}},
		{"binding mode", func(s *kplanev1.StorageClass) { s.VolumeBindingMode = "WaitForFirstConsumer" },
			[]string{"volumeBindingMode: Forbidden: updates to volumeBindingMode are forbidden"}},
	})
}
