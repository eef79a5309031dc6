package strategy

import (
	"maps"
	"strconv"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
	"github.com/kplane/kplane/pkg/volume"
)

var (
	accessModes       = []string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}
	volumeModes       = []string{"Filesystem", "Block"}
	pvReclaimPolicies = []string{"Retain", "Delete", "Recycle"}
)

const (
	defaultVolumeMode     = "Filesystem"
	readWriteOncePod      = "ReadWriteOncePod"
	bindingImmediate      = "Immediate"
	bindingWaitForFirst   = "WaitForFirstConsumer"
	reclaimDelete         = "Delete"
	reclaimRetain         = "Retain"
	maxStorageClassParams = 512
)

// ---- PersistentVolume

func defaultPersistentVolume(pv *kplanev1.PersistentVolume) {
	if pv.Spec == nil {
		pv.Spec = &kplanev1.PersistentVolumeSpec{}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == "" {
		pv.Spec.PersistentVolumeReclaimPolicy = reclaimRetain
	}
	if pv.Spec.VolumeMode == "" {
		pv.Spec.VolumeMode = defaultVolumeMode
	}
}

// preparePersistentVolume starts a new volume Pending (pvctl makes it
// Available).
func preparePersistentVolume(pv *kplanev1.PersistentVolume) {
	if pv.Status == nil {
		pv.Status = &kplanev1.PersistentVolumeStatus{}
	}
	if pv.Status.Phase == "" {
		pv.Status.Phase = "Pending"
	}
}

// validateAccessModes checks a non-empty list of known modes, where
// ReadWriteOncePod excludes the others (it is the strictest promise).
func validateAccessModes(modes []string, path string, errs *validation.ErrorList) {
	if len(modes) == 0 {
		errs.Required(path, "")
		return
	}
	seen := map[string]bool{}
	for i, m := range modes {
		oneOf(errs, index(path, i), m, accessModes...)
		if seen[m] {
			errs.Duplicate(index(path, i), m)
		}
		seen[m] = true
	}
	if seen[readWriteOncePod] && len(modes) > 1 {
		errs.Forbidden(path, "may not use ReadWriteOncePod with other access modes")
	}
}

func validatePersistentVolume(pv *kplanev1.PersistentVolume) validation.ErrorList {
	var errs validation.ErrorList
	s := pv.GetSpec()
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	if _, ok := s.Capacity[resourceStorage]; !ok {
		errs.Required(key("spec.capacity", resourceStorage), "")
	}
	if q, ok := validateStorageList(s.Capacity, "spec.capacity", &errs)[resourceStorage]; ok && q.Sign() == 0 {
		errs.Invalid(key("spec.capacity", resourceStorage), s.Capacity[resourceStorage], "must be greater than zero")
	}
	validateAccessModes(s.AccessModes, "spec.accessModes", &errs)
	oneOf(&errs, "spec.persistentVolumeReclaimPolicy", s.PersistentVolumeReclaimPolicy, pvReclaimPolicies...)
	oneOf(&errs, "spec.volumeMode", s.VolumeMode, volumeModes...)
	validateName(&errs, "spec.storageClassName", s.StorageClassName, false, validation.IsDNS1123Subdomain)
	if ref := s.ClaimRef; ref != nil {
		validateName(&errs, "spec.claimRef.name", ref.Name, true, validation.IsDNS1123Subdomain)
		validateName(&errs, "spec.claimRef.namespace", ref.Namespace, true, validation.IsDNS1123Label)
	}
	if s.HostPath != nil {
		validateHostPath(s.HostPath, "spec.hostPath", &errs)
	}
	validateVolumeNodeAffinity(s.NodeAffinity, "spec.nodeAffinity", &errs)
	if ph := pv.GetStatus().GetPhase(); ph != "" {
		oneOf(&errs, "status.phase", ph, "Pending", "Available", "Bound", "Released", "Failed")
	}
	return errs
}

var nodeSelectorOperators = []string{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}

// validateVolumeNodeAffinity checks a volume's required node selector:
// at least one term, each requirement with a key, a known operator and
// the values its operator needs.
func validateVolumeNodeAffinity(na *kplanev1.VolumeNodeAffinity, path string, errs *validation.ErrorList) {
	if na == nil {
		return
	}
	req := na.GetRequired()
	if req == nil {
		errs.Required(path+".required", "")
		return
	}
	validateNodeSelector(req, path+".required", errs)
}

// validateNodeSelector checks a required node selector: at least one
// term, each valid (validateNodeSelectorTerm).
func validateNodeSelector(sel *kplanev1.NodeSelector, path string, errs *validation.ErrorList) {
	tp := path + ".nodeSelectorTerms"
	if len(sel.GetNodeSelectorTerms()) == 0 {
		errs.Required(tp, "must have at least one node selector term")
	}
	for i, term := range sel.GetNodeSelectorTerms() {
		validateNodeSelectorTerm(term, index(tp, i), errs)
	}
}

// validateNodeSelectorTerm checks each requirement: a key, a known
// operator and the values its operator needs; a matchFields requirement
// tests metadata.name (the only node field, as in Kubernetes) with In or
// NotIn and exactly one value.
func validateNodeSelectorTerm(term *kplanev1.NodeSelectorTerm, path string, errs *validation.ErrorList) {
	for j, r := range term.GetMatchFields() {
		rp := index(path+".matchFields", j)
		if r.GetKey() != volume.FieldNodeName {
			errs.Invalid(rp+".key", r.GetKey(), "not a valid field selector key, must be "+volume.FieldNodeName)
		}
		oneOf(errs, rp+".operator", r.GetOperator(), "In", "NotIn")
		if (r.GetOperator() == "In" || r.GetOperator() == "NotIn") && len(r.GetValues()) != 1 {
			errs.Required(rp+".values", "must be only one value when `operator` is 'In' or 'NotIn' for node field selector")
		}
	}
	for j, r := range term.GetMatchExpressions() {
		rp := index(path+".matchExpressions", j)
		if r.GetKey() == "" {
			errs.Required(rp+".key", "")
		}
		oneOf(errs, rp+".operator", r.GetOperator(), nodeSelectorOperators...)
		switch r.GetOperator() {
		case "In", "NotIn":
			if len(r.GetValues()) == 0 {
				errs.Required(rp+".values", "must be specified when `operator` is 'In' or 'NotIn'")
			}
		case "Exists", "DoesNotExist":
			if len(r.GetValues()) > 0 {
				errs.Forbidden(rp+".values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
			}
		case "Gt", "Lt":
			if len(r.GetValues()) != 1 {
				errs.Required(rp+".values", "must be specified single value when `operator` is 'Lt' or 'Gt'")
			} else if _, err := strconv.ParseInt(r.GetValues()[0], 10, 64); err != nil {
				errs.Invalid(rp+".values[0]", r.GetValues()[0], "must be an integer when `operator` is 'Lt' or 'Gt'")
			}
		}
	}
}

// validatePersistentVolumeUpdate keeps what the data lives on fixed: the
// volume mode and the volume source.
func validatePersistentVolumeUpdate(pv, old *kplanev1.PersistentVolume) validation.ErrorList {
	var errs validation.ErrorList
	if pv.GetSpec().GetVolumeMode() != old.GetSpec().GetVolumeMode() {
		errs.Immutable("spec.volumeMode", pv.GetSpec().GetVolumeMode())
	}
	if !proto.Equal(pv.GetSpec().GetHostPath(), old.GetSpec().GetHostPath()) {
		errs.Immutable("spec.hostPath", pv.GetSpec().GetHostPath())
	}
	return errs
}

// ---- PersistentVolumeClaim

func defaultPersistentVolumeClaim(pvc *kplanev1.PersistentVolumeClaim) {
	if pvc.Spec == nil {
		pvc.Spec = &kplanev1.PersistentVolumeClaimSpec{}
	}
	if pvc.Spec.VolumeMode == "" {
		pvc.Spec.VolumeMode = defaultVolumeMode
	}
}

// preparePersistentVolumeClaim starts a new claim Pending until bound.
func preparePersistentVolumeClaim(pvc *kplanev1.PersistentVolumeClaim) {
	if pvc.Status == nil {
		pvc.Status = &kplanev1.PersistentVolumeClaimStatus{}
	}
	if pvc.Status.Phase == "" {
		pvc.Status.Phase = "Pending"
	}
}

func validatePersistentVolumeClaim(pvc *kplanev1.PersistentVolumeClaim) validation.ErrorList {
	var errs validation.ErrorList
	s := pvc.GetSpec()
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	validateAccessModes(s.AccessModes, "spec.accessModes", &errs)
	errs.AddAll(validation.ValidateLabelSelector(s.Selector, "spec.selector"))
	reqPath := "spec.resources.requests"
	requests := validateStorageList(s.GetResources().GetRequests(), reqPath, &errs)
	limits := validateStorageList(s.GetResources().GetLimits(), "spec.resources.limits", &errs)
	if _, ok := s.GetResources().GetRequests()[resourceStorage]; !ok {
		errs.Required(key(reqPath, resourceStorage), "")
	} else if q, ok := requests[resourceStorage]; ok {
		if q.Sign() == 0 {
			errs.Invalid(key(reqPath, resourceStorage), s.Resources.Requests[resourceStorage], "must be greater than zero")
		}
		if l, ok := limits[resourceStorage]; ok && q.Cmp(l) > 0 {
			errs.Invalid(key(reqPath, resourceStorage), s.Resources.Requests[resourceStorage],
				"must be less than or equal to storage limit of "+s.Resources.Limits[resourceStorage])
		}
	}
	validateName(&errs, "spec.volumeName", s.VolumeName, false, validation.IsDNS1123Subdomain)
	if s.StorageClassName != nil {
		validateName(&errs, "spec.storageClassName", *s.StorageClassName, false, validation.IsDNS1123Subdomain)
	}
	oneOf(&errs, "spec.volumeMode", s.VolumeMode, volumeModes...)
	if ph := pvc.GetStatus().GetPhase(); ph != "" {
		oneOf(&errs, "status.phase", ph, "Pending", "Bound", "Lost")
	}
	return errs
}

// validatePersistentVolumeClaimUpdate keeps the claim's spec fixed except
// resources.requests (the storage request may grow, never shrink: volumes
// are expanded, not reduced) and volumeName, which binding sets once.
func validatePersistentVolumeClaimUpdate(pvc, old *kplanev1.PersistentVolumeClaim) validation.ErrorList {
	var errs validation.ErrorList
	n, o := pvc.GetSpec(), old.GetSpec()
	if o.GetVolumeName() != "" && n.GetVolumeName() != o.GetVolumeName() {
		errs.Invalid("spec.volumeName", n.GetVolumeName(), "field is immutable once set")
	}
	newReq, errN := parseStorage(n.GetResources().GetRequests())
	oldReq, errO := parseStorage(old.GetSpec().GetResources().GetRequests())
	if errN == nil && errO == nil && newReq != nil && oldReq != nil && newReq.Cmp(*oldReq) < 0 {
		errs.Forbidden(key("spec.resources.requests", resourceStorage), "field can not be less than previous value")
	}

	rest := proto.Clone(o).(*kplanev1.PersistentVolumeClaimSpec)
	if rest == nil {
		rest = &kplanev1.PersistentVolumeClaimSpec{}
	}
	if n == nil {
		n = &kplanev1.PersistentVolumeClaimSpec{}
	}
	if n.Resources != nil || rest.Resources != nil {
		if rest.Resources == nil {
			rest.Resources = &kplanev1.ResourceRequirements{}
		}
		rest.Resources.Requests = n.GetResources().GetRequests()
		if n.Resources == nil && len(rest.Resources.Limits) == 0 {
			rest.Resources = nil
		}
	}
	if o.GetVolumeName() == "" {
		rest.VolumeName = n.VolumeName
	}
	// A claim created with no class gets the default class later (pvctl
	// sets it once one exists, as Kubernetes' retroactive default
	// StorageClass assignment does): nil may become a name, never the reverse.
	if o.StorageClassName == nil && n.StorageClassName != nil {
		rest.StorageClassName = n.StorageClassName
	}
	if !proto.Equal(rest, n) && len(errs) == 0 {
		errs.Forbidden("spec", "spec is immutable after creation except resources.requests, volumeName (once, when unset) and storageClassName (once, when unset)")
	}
	return errs
}

// ---- StorageClass

func defaultStorageClass(sc *kplanev1.StorageClass) {
	if sc.ReclaimPolicy == "" {
		sc.ReclaimPolicy = reclaimDelete
	}
	if sc.VolumeBindingMode == "" {
		sc.VolumeBindingMode = bindingImmediate
	}
}

func validateStorageClass(sc *kplanev1.StorageClass) validation.ErrorList {
	var errs validation.ErrorList
	validateName(&errs, "provisioner", sc.GetProvisioner(), true, validation.IsQualifiedName)
	if len(sc.GetParameters()) > maxStorageClassParams {
		errs.Add("parameters", "Too many: %d: must have at most %d items", len(sc.GetParameters()), maxStorageClassParams)
	}
	for _, k := range validation.SortedKeys(sc.GetParameters()) {
		if k == "" {
			errs.Invalid("parameters", k, "parameter names may not be empty")
		}
	}
	oneOf(&errs, "reclaimPolicy", sc.GetReclaimPolicy(), reclaimDelete, reclaimRetain)
	oneOf(&errs, "volumeBindingMode", sc.GetVolumeBindingMode(), bindingImmediate, bindingWaitForFirst)
	return errs
}

// validateStorageClassUpdate keeps how volumes of the class are made and
// released fixed: volumes already provisioned relied on it.
func validateStorageClassUpdate(sc, old *kplanev1.StorageClass) validation.ErrorList {
	var errs validation.ErrorList
	if sc.GetProvisioner() != old.GetProvisioner() {
		errs.Forbidden("provisioner", "updates to provisioner are forbidden")
	}
	if !maps.Equal(sc.GetParameters(), old.GetParameters()) {
		errs.Forbidden("parameters", "updates to parameters are forbidden")
	}
	if sc.GetReclaimPolicy() != old.GetReclaimPolicy() {
		errs.Forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden")
	}
	if sc.GetVolumeBindingMode() != old.GetVolumeBindingMode() {
		errs.Forbidden("volumeBindingMode", "updates to volumeBindingMode are forbidden")
	}
	return errs
}
