// Package labels parses and evaluates Kubernetes label selectors
// ("app=web,tier!=db,env in (a,b),!legacy") and converts the structured
// LabelSelector of the API (matchLabels, matchExpressions) into the same
// Selector, so the apiserver, controllers and kpctl all match labels one way.
package labels

import (
	"fmt"
	"slices"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// Selector decides whether a set of labels matches.
type Selector interface {
	// Matches reports whether labels satisfy every requirement.
	Matches(labels map[string]string) bool
	// Empty reports whether the selector has no requirements (and so
	// matches everything).
	Empty() bool
	// String returns a canonical form that Parse accepts again.
	String() string
}

// Operator is the relation a Requirement checks.
type Operator string

// The operators of the selector syntax. "==" parses as Equals.
const (
	Equals       Operator = "="
	NotEquals    Operator = "!="
	In           Operator = "in"
	NotIn        Operator = "notin"
	Exists       Operator = "exists"
	DoesNotExist Operator = "!"
)

// Requirement is one condition on one label key. Values is sorted and has
// exactly one element for Equals/NotEquals, at least one for In/NotIn and
// none for Exists/DoesNotExist.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// NewRequirement validates and builds a requirement. The key must be a
// qualified name and every value a valid label value.
func NewRequirement(key string, op Operator, values []string) (Requirement, error) {
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return Requirement{}, fmt.Errorf("invalid label key %q: %s", key, strings.Join(msgs, "; "))
	}
	switch op {
	case Equals, NotEquals:
		if len(values) != 1 {
			return Requirement{}, fmt.Errorf("key %q: exactly one value is required for operator %q", key, op)
		}
	case In, NotIn:
		if len(values) == 0 {
			return Requirement{}, fmt.Errorf("key %q: for 'in' and 'notin' the set of values must not be empty", key)
		}
	case Exists, DoesNotExist:
		if len(values) != 0 {
			return Requirement{}, fmt.Errorf("key %q: values must be empty for exists and does-not-exist requirements", key)
		}
	default:
		return Requirement{}, fmt.Errorf("key %q: unknown operator %q", key, op)
	}
	for _, v := range values {
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return Requirement{}, fmt.Errorf("invalid label value %q for key %q: %s", v, key, strings.Join(msgs, "; "))
		}
	}
	vs := slices.Clone(values)
	slices.Sort(vs)
	return Requirement{Key: key, Operator: op, Values: slices.Compact(vs)}, nil
}

// Matches reports whether labels satisfy the requirement. As in
// Kubernetes, != and notin also match when the key is absent.
func (r Requirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case Equals, In:
		return ok && slices.Contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !slices.Contains(r.Values, v)
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	}
	return false
}

// String renders the requirement in selector syntax.
func (r Requirement) String() string {
	switch r.Operator {
	case Equals, NotEquals:
		return r.Key + string(r.Operator) + r.Values[0]
	case In, NotIn:
		return r.Key + " " + string(r.Operator) + " (" + strings.Join(r.Values, ",") + ")"
	case Exists:
		return r.Key
	case DoesNotExist:
		return "!" + r.Key
	}
	return ""
}

// compare orders requirements for the canonical form: by key, then
// operator, then values.
func compare(a, b Requirement) int {
	if c := strings.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Operator), string(b.Operator)); c != 0 {
		return c
	}
	return slices.Compare(a.Values, b.Values)
}

// internalSelector is a conjunction of requirements kept in canonical order.
type internalSelector []Requirement

// New builds a selector that is the AND of reqs.
func New(reqs ...Requirement) Selector {
	s := internalSelector(slices.Clone(reqs))
	slices.SortStableFunc(s, compare)
	return slices.CompactFunc(s, func(a, b Requirement) bool { return compare(a, b) == 0 })
}

func (s internalSelector) Matches(labels map[string]string) bool {
	for _, r := range s {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

func (s internalSelector) Empty() bool { return len(s) == 0 }

func (s internalSelector) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// Requirements returns the selector's requirements in canonical order, and
// false for a selector that is not a conjunction of requirements (Nothing).
func Requirements(s Selector) ([]Requirement, bool) {
	is, ok := s.(internalSelector)
	if !ok {
		return nil, false
	}
	return slices.Clone([]Requirement(is)), true
}

// Everything returns a selector that matches every label set.
func Everything() Selector { return internalSelector(nil) }

type nothingSelector struct{}

func (nothingSelector) Matches(map[string]string) bool { return false }
func (nothingSelector) Empty() bool                    { return false }

// String is empty: the selector syntax cannot express "nothing".
func (nothingSelector) String() string { return "" }

// Nothing returns a selector that matches no label set (what a nil
// LabelSelector means).
func Nothing() Selector { return nothingSelector{} }

// SelectorFromSet returns a selector requiring every key=value of set. An
// empty set selects everything. Keys and values are not validated, so the
// String of a selector built from an invalid set may not parse.
func SelectorFromSet(set map[string]string) Selector {
	reqs := make([]Requirement, 0, len(set))
	for k, v := range set {
		reqs = append(reqs, Requirement{Key: k, Operator: Equals, Values: []string{v}})
	}
	return New(reqs...)
}

// ValidatedSelectorFromSet is SelectorFromSet with every key and value
// validated.
func ValidatedSelectorFromSet(set map[string]string) (Selector, error) {
	reqs := make([]Requirement, 0, len(set))
	for _, k := range validation.SortedKeys(set) {
		r, err := NewRequirement(k, Equals, []string{set[k]})
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
	}
	return New(reqs...), nil
}

// FromLabelSelector converts the API's LabelSelector. A nil selector
// matches nothing and an empty one everything, as in Kubernetes.
func FromLabelSelector(ls *kplanev1.LabelSelector) (Selector, error) {
	if ls == nil {
		return Nothing(), nil
	}
	reqs := make([]Requirement, 0, len(ls.GetMatchLabels())+len(ls.GetMatchExpressions()))
	for _, k := range validation.SortedKeys(ls.GetMatchLabels()) {
		r, err := NewRequirement(k, Equals, []string{ls.GetMatchLabels()[k]})
		if err != nil {
			return nil, fmt.Errorf("matchLabels: %w", err)
		}
		reqs = append(reqs, r)
	}
	for i, e := range ls.GetMatchExpressions() {
		op, ok := expressionOps[e.GetOperator()]
		if !ok {
			return nil, fmt.Errorf("matchExpressions[%d]: operator %q is not one of In, NotIn, Exists, DoesNotExist", i, e.GetOperator())
		}
		r, err := NewRequirement(e.GetKey(), op, e.GetValues())
		if err != nil {
			return nil, fmt.Errorf("matchExpressions[%d]: %w", i, err)
		}
		reqs = append(reqs, r)
	}
	return New(reqs...), nil
}

// expressionOps maps the operators of LabelSelectorRequirement.
var expressionOps = map[string]Operator{
	"In":           In,
	"NotIn":        NotIn,
	"Exists":       Exists,
	"DoesNotExist": DoesNotExist,
}
