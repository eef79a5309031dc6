package validation

import kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

// Label selector operators of LabelSelectorRequirement.
var selectorOperators = []string{"In", "NotIn", "Exists", "DoesNotExist"}

// ValidateLabelSelector checks a LabelSelector: matchLabels as labels, and
// each matchExpression's key, operator and values (In/NotIn need values,
// Exists/DoesNotExist none).
func ValidateLabelSelector(ls *kplanev1.LabelSelector, path string) ErrorList {
	var errs ErrorList
	if ls == nil {
		return errs
	}
	errs.AddAll(ValidateLabels(ls.GetMatchLabels(), Child(path, "matchLabels")))
	for i, e := range ls.GetMatchExpressions() {
		p := Index(Child(path, "matchExpressions"), i)
		errs.InvalidMsgs(Child(p, "key"), e.GetKey(), IsQualifiedName(e.GetKey()))
		switch e.GetOperator() {
		case "In", "NotIn":
			if len(e.GetValues()) == 0 {
				errs.Required(Child(p, "values"), "must be specified when `operator` is 'In' or 'NotIn'")
			}
		case "Exists", "DoesNotExist":
			if len(e.GetValues()) > 0 {
				errs.Forbidden(Child(p, "values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
			}
		default:
			errs.NotSupported(Child(p, "operator"), e.GetOperator(), selectorOperators)
		}
		for j, v := range e.GetValues() {
			errs.InvalidMsgs(Index(Child(p, "values"), j), v, IsValidLabelValue(v))
		}
	}
	return errs
}

// NonNegative records an error when v < 0. The message carries no
// "Invalid value" prefix, matching the API's documented wording
// ("spec.replicas: must be greater than or equal to 0").
func (l *ErrorList) NonNegative(path string, v int64) {
	if v < 0 {
		l.Add(path, "must be greater than or equal to 0")
	}
}

// Positive records an error when v <= 0.
func (l *ErrorList) Positive(path string, v int64) {
	if v <= 0 {
		l.Add(path, "must be greater than 0")
	}
}
