package apijson

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// normalizer checks a decoded manifest value against the message schema md
// and rewrites it into the form protojson accepts. It reports the first
// problem with the field path a Kubernetes user writes, because protojson's
// own errors point at offsets in JSON the user never saw.
//
// Beyond checking, it drops explicit nulls (Kubernetes treats them as
// unset) and turns numbers into strings where a string is expected, so that
// quantities written unquoted ("cpu: 1", "storage: 0.5") are accepted.
type normalizer struct {
	// unknown, when set, is told of each unknown field, which is then
	// dropped; when nil an unknown field is an error.
	unknown func(path string)
}

func (n *normalizer) normalize(m map[string]any, md protoreflect.MessageDescriptor, path string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report problems in a stable order
	for _, k := range keys {
		fp := validation.Child(path, k)
		fd := md.Fields().ByJSONName(k)
		if fd == nil && n.unknown != nil {
			n.unknown(fp)
			delete(m, k)
			continue
		}
		if fd == nil {
			return fmt.Errorf("%s: unknown field %q%s", fp, k, suggest(md, k))
		}
		if m[k] == nil {
			delete(m, k)
			continue
		}
		v, err := n.normalizeField(m[k], fd, fp)
		if err != nil {
			return err
		}
		m[k] = v
	}
	return nil
}

// suggest offers the correctly spelled field when k differs only in case or
// uses the proto (snake_case) spelling.
func suggest(md protoreflect.MessageDescriptor, k string) string {
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if strings.EqualFold(f.JSONName(), k) || string(f.Name()) == k {
			return fmt.Sprintf(" (did you mean %q?)", f.JSONName())
		}
	}
	return ""
}

func (n *normalizer) normalizeField(v any, fd protoreflect.FieldDescriptor, path string) (any, error) {
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, typeError(path, "an object", v)
		}
		for k, e := range obj {
			if e == nil {
				delete(obj, k)
				continue
			}
			nv, err := n.normalizeValue(e, fd.MapValue(), validation.Key(path, k))
			if err != nil {
				return nil, err
			}
			obj[k] = nv
		}
		return obj, nil
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return nil, typeError(path, "a list", v)
		}
		for i, e := range list {
			nv, err := n.normalizeValue(e, fd, validation.Index(path, i))
			if err != nil {
				return nil, err
			}
			list[i] = nv
		}
		return list, nil
	default:
		return n.normalizeValue(v, fd, path)
	}
}

// normalizeValue checks one singular value (a list element, a map value or
// a plain field) of the field's kind.
func (n *normalizer) normalizeValue(v any, fd protoreflect.FieldDescriptor, path string) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if IsTimestamp(fd) {
			s, ok := v.(string)
			if !ok {
				return nil, typeError(path, "an RFC 3339 timestamp string", v)
			}
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return nil, fmt.Errorf("%s: invalid timestamp %q: want RFC 3339, e.g. 2024-01-02T15:04:05Z", path, s)
			}
			return s, nil
		}
		if IsStruct(fd) {
			// A free-form object (managedFields' fieldsV1): any object.
			obj, ok := v.(map[string]any)
			if !ok {
				return nil, typeError(path, "an object", v)
			}
			return obj, nil
		}
		if IsIntOrString(fd) {
			out, ok := IntOrStringValue(v)
			if !ok {
				return nil, typeError(path, "a 32-bit integer or a string", v)
			}
			return out, nil
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, typeError(path, "an object", v)
		}
		return obj, n.normalize(obj, fd.Message(), path)
	case protoreflect.StringKind:
		switch t := v.(type) {
		case string:
			return t, nil
		case json.Number:
			return t.String(), nil
		}
		return nil, typeError(path, "a string", v)
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return nil, typeError(path, "a boolean", v)
		}
		return v, nil
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok {
			return nil, typeError(path, "a base64 string", v)
		}
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			return nil, fmt.Errorf("%s: invalid base64 data (use stringData for plain text)", path)
		}
		return s, nil
	case protoreflect.EnumKind:
		s, ok := v.(string)
		if !ok || fd.Enum().Values().ByName(protoreflect.Name(s)) == nil {
			return nil, typeError(path, "one of the enum names of "+string(fd.Enum().Name()), v)
		}
		return s, nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		num, ok := v.(json.Number)
		if !ok {
			return nil, typeError(path, "a number", v)
		}
		if _, err := num.Float64(); err != nil {
			return nil, fmt.Errorf("%s: invalid number %s", path, num)
		}
		return num, nil
	default: // the integer kinds
		num, ok := v.(json.Number)
		if !ok {
			return nil, typeError(path, "an integer", v)
		}
		bits := 64
		if fd.Kind() == protoreflect.Int32Kind || fd.Kind() == protoreflect.Sint32Kind ||
			fd.Kind() == protoreflect.Sfixed32Kind || fd.Kind() == protoreflect.Uint32Kind ||
			fd.Kind() == protoreflect.Fixed32Kind {
			bits = 32
		}
		if _, err := strconv.ParseInt(num.String(), 10, bits); err != nil {
			return nil, fmt.Errorf("%s: %s is not a %d-bit integer", path, num, bits)
		}
		return num, nil
	}
}

func typeError(path, want string, got any) error {
	var desc string
	switch t := got.(type) {
	case string:
		desc = fmt.Sprintf("the string %q", t)
	case json.Number:
		desc = "the number " + t.String()
	case bool:
		desc = strconv.FormatBool(t)
	case []any:
		desc = "a list"
	case map[string]any:
		desc = "an object"
	default:
		desc = fmt.Sprintf("%v", t)
	}
	return fmt.Errorf("%s: expected %s, got %s", path, want, desc)
}

// DecodeOptions changes how ObjectFromMap treats a document.
type DecodeOptions struct {
	// UnknownField, when set, is called with the path of each field the
	// kind does not have, which is then dropped (Kubernetes'
	// fieldValidation Ignore and Warn); when nil such a field is an error
	// (Strict).
	UnknownField func(path string)
}

// ObjectFromMap converts one decoded document of kind (numbers as
// json.Number, apiVersion and kind already removed) into an Object,
// checking it against the kind's schema first so that an error names the
// field path a Kubernetes user wrote. m is modified.
func ObjectFromMap(kind string, m map[string]any, opts DecodeOptions) (*kplanev1.Object, error) {
	info := kplanev1.LookupKind(kind)
	if info == nil {
		return nil, fmt.Errorf("kind: %s", kplanev1.UnknownKindError(kind))
	}
	fd := info.OneofField()
	n := &normalizer{unknown: opts.UnknownField}
	if err := n.normalize(m, fd.Message(), ""); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(map[string]any{fd.JSONName(): m})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	obj := &kplanev1.Object{}
	if err := protojson.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err)
	}
	return obj, nil
}

// ObjectToMap renders an object as Kubernetes shows it: apiVersion and
// kind next to the kind message's own fields (metadata, spec, status).
func ObjectToMap(obj *kplanev1.Object) (map[string]any, error) {
	kind := obj.KindName()
	if kind == "" {
		return nil, fmt.Errorf("empty object")
	}
	m, err := ToMap(obj.Message())
	if err != nil {
		return nil, err
	}
	m["apiVersion"] = kplanev1.APIVersion(kind)
	m["kind"] = kind
	return m, nil
}
