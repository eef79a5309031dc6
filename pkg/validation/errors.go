package validation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The helpers below produce the Kubernetes-style detail prefixes
// ("Required value", "Invalid value: ...", "Unsupported value: ...") so that
// every strategy words the same kind of problem the same way, and clients
// can recognise them.

// Required records that path must be set.
func (l *ErrorList) Required(path, detail string) {
	if detail == "" {
		l.Add(path, "Required value")
		return
	}
	l.Add(path, "Required value: %s", detail)
}

// Invalid records that value is not acceptable at path, with the reason.
func (l *ErrorList) Invalid(path string, value any, detail string) {
	l.Add(path, "Invalid value: %s: %s", quoteValue(value), detail)
}

// NotSupported records that value is not one of the supported values.
func (l *ErrorList) NotSupported(path string, value any, supported []string) {
	quoted := make([]string, len(supported))
	for i, s := range supported {
		quoted[i] = strconv.Quote(s)
	}
	l.Add(path, "Unsupported value: %s: supported values: %s", quoteValue(value), strings.Join(quoted, ", "))
}

// Duplicate records that value occurs more than once where it must be unique.
func (l *ErrorList) Duplicate(path string, value any) {
	l.Add(path, "Duplicate value: %s", quoteValue(value))
}

// Forbidden records that path may not be set (or changed) as requested.
func (l *ErrorList) Forbidden(path, detail string) {
	l.Add(path, "Forbidden: %s", detail)
}

// TooLong records that the value at path is longer than max (bytes or items).
func (l *ErrorList) TooLong(path string, max int) {
	l.Add(path, "Too long: may not be more than %d bytes", max)
}

// InvalidMsgs records one Invalid error per message returned by a format
// check (IsDNS1123Label and friends); it does nothing when msgs is empty.
func (l *ErrorList) InvalidMsgs(path string, value any, msgs []string) {
	for _, m := range msgs {
		l.Invalid(path, value, m)
	}
}

// AddAll appends other to the list.
func (l *ErrorList) AddAll(other ErrorList) {
	*l = append(*l, other...)
}

// NotFound records that the value at path refers to something that does
// not exist (e.g. a volumeMount naming an undeclared volume).
func (l *ErrorList) NotFound(path string, value any) {
	l.Add(path, "Not found: %s", quoteValue(value))
}

// Immutable records that path may not change on update; value is the new
// value.
func (l *ErrorList) Immutable(path string, value any) {
	l.Invalid(path, value, "field is immutable")
}

// maxValueLen bounds how much of a structured value an error message
// repeats back: enough to recognise it, not a whole pod template.
const maxValueLen = 200

// quoteValue renders a value the way Invalid shows it: strings quoted,
// maps and messages as compact JSON, everything else with %v.
func quoteValue(v any) string {
	var s string
	switch t := v.(type) {
	case string:
		return strconv.Quote(t)
	case *string:
		if t == nil {
			return "null"
		}
		return strconv.Quote(*t)
	case proto.Message:
		b, err := protojson.MarshalOptions{}.Marshal(t)
		if err != nil {
			return fmt.Sprintf("%v", t)
		}
		// protojson randomises whitespace; compact it for stable messages.
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return string(b)
		}
		s = buf.String()
	case map[string]string:
		b, _ := json.Marshal(t) // map[string]string always marshals; keys come out sorted
		s = string(b)
	default:
		return fmt.Sprintf("%v", v)
	}
	if len(s) > maxValueLen {
		s = s[:maxValueLen] + "..."
	}
	return s
}

// Child returns path extended by a field name ("spec" + "replicas").
func Child(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Index returns path extended by a list index ("containers[0]").
func Index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// Key returns path extended by a map key (`labels["app"]`).
func Key(path, key string) string {
	return path + "[" + strconv.Quote(key) + "]"
}
