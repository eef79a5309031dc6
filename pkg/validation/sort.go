package validation

import (
	"maps"
	"slices"
)

// SortedKeys returns a map's keys in order, so that errors come out in a
// stable order (tests and users diffing two runs both rely on it).
func SortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// AppendSortedKeys appends m's keys, in order, to dst. With dst an array
// on the caller's stack, checking a small map in order allocates nothing
// (SortedKeys allocates the slice).
func AppendSortedKeys[V any](dst []string, m map[string]V) []string {
	n := len(dst)
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst[n:])
	return dst
}
