package job

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// indexSet is a set of completion indexes, written in status as Kubernetes
// does: ascending, comma-separated, runs of three or more as "a-b"
// ("1,3-5,7").
type indexSet map[int]struct{}

// parseIndexes reads a status index list. Out-of-range and malformed
// items are errors: the set is what the job's exact count rests on.
func parseIndexes(s string, completions int) (indexSet, error) {
	out := indexSet{}
	if s == "" {
		return out, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("index list %q: %q is not a number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("index list %q: %q is not a number", s, hi)
			}
		}
		if a < 0 || b < a || (completions >= 0 && b >= completions) {
			return nil, fmt.Errorf("index list %q: %q is out of range [0, %d)", s, item, completions)
		}
		for i := a; i <= b; i++ {
			out[i] = struct{}{}
		}
	}
	return out, nil
}

func (s indexSet) has(i int) bool { _, ok := s[i]; return ok }

func (s indexSet) add(i int) { s[i] = struct{}{} }

func (s indexSet) sorted() []int {
	out := make([]int, 0, len(s))
	for i := range s {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// String writes the set in the status format.
func (s indexSet) String() string {
	idx := s.sorted()
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		switch j - i {
		case 0:
			b.WriteString(strconv.Itoa(idx[i]))
		case 1:
			fmt.Fprintf(&b, "%d,%d", idx[i], idx[j])
		default:
			fmt.Fprintf(&b, "%d-%d", idx[i], idx[j])
		}
		i = j + 1
	}
	return b.String()
}
