// Package fields parses and evaluates Kubernetes field selectors
// ("metadata.name=x,spec.nodeName=n1,status.phase!=Running") for one kind.
// Selectable fields are found generically: a dotted path of JSON field names
// is resolved on the kind's proto message and must end in a scalar field, so
// a new kind (or field) is selectable without any registration.
package fields

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Operator is the relation a Requirement checks.
type Operator string

// Field selector operators; "==" parses as Equals.
const (
	Equals    Operator = "="
	NotEquals Operator = "!="
)

// Requirement is one condition: the field at Field (a dotted JSON path)
// compared with Value. Value is in canonical form for the field's type
// ("" for a string field's empty value, "0", "false" ...).
type Requirement struct {
	Field    string
	Operator Operator
	Value    string
}

// Selector decides whether an object's fields match.
type Selector interface {
	// Matches reports whether obj satisfies every requirement. An object of
	// another kind than the selector's never matches a non-empty selector.
	Matches(obj *kplanev1.Object) bool
	// Empty reports whether the selector has no requirements.
	Empty() bool
	// String returns a canonical form that ParseSelector accepts again.
	String() string
	// Requirements returns the requirements, in the order given.
	Requirements() []Requirement
}

// fieldReq is a requirement resolved against the kind's message.
type fieldReq struct {
	Requirement
	path []protoreflect.FieldDescriptor
}

type selector struct {
	kind protoreflect.FullName
	reqs []fieldReq
}

// Everything returns a selector that matches every object.
func Everything() Selector { return &selector{} }

func (s *selector) Empty() bool { return len(s.reqs) == 0 }

func (s *selector) Requirements() []Requirement {
	out := make([]Requirement, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = r.Requirement
	}
	return out
}

func (s *selector) String() string {
	parts := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		parts[i] = r.Field + string(r.Operator) + escapeValue(r.Value)
	}
	return strings.Join(parts, ",")
}

func (s *selector) Matches(obj *kplanev1.Object) bool {
	if len(s.reqs) == 0 {
		return true
	}
	m := obj.Message()
	if m == nil || m.ProtoReflect().Descriptor().FullName() != s.kind {
		return false
	}
	for _, r := range s.reqs {
		got := fieldValue(m.ProtoReflect(), r.path)
		if (got == r.Value) != (r.Operator == Equals) {
			return false
		}
	}
	return true
}

// fieldValue walks path from msg and renders the scalar at its end
// canonically. Unset messages on the way read as empty, so their fields
// read as zero values.
func fieldValue(msg protoreflect.Message, path []protoreflect.FieldDescriptor) string {
	for _, fd := range path[:len(path)-1] {
		msg = msg.Get(fd).Message()
	}
	fd := path[len(path)-1]
	return formatScalar(fd, msg.Get(fd))
}

func formatScalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.BoolKind:
		return strconv.FormatBool(v.Bool())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(v.Uint(), 10)
	default:
		return strconv.FormatInt(v.Int(), 10)
	}
}

// ParseSelector parses a field selector for kind: comma-separated
// `field=value`, `field==value` or `field!=value`, all of which must hold.
// In a value, a backslash escapes the next character (`\,`, `\=`, `\!`,
// `\\`, or a space to keep it from being trimmed). A field is a dotted path
// of JSON field names ("spec.nodeName") that must end in a string, bool or
// integer field of the kind. An empty string selects everything.
func ParseSelector(kind string, s string) (Selector, error) {
	info := kplanev1.LookupKind(kind)
	if info == nil {
		return nil, fmt.Errorf("field selector %q: %s", s, kplanev1.UnknownKindError(kind))
	}
	desc := info.New().ProtoReflect().Descriptor()
	sel := &selector{kind: desc.FullName()}
	if strings.TrimSpace(s) == "" {
		return sel, nil
	}
	parts, err := splitTerms(s)
	if err != nil {
		return nil, err
	}
	for _, part := range parts {
		field, op, raw, err := splitTerm(part)
		if err != nil {
			return nil, err
		}
		path, err := resolve(desc, field)
		if err != nil {
			return nil, fmt.Errorf("field selector %q: %w", field, err)
		}
		value, err := parseValue(path[len(path)-1], raw)
		if err != nil {
			return nil, fmt.Errorf("field selector %q: %w", strings.TrimSpace(part), err)
		}
		sel.reqs = append(sel.reqs, fieldReq{Requirement: Requirement{Field: field, Operator: op, Value: value}, path: path})
	}
	return sel, nil
}

// splitTerms splits s at commas that are not escaped.
func splitTerms(s string) ([]string, error) {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case ',':
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	parts = append(parts, s[start:])
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			return nil, fmt.Errorf("field selector %q: empty requirement (stray ',')", s)
		}
	}
	return parts, nil
}

// splitTerm splits "field op value" at the first unescaped operator and
// unescapes the value.
func splitTerm(term string) (field string, op Operator, value string, err error) {
	for i := 0; i < len(term); i++ {
		var n int
		switch {
		case term[i] == '\\':
			i++
			continue
		case strings.HasPrefix(term[i:], "!="):
			op, n = NotEquals, 2
		case strings.HasPrefix(term[i:], "=="):
			op, n = Equals, 2
		case term[i] == '=':
			op, n = Equals, 1
		default:
			continue
		}
		field = strings.TrimSpace(term[:i])
		if field == "" {
			return "", "", "", fmt.Errorf("field selector %q: missing field name before %q", strings.TrimSpace(term), op)
		}
		value, err = unescapeValue(term[i+n:])
		if err != nil {
			return "", "", "", fmt.Errorf("field selector %q: %w", strings.TrimSpace(term), err)
		}
		return field, op, value, nil
	}
	return "", "", "", fmt.Errorf("field selector %q: expected <field>=<value>, <field>==<value> or <field>!=<value>", strings.TrimSpace(term))
}

// unescapeValue removes backslash escapes and trims unescaped whitespace
// at both ends. An unescaped '=' or '!' is rejected: it is almost always a
// typo such as "a==b=c" and escaping keeps the canonical form unambiguous.
func unescapeValue(s string) (string, error) {
	var b strings.Builder
	lastKept := 0 // length of b up to the last escaped or non-space byte
	leading := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return "", fmt.Errorf("value ends with an unfinished escape '\\'")
			}
			i++
			b.WriteByte(s[i])
			lastKept = b.Len()
			leading = false
		case c == '=' || c == '!':
			return "", fmt.Errorf("unescaped %q in value (write \\%c)", c, c)
		case isSpace(c):
			if !leading {
				b.WriteByte(c)
			}
		default:
			b.WriteByte(c)
			lastKept = b.Len()
			leading = false
		}
	}
	return b.String()[:lastKept], nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// escapeValue is the inverse of unescapeValue for the canonical form.
func escapeValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\' || c == ',' || c == '=' || c == '!':
			b.WriteByte('\\')
		case isSpace(c) && (i == 0 || i == len(v)-1):
			// Leading and trailing whitespace would be trimmed.
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// resolve maps a dotted JSON path onto field descriptors of desc.
func resolve(desc protoreflect.MessageDescriptor, path string) ([]protoreflect.FieldDescriptor, error) {
	kind := string(desc.Name())
	var out []protoreflect.FieldDescriptor
	cur := desc
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		fd := cur.Fields().ByJSONName(seg)
		if fd == nil {
			return nil, fmt.Errorf("%s has no field %s", kind, path)
		}
		out = append(out, fd)
		last := i == len(segs)-1
		switch {
		case fd.IsList() || fd.IsMap():
			return nil, fmt.Errorf("%s field %s is a list or map; only scalar fields can be selected", kind, strings.Join(segs[:i+1], "."))
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if last {
				return nil, fmt.Errorf("%s field %s is an object; only scalar fields can be selected", kind, path)
			}
			cur = fd.Message()
		case !last:
			return nil, fmt.Errorf("%s has no field %s", kind, path)
		case !isSelectableScalar(fd.Kind()):
			return nil, fmt.Errorf("%s field %s has type %s; only string, bool and integer fields can be selected", kind, path, fd.Kind())
		}
	}
	return out, nil
}

func isSelectableScalar(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.FloatKind, protoreflect.DoubleKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	}
	return true
}

// parseValue checks raw against the field's type and returns it in the
// form formatScalar produces, so matching is a string comparison. An empty
// value stands for the type's zero value.
func parseValue(fd protoreflect.FieldDescriptor, raw string) (string, error) {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.EnumKind:
		return raw, nil
	case protoreflect.BoolKind:
		if raw == "" {
			return "false", nil
		}
		b, err := strconv.ParseBool(raw)
		if err != nil || (raw != "true" && raw != "false") {
			return "", fmt.Errorf("value %q for %s must be true or false", raw, fd.JSONName())
		}
		return strconv.FormatBool(b), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if raw == "" {
			return "0", nil
		}
		u, err := strconv.ParseUint(raw, 10, bitSize(fd.Kind()))
		if err != nil {
			return "", fmt.Errorf("value %q for %s must be an unsigned integer", raw, fd.JSONName())
		}
		return strconv.FormatUint(u, 10), nil
	default:
		if raw == "" {
			return "0", nil
		}
		n, err := strconv.ParseInt(raw, 10, bitSize(fd.Kind()))
		if err != nil {
			return "", fmt.Errorf("value %q for %s must be an integer", raw, fd.JSONName())
		}
		return strconv.FormatInt(n, 10), nil
	}
}

func bitSize(k protoreflect.Kind) int {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return 32
	}
	return 64
}
