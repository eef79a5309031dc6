// Package volume holds the rules by which a PersistentVolumeClaim and a
// PersistentVolume fit each other, and a volume's node affinity: pvctl
// binds with them, and the scheduler's volume binding filter asks them
// which nodes a pod's volumes can be used from. They are pure functions
// over API objects.
package volume

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/pkg/quantity"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Mismatch reasons: why a volume does not fit a claim.
const (
	ReasonBoundElsewhere = "bound to another claim"
	ReasonNotAvailable   = "not available"
	ReasonBeingDeleted   = "being deleted"
	ReasonClass          = "storage class differs"
	ReasonAccessModes    = "access modes do not include the claim's"
	ReasonCapacity       = "capacity smaller than the request"
	ReasonVolumeMode     = "volume mode differs"
	ReasonSelector       = "labels do not match the claim's selector"
	ReasonNodeAffinity   = "node affinity does not admit the node"
	ReasonInvalid        = "invalid quantity or selector"
)

// ClaimClass is the storage class a claim asks for: its
// spec.storageClassName, or "" (volumes of no class) when it names none.
// pvctl gives a class-less claim the default class before matching.
func ClaimClass(c *kplanev1.PersistentVolumeClaim) string {
	return c.GetSpec().GetStorageClassName()
}

// Request is the claim's storage request.
func Request(c *kplanev1.PersistentVolumeClaim) (quantity.Quantity, error) {
	s, ok := c.GetSpec().GetResources().GetRequests()[kplanev1.ResourceStorage]
	if !ok {
		return quantity.Quantity{}, fmt.Errorf("claim %s/%s has no storage request", c.GetMetadata().GetNamespace(), c.GetMetadata().GetName())
	}
	q, err := quantity.Parse(s)
	if err != nil {
		return quantity.Quantity{}, fmt.Errorf("claim %s/%s: spec.resources.requests[storage]: %w", c.GetMetadata().GetNamespace(), c.GetMetadata().GetName(), err)
	}
	return q, nil
}

// Capacity is the volume's storage capacity.
func Capacity(pv *kplanev1.PersistentVolume) (quantity.Quantity, error) {
	s, ok := pv.GetSpec().GetCapacity()[kplanev1.ResourceStorage]
	if !ok {
		return quantity.Quantity{}, fmt.Errorf("volume %s has no storage capacity", pv.GetMetadata().GetName())
	}
	q, err := quantity.Parse(s)
	if err != nil {
		return quantity.Quantity{}, fmt.Errorf("volume %s: spec.capacity[storage]: %w", pv.GetMetadata().GetName(), err)
	}
	return q, nil
}

// ClaimRefers reports whether the volume's claimRef names the claim: same
// namespace and name, and the same uid when the reference has one (a
// reference without uid is a user's pre-binding to a claim not yet seen).
func ClaimRefers(pv *kplanev1.PersistentVolume, c *kplanev1.PersistentVolumeClaim) bool {
	ref := pv.GetSpec().GetClaimRef()
	if ref == nil || ref.GetName() != c.GetMetadata().GetName() || ref.GetNamespace() != c.GetMetadata().GetNamespace() {
		return false
	}
	return ref.GetUid() == "" || ref.GetUid() == c.GetMetadata().GetUid()
}

// Match reports whether pv can be bound to claim, and if not the first
// reason it cannot. node, when not nil, is the node the claim's first
// consumer was scheduled to (WaitForFirstConsumer): the volume's node
// affinity must admit it. A volume pre-bound to the claim skips the
// availability test; the other rules hold for every volume, as in
// Kubernetes.
func Match(claim *kplanev1.PersistentVolumeClaim, pv *kplanev1.PersistentVolume, node *kplanev1.Node) (bool, string) {
	req, err := Request(claim)
	if err != nil {
		return false, ReasonInvalid
	}
	return match(claim, req, pv, node)
}

// match is Match with the claim's request parsed once (BestMatch tries
// every volume).
func match(claim *kplanev1.PersistentVolumeClaim, req quantity.Quantity, pv *kplanev1.PersistentVolume, node *kplanev1.Node) (bool, string) {
	spec := pv.GetSpec()
	if pv.GetMetadata().GetDeletionTimestamp() != nil {
		return false, ReasonBeingDeleted
	}
	if ref := spec.GetClaimRef(); ref != nil {
		if !ClaimRefers(pv, claim) {
			return false, ReasonBoundElsewhere
		}
	} else if ph := pv.GetStatus().GetPhase(); ph != kplanev1.VolumeAvailable && ph != kplanev1.VolumePending && ph != "" {
		return false, ReasonNotAvailable
	}
	if pv.GetSpec().GetStorageClassName() != ClaimClass(claim) {
		return false, ReasonClass
	}
	for _, m := range claim.GetSpec().GetAccessModes() {
		if !slices.Contains(spec.GetAccessModes(), m) {
			return false, ReasonAccessModes
		}
	}
	capacity, err := Capacity(pv)
	if err != nil {
		return false, ReasonInvalid
	}
	if capacity.Cmp(req) < 0 {
		return false, ReasonCapacity
	}
	if modeOf(spec.GetVolumeMode()) != modeOf(claim.GetSpec().GetVolumeMode()) {
		return false, ReasonVolumeMode
	}
	if sel := claim.GetSpec().GetSelector(); sel != nil {
		s, err := labels.FromLabelSelector(sel)
		if err != nil {
			return false, ReasonInvalid
		}
		if !s.Matches(pv.GetMetadata().GetLabels()) {
			return false, ReasonSelector
		}
	}
	if node != nil {
		ok, err := NodeAdmits(pv, node)
		if err != nil {
			return false, ReasonInvalid
		}
		if !ok {
			return false, ReasonNodeAffinity
		}
	}
	return true, ""
}

// modeOf defaults an empty volumeMode to Filesystem, as the apiserver does.
func modeOf(m string) string {
	if m == "" {
		return kplanev1.VolumeModeFilesystem
	}
	return m
}

// BestMatch picks the volume for claim among pvs: a volume pre-bound to
// the claim wins; otherwise the smallest fitting volume. Among volumes of
// that size the claim's own order decides (a hash of its uid and the
// volume's name): the choice is stable for one claim, and claims binding
// at the same time spread over equal volumes rather than all racing for
// the first. It returns nil when none fits.
func BestMatch(claim *kplanev1.PersistentVolumeClaim, pvs []*kplanev1.PersistentVolume, node *kplanev1.Node) *kplanev1.PersistentVolume {
	var best *kplanev1.PersistentVolume
	var bestCap quantity.Quantity
	var bestRank uint64
	uid := claim.GetMetadata().GetUid()
	req, err := Request(claim)
	if err != nil {
		return nil
	}
	for _, pv := range pvs {
		if ok, _ := match(claim, req, pv, node); !ok {
			continue
		}
		if pv.GetSpec().GetClaimRef() != nil {
			return pv // pre-bound to this very claim
		}
		if name := claim.GetSpec().GetVolumeName(); name != "" && pv.GetMetadata().GetName() != name {
			continue
		}
		c, _ := Capacity(pv) // Match parsed it
		r := rank(uid, pv.GetMetadata().GetName())
		if best == nil || c.Cmp(bestCap) < 0 || (c.Cmp(bestCap) == 0 && r < bestRank) {
			best, bestCap, bestRank = pv, c, r
		}
	}
	return best
}

// rank orders equal volumes for one claim.
func rank(claimUID, volume string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(claimUID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(volume))
	return h.Sum64()
}

// NodeAdmits reports whether the volume's node affinity admits node: no
// affinity admits every node; otherwise one of the required terms must
// match all its requirements against the node's labels and fields.
func NodeAdmits(pv *kplanev1.PersistentVolume, node *kplanev1.Node) (bool, error) {
	req := pv.GetSpec().GetNodeAffinity().GetRequired()
	if req == nil {
		return true, nil
	}
	ok, err := NodeSelectorMatches(req, node.GetMetadata().GetName(), node.GetMetadata().GetLabels())
	if err != nil {
		return false, fmt.Errorf("volume %s: spec.nodeAffinity: %w", pv.GetMetadata().GetName(), err)
	}
	return ok, nil
}

// FieldNodeName is the one node field a NodeSelectorTerm's matchFields may
// test, as in Kubernetes.
const FieldNodeName = "metadata.name"

// NodeSelectorMatches reports whether one of sel's terms matches the node
// called name with labels lbls. A term with no requirements matches
// nothing, as in Kubernetes. It is the one matcher of node selector terms
// (volume node affinity, the scheduler's NodeAffinity, daemonsetctl).
func NodeSelectorMatches(sel *kplanev1.NodeSelector, name string, lbls map[string]string) (bool, error) {
	for _, term := range sel.GetNodeSelectorTerms() {
		ok, err := NodeSelectorTermMatches(term, name, lbls)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// NodeSelectorTermMatches reports whether every requirement of term
// matches: matchExpressions against lbls, matchFields against the node's
// name (false for a term without requirements).
func NodeSelectorTermMatches(term *kplanev1.NodeSelectorTerm, name string, lbls map[string]string) (bool, error) {
	if len(term.GetMatchExpressions()) == 0 && len(term.GetMatchFields()) == 0 {
		return false, nil
	}
	for _, r := range term.GetMatchExpressions() {
		ok, err := requirementMatches(r, lbls)
		if err != nil || !ok {
			return false, err
		}
	}
	for _, r := range term.GetMatchFields() {
		if r.GetKey() != FieldNodeName {
			return false, fmt.Errorf("matchFields: unknown field %q (only %s)", r.GetKey(), FieldNodeName)
		}
		if r.GetOperator() != "In" && r.GetOperator() != "NotIn" {
			return false, fmt.Errorf("matchFields: operator %q (only In and NotIn)", r.GetOperator())
		}
		ok, err := requirementMatches(r, map[string]string{FieldNodeName: name})
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func requirementMatches(r *kplanev1.NodeSelectorRequirement, lbls map[string]string) (bool, error) {
	v, has := lbls[r.GetKey()]
	switch r.GetOperator() {
	case "In":
		return has && slices.Contains(r.GetValues(), v), nil
	case "NotIn":
		return !has || !slices.Contains(r.GetValues(), v), nil
	case "Exists":
		return has, nil
	case "DoesNotExist":
		return !has, nil
	case "Gt", "Lt":
		if len(r.GetValues()) != 1 {
			return false, fmt.Errorf("operator %s needs one value", r.GetOperator())
		}
		want, err := strconv.ParseInt(r.GetValues()[0], 10, 64)
		if err != nil {
			return false, fmt.Errorf("operator %s: value %q is not an integer", r.GetOperator(), r.GetValues()[0])
		}
		if !has {
			return false, nil
		}
		got, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false, nil //nolint:nilerr // a label that is not a number does not match, as in Kubernetes
		}
		if r.GetOperator() == "Gt" {
			return got > want, nil
		}
		return got < want, nil
	}
	return false, fmt.Errorf("unknown operator %q", r.GetOperator())
}

// HostnameAffinity pins a volume to one node by its hostname label.
func HostnameAffinity(node string) *kplanev1.VolumeNodeAffinity {
	return &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{
		MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: kplanev1.LabelHostname, Operator: "In", Values: []string{node}}},
	}}}}
}

// PodClaims are the names of the claims a pod's volumes use.
func PodClaims(pod *kplanev1.Pod) []string {
	var names []string
	for _, v := range pod.GetSpec().GetVolumes() {
		if c := v.GetPersistentVolumeClaim(); c != nil {
			names = append(names, c.GetClaimName())
		}
	}
	return names
}
