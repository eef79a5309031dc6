package strategy

import (
	"slices"

	"github.com/kplane/kplane/pkg/quantity"
	"github.com/kplane/kplane/pkg/validation"
)

// ptr returns a pointer to v, for optional proto3 fields.
func ptr[T any](v T) *T { return &v }

// child, index and key shorten path building.
var (
	child = validation.Child
	index = validation.Index
	key   = validation.Key
)

// oneOf records an Unsupported value error when v is not in allowed.
func oneOf(errs *validation.ErrorList, path, v string, allowed ...string) bool {
	if slices.Contains(allowed, v) {
		return true
	}
	errs.NotSupported(path, v, allowed)
	return false
}

// validateName records the messages of a format check for a non-empty
// value, or Required for an empty one when required is set.
func validateName(errs *validation.ErrorList, path, v string, required bool, fn validation.NameFn) {
	if v == "" {
		if required {
			errs.Required(path, "")
		}
		return
	}
	errs.InvalidMsgs(path, v, fn(v))
}

// parseStorage returns the storage entry of a resource map, nil when absent.
func parseStorage(list map[string]string) (*quantity.Quantity, error) {
	s, ok := list[resourceStorage]
	if !ok {
		return nil, nil
	}
	q, err := quantity.Parse(s)
	if err != nil {
		return nil, err
	}
	return &q, nil
}
