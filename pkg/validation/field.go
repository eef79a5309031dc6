// Package validation holds the field-error type that every validation in
// kplane reports, and the format checks (names, labels, quantities) shared
// by the per-kind strategies. The apiserver and kpctl run the same checks,
// so a manifest is rejected with the same message on both sides.
package validation

import (
	"fmt"
	"strings"
)

// Error is one invalid field: Path is the JSON field path as a Kubernetes
// user writes it ("spec.template.spec.containers[0].image").
type Error struct {
	Path   string
	Detail string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Detail
	}
	return e.Path + ": " + e.Detail
}

// ErrorList is every invalid field of one object.
type ErrorList []*Error

// Add appends an error for path.
func (l *ErrorList) Add(path, format string, args ...any) {
	*l = append(*l, &Error{Path: path, Detail: fmt.Sprintf(format, args...)})
}

// Error joins the errors as "path: detail; path: detail".
func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Err returns the list as an error, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}
