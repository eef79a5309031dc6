package validation

import (
	"maps"
	"slices"
)

// sortedKeys returns a map's keys in order, so that errors come out in a
// stable order (tests and users diffing two runs both rely on it).
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// SortedKeys is sortedKeys for callers outside the package (strategies
// validating maps of their own).
func SortedKeys[V any](m map[string]V) []string { return sortedKeys(m) }
