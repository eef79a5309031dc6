// Package apijson renders kplane API messages as the JSON Kubernetes
// writes, for every place that shows objects to users (kpctl's -o json and
// -o yaml, the REST front end). protojson does the field names (the protos
// carry Kubernetes' spelling as json_name); this package fixes the two
// things protojson writes differently from Kubernetes:
//
//   - timestamps: Kubernetes' Time is RFC 3339 to the second
//     ("2026-12-02T17:44:03Z"), MicroTime (fields marked with the
//     kplane.v1.micro_time option) to the microsecond
//     ("2026-12-02T17:44:03.123456Z"); protojson writes nanoseconds;
//   - 64-bit integers: protojson quotes them ("generation": "1"),
//     Kubernetes writes numbers.
//
// Reading needs nothing extra: protojson accepts any RFC 3339 timestamp,
// with or without fractional seconds.
package apijson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// RFC3339Micro is the layout of Kubernetes' MicroTime.
const RFC3339Micro = "2006-01-02T15:04:05.000000Z07:00"

const timestampName = "google.protobuf.Timestamp"

// IsTimestamp reports whether fd holds a google.protobuf.Timestamp.
func IsTimestamp(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == timestampName
}

// IsStruct reports whether fd holds a google.protobuf.Struct, a free-form
// JSON object (managedFields' fieldsV1).
func IsStruct(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.Struct"
}

// IsMicroTime reports whether fd is a timestamp Kubernetes types as
// MicroTime (marked [(kplane.v1.micro_time) = true] in the proto).
func IsMicroTime(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	return opts != nil && proto.GetExtension(opts, kplanev1.E_MicroTime).(bool)
}

// IsIntOrString reports whether fd holds a kplane.v1.IntOrString, which
// JSON shows as a bare number or string, as Kubernetes does.
func IsIntOrString(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == intOrStringName
}

const intOrStringName = "kplane.v1.IntOrString"

// IntOrStringValue turns a decoded JSON value (a json.Number or a string)
// into the protojson form of an IntOrString. ok is false for any other
// value or a number that is not a 32-bit integer.
func IntOrStringValue(v any) (out map[string]any, ok bool) {
	switch t := v.(type) {
	case json.Number:
		if _, err := strconv.ParseInt(t.String(), 10, 32); err != nil {
			return nil, false
		}
		return map[string]any{"type": json.Number("0"), "intVal": t}, true
	case string:
		return map[string]any{"type": json.Number("1"), "strVal": t}, true
	}
	return nil, false
}

// Precision is the resolution Kubernetes keeps for the timestamp field fd:
// a second for Time, a microsecond for MicroTime.
func Precision(fd protoreflect.FieldDescriptor) time.Duration {
	if IsMicroTime(fd) {
		return time.Microsecond
	}
	return time.Second
}

// FormatTime writes t in UTC the way Kubernetes writes a timestamp of the
// given precision (time.Second or time.Microsecond).
func FormatTime(t time.Time, precision time.Duration) string {
	t = t.UTC().Truncate(precision)
	if precision < time.Second {
		return t.Format(RFC3339Micro)
	}
	return t.Format(time.RFC3339)
}

// ToMap renders m as decoded JSON (numbers as json.Number) with
// Kubernetes' timestamps and integers.
func ToMap(m proto.Message) (map[string]any, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	if out == nil {
		out = map[string]any{}
	}
	if err := fixMessage(out, m.ProtoReflect().Descriptor()); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	return out, nil
}

// Marshal renders m as compact JSON with Kubernetes' timestamps and
// integers; keys are sorted.
func Marshal(m proto.Message) ([]byte, error) {
	v, err := ToMap(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// fixMessage rewrites protojson's rendering of one message in place.
func fixMessage(m map[string]any, md protoreflect.MessageDescriptor) error {
	for k, v := range m {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			continue
		}
		switch {
		case fd.IsMap():
			obj, _ := v.(map[string]any)
			for mk, mv := range obj {
				n, err := fixValue(mv, fd.MapValue())
				if err != nil {
					return err
				}
				obj[mk] = n
			}
		case fd.IsList():
			list, _ := v.([]any)
			for i, e := range list {
				n, err := fixValue(e, fd)
				if err != nil {
					return err
				}
				list[i] = n
			}
		default:
			n, err := fixValue(v, fd)
			if err != nil {
				return err
			}
			m[k] = n
		}
	}
	return nil
}

func fixValue(v any, fd protoreflect.FieldDescriptor) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		if IsTimestamp(fd) {
			s, ok := v.(string)
			if !ok {
				return v, nil
			}
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", fd.FullName(), err)
			}
			return FormatTime(t, Precision(fd)), nil
		}
		if IsIntOrString(fd) {
			return intOrStringJSON(v), nil
		}
		if IsStruct(fd) {
			return v, nil
		}
		if obj, ok := v.(map[string]any); ok {
			return obj, fixMessage(obj, fd.Message())
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if s, ok := v.(string); ok {
			return json.Number(s), nil
		}
	}
	return v, nil
}

// intOrStringJSON renders protojson's form of an IntOrString as the bare
// number or string.
func intOrStringJSON(v any) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if t, _ := obj["type"].(string); t == "1" {
		s, _ := obj["strVal"].(string)
		return s
	}
	if n, ok := obj["intVal"].(json.Number); ok {
		return n
	}
	return json.Number("0")
}

// TruncateTimes cuts every timestamp in m (at any depth) to the precision
// Kubernetes keeps for its field, so that what is stored is exactly what
// JSON shows and reads back: a Time to the second, a MicroTime to the
// microsecond. The apiserver applies it to every object it writes, as
// Kubernetes does.
func TruncateTimes(m proto.Message) {
	truncate(m.ProtoReflect())
}

func truncate(r protoreflect.Message) {
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if holdsTimes(fd.MapValue()) {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					truncateValue(mv.Message(), fd.MapValue())
					return true
				})
			}
		case fd.IsList():
			if holdsTimes(fd) {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					truncateValue(l.Get(i).Message(), fd)
				}
			}
		case holdsTimes(fd):
			truncateValue(v.Message(), fd)
		}
		return true
	})
}

// timesIn caches, by message type, whether a message of it can hold a
// timestamp at any depth: the walk skips the subtrees that cannot (a
// pod's containers, say), which were half of its cost on every write.
var timesIn sync.Map // protoreflect.FullName -> bool

// holdsTimes reports whether fd (a message field, or a map's value) is a
// timestamp or a message that can hold one.
func holdsTimes(fd protoreflect.FieldDescriptor) bool {
	if fd.Kind() != protoreflect.MessageKind {
		return false
	}
	if IsTimestamp(fd) {
		return true
	}
	md := fd.Message()
	if v, ok := timesIn.Load(md.FullName()); ok {
		return v.(bool)
	}
	found := reachesTimes(md, map[protoreflect.FullName]bool{})
	timesIn.Store(md.FullName(), found)
	return found
}

// reachesTimes searches md's fields for a timestamp; seen stops at a type
// already being searched (recursive types), whose other paths decide.
func reachesTimes(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Kind() == protoreflect.MessageKind && (IsTimestamp(fd) || reachesTimes(fd.Message(), seen)) {
			return true
		}
	}
	return false
}

func truncateValue(r protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if !IsTimestamp(fd) {
		truncate(r)
		return
	}
	ts, ok := r.Interface().(*timestamppb.Timestamp)
	if !ok {
		return
	}
	p := int32(Precision(fd))
	ts.Nanos -= ts.Nanos % p
}
