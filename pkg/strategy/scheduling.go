package strategy

import (
	"fmt"
	"strings"

	"github.com/kplane/kplane/pkg/validation"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Values of topologySpreadConstraints, as Kubernetes has them.
var (
	unsatisfiableActions = []string{"DoNotSchedule", "ScheduleAnyway"}
	inclusionPolicies    = []string{"Honor", "Ignore"}
)

// validateAffinity checks a pod's node affinity (as a volume's node
// selector, preferred weights in 1..100) and pod (anti-)affinity terms
// (a topologyKey that is a qualified name, valid selectors, weights in
// 1..100).
func validateAffinity(a *kplanev1.Affinity, path string, errs *validation.ErrorList) {
	if a == nil {
		return
	}
	if na := a.GetNodeAffinity(); na != nil {
		np := child(path, "nodeAffinity")
		if req := na.GetRequiredDuringSchedulingIgnoredDuringExecution(); req != nil {
			validateNodeSelector(req, child(np, "requiredDuringSchedulingIgnoredDuringExecution"), errs)
		}
		for i, t := range na.GetPreferredDuringSchedulingIgnoredDuringExecution() {
			tp := index(child(np, "preferredDuringSchedulingIgnoredDuringExecution"), i)
			validateWeight(t.GetWeight(), child(tp, "weight"), errs)
			if t.GetPreference() == nil {
				errs.Required(child(tp, "preference"), "")
				continue
			}
			validateNodeSelectorTerm(t.GetPreference(), child(tp, "preference"), errs)
		}
	}
	terms := func(p string, req []*kplanev1.PodAffinityTerm, pref []*kplanev1.WeightedPodAffinityTerm) {
		for i, t := range req {
			validatePodAffinityTerm(t, index(child(p, "requiredDuringSchedulingIgnoredDuringExecution"), i), errs)
		}
		for i, t := range pref {
			tp := index(child(p, "preferredDuringSchedulingIgnoredDuringExecution"), i)
			validateWeight(t.GetWeight(), child(tp, "weight"), errs)
			if t.GetPodAffinityTerm() == nil {
				errs.Required(child(tp, "podAffinityTerm"), "")
				continue
			}
			validatePodAffinityTerm(t.GetPodAffinityTerm(), child(tp, "podAffinityTerm"), errs)
		}
	}
	if pa := a.GetPodAffinity(); pa != nil {
		terms(child(path, "podAffinity"), pa.GetRequiredDuringSchedulingIgnoredDuringExecution(), pa.GetPreferredDuringSchedulingIgnoredDuringExecution())
	}
	if pa := a.GetPodAntiAffinity(); pa != nil {
		terms(child(path, "podAntiAffinity"), pa.GetRequiredDuringSchedulingIgnoredDuringExecution(), pa.GetPreferredDuringSchedulingIgnoredDuringExecution())
	}
}

func validateWeight(w int32, path string, errs *validation.ErrorList) {
	if w < 1 || w > 100 {
		errs.Invalid(path, w, "must be in the range 1-100")
	}
}

func validatePodAffinityTerm(t *kplanev1.PodAffinityTerm, path string, errs *validation.ErrorList) {
	validateTopologyKey(t.GetTopologyKey(), child(path, "topologyKey"), errs)
	if t.GetLabelSelector() != nil {
		errs.AddAll(validation.ValidateLabelSelector(t.GetLabelSelector(), child(path, "labelSelector")))
	}
	if t.GetNamespaceSelector() != nil {
		errs.AddAll(validation.ValidateLabelSelector(t.GetNamespaceSelector(), child(path, "namespaceSelector")))
	}
	for i, ns := range t.GetNamespaces() {
		validateName(errs, index(child(path, "namespaces"), i), ns, true, validation.IsDNS1123Label)
	}
}

func validateTopologyKey(key, path string, errs *validation.ErrorList) {
	if key == "" {
		errs.Required(path, "can not be empty")
		return
	}
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		errs.InvalidMsgs(path, key, msgs)
	}
}

// validateTopologySpread checks topologySpreadConstraints: maxSkew > 0,
// a topologyKey, whenUnsatisfiable and the policies from their sets,
// minDomains > 0 and only with DoNotSchedule, no two constraints with the
// same topologyKey and whenUnsatisfiable, and matchLabelKeys neither
// empty nor also in the labelSelector.
func validateTopologySpread(cs []*kplanev1.TopologySpreadConstraint, path string, errs *validation.ErrorList) {
	seen := map[string]bool{}
	for i, c := range cs {
		cp := index(path, i)
		if c.GetMaxSkew() <= 0 {
			errs.Invalid(child(cp, "maxSkew"), c.GetMaxSkew(), "must be greater than zero")
		}
		validateTopologyKey(c.GetTopologyKey(), child(cp, "topologyKey"), errs)
		oneOf(errs, child(cp, "whenUnsatisfiable"), c.GetWhenUnsatisfiable(), unsatisfiableActions...)
		pair := c.GetTopologyKey() + "\x00" + c.GetWhenUnsatisfiable()
		if seen[pair] {
			errs.Duplicate(cp, fmt.Sprintf("{%v, %v}", c.GetTopologyKey(), c.GetWhenUnsatisfiable()))
		}
		seen[pair] = true
		if c.MinDomains != nil {
			if c.GetMinDomains() <= 0 {
				errs.Invalid(child(cp, "minDomains"), c.GetMinDomains(), "must be greater than 0")
			} else if c.GetWhenUnsatisfiable() != "DoNotSchedule" {
				errs.Invalid(child(cp, "minDomains"), c.GetMinDomains(), "can only use minDomains if whenUnsatisfiable=DoNotSchedule")
			}
		}
		if c.GetNodeAffinityPolicy() != "" {
			oneOf(errs, child(cp, "nodeAffinityPolicy"), c.GetNodeAffinityPolicy(), inclusionPolicies...)
		}
		if c.GetNodeTaintsPolicy() != "" {
			oneOf(errs, child(cp, "nodeTaintsPolicy"), c.GetNodeTaintsPolicy(), inclusionPolicies...)
		}
		if c.GetLabelSelector() != nil {
			errs.AddAll(validation.ValidateLabelSelector(c.GetLabelSelector(), child(cp, "labelSelector")))
		}
		for j, k := range c.GetMatchLabelKeys() {
			kp := index(child(cp, "matchLabelKeys"), j)
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				errs.InvalidMsgs(kp, k, msgs)
				continue
			}
			if _, ok := c.GetLabelSelector().GetMatchLabels()[k]; ok {
				errs.Invalid(kp, k, "exists in both matchLabelKeys and labelSelector")
			}
			for _, e := range c.GetLabelSelector().GetMatchExpressions() {
				if e.GetKey() == k {
					errs.Invalid(kp, k, "exists in both matchLabelKeys and labelSelector")
				}
			}
		}
	}
}

// ---- PriorityClass

var preemptionPolicies = []string{kplanev1.PreemptLowerPriority, kplanev1.PreemptNever}

func defaultPriorityClass(pc *kplanev1.PriorityClass) {
	if pc.PreemptionPolicy == nil {
		p := kplanev1.PreemptLowerPriority
		pc.PreemptionPolicy = &p
	}
}

// validatePriorityClass: a user class may not take the system prefix or
// a value above HighestUserDefinablePriority; the built-in system classes
// are not objects.
func validatePriorityClass(pc *kplanev1.PriorityClass) validation.ErrorList {
	var errs validation.ErrorList
	name := pc.GetMetadata().GetName()
	if strings.HasPrefix(name, "system-") {
		errs.Forbidden("metadata.name", "priority class names with 'system-' prefix are reserved for system use only")
	}
	if pc.GetValue() > kplanev1.HighestUserDefinablePriority {
		errs.Forbidden("value", fmt.Sprintf("maximum allowed value of a user defined priority is %d", kplanev1.HighestUserDefinablePriority))
	}
	oneOf(&errs, "preemptionPolicy", pc.GetPreemptionPolicy(), preemptionPolicies...)
	return errs
}

// validatePriorityClassUpdate keeps value and preemptionPolicy: pods
// already resolved their priority from them.
func validatePriorityClassUpdate(pc, old *kplanev1.PriorityClass) validation.ErrorList {
	var errs validation.ErrorList
	if pc.GetValue() != old.GetValue() {
		errs.Forbidden("value", "may not be changed in an update.")
	}
	if pc.GetPreemptionPolicy() != old.GetPreemptionPolicy() {
		errs.Forbidden("preemptionPolicy", "may not be changed in an update.")
	}
	return errs
}
