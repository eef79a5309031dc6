package strategy

import (
	"strings"

	"github.com/kplane/kplane/pkg/quantity"
	"github.com/kplane/kplane/pkg/validation"
)

// Standard resource names. Anything else must be an extended resource: a
// qualified name with a domain prefix ("example.com/gpu").
const (
	resourceCPU              = "cpu"
	resourceMemory           = "memory"
	resourcePods             = "pods"
	resourceEphemeralStorage = "ephemeral-storage"
	resourceStorage          = "storage"
)

var standardResources = map[string]bool{
	resourceCPU: true, resourceMemory: true, resourcePods: true, resourceEphemeralStorage: true,
}

// validateResourceName checks a key of requests, limits, capacity or
// allocatable.
func validateResourceName(name, path string, errs *validation.ErrorList) bool {
	if standardResources[name] || strings.HasPrefix(name, "hugepages-") {
		return true
	}
	if msgs := validation.IsQualifiedName(name); len(msgs) > 0 {
		errs.InvalidMsgs(path, name, msgs)
		return false
	}
	if !strings.Contains(name, "/") {
		errs.Invalid(path, name, "must be a standard resource name (cpu, memory, pods, ephemeral-storage) "+
			"or a domain-prefixed extended resource name (e.g. example.com/gpu)")
		return false
	}
	return true
}

// isExtended reports names outside the standard set; their amounts are
// whole units (devices), never fractions.
func isExtended(name string) bool {
	return !standardResources[name] && !strings.HasPrefix(name, "hugepages-")
}

// validateResourceList checks every name and value of the resource map
// at path.field. Paths are built only for the errors: every pod created
// runs this for its requests and limits.
func validateResourceList(list map[string]string, path, field string, errs *validation.ErrorList) {
	var buf [8]string // a resource map's keys, sorted on the stack
	for _, name := range validation.AppendSortedKeys(buf[:0], list) {
		v := list[name]
		q, err := quantity.ParseNonNegative(v)
		switch {
		case !resourceNameValid(name):
			validateResourceName(name, child(path, field), errs)
		case err != nil:
			errs.Invalid(key(child(path, field), name), v, quantity.Reason(err).Error())
		case isExtended(name) && !q.IsWhole():
			errs.Invalid(key(child(path, field), name), v, "must be an integer")
		}
	}
}

// resourceNameValid is validateResourceName without recording anything.
func resourceNameValid(name string) bool {
	return standardResources[name] || strings.HasPrefix(name, "hugepages-") ||
		strings.Contains(name, "/") && len(validation.IsQualifiedName(name)) == 0
}

// resourceAmount is the amount of a valid entry of a resource map, as
// validateResourceList accepts it; ok is false for an entry it rejects.
func resourceAmount(name, v string) (q quantity.Quantity, ok bool) {
	q, err := quantity.ParseNonNegative(v)
	if err != nil || !resourceNameValid(name) || isExtended(name) && !q.IsWhole() {
		return quantity.Quantity{}, false
	}
	return q, true
}

// validateStorageList checks a claim's requests or limits, where storage
// is the only resource.
func validateStorageList(list map[string]string, path string, errs *validation.ErrorList) map[string]quantity.Quantity {
	out := make(map[string]quantity.Quantity, len(list))
	for _, name := range validation.SortedKeys(list) {
		if name != resourceStorage {
			errs.NotSupported(path, name, []string{resourceStorage})
			continue
		}
		if q, ok := validateQuantity(list[name], validation.Key(path, name), errs); ok {
			out[name] = q
		}
	}
	return out
}

// validateQuantity parses a non-negative quantity, recording the problem.
func validateQuantity(s, path string, errs *validation.ErrorList) (quantity.Quantity, bool) {
	q, err := quantity.ParseNonNegative(s)
	if err != nil {
		errs.Invalid(path, s, quantity.Reason(err).Error())
		return quantity.Quantity{}, false
	}
	return q, true
}
