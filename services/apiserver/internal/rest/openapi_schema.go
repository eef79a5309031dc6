package rest

import (
	"reflect"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/pkg/apijson"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// OpenAPI extension names Kubernetes uses and kubectl reads.
const (
	extGVK           = "x-kubernetes-group-version-kind"
	extAction        = "x-kubernetes-action"
	extMergeKey      = "x-kubernetes-patch-merge-key"
	extPatchStrategy = "x-kubernetes-patch-strategy"
	extListType      = "x-kubernetes-list-type"
	extListMapKeys   = "x-kubernetes-list-map-keys"
	extIntOrString   = "x-kubernetes-int-or-string"
	schemaRefPrefix  = "#/components/schemas/"
	listMetaSchema   = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
	statusSchema     = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
	patchSchema      = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
	deleteOptsSchema = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
)

// schemaBuilder derives OpenAPI v3 schemas from the proto descriptors: one
// component per message, named by its proto full name ("kplane.v1.Pod"),
// fields under their JSON names, documented with their proto comments.
// The list-merge extensions are read from the struct tags of Kubernetes'
// own Go type at the same place (k8s.io/api), the source the strategic
// merge patch uses, so the document and the patch agree by construction.
type schemaBuilder struct {
	schemas map[string]map[string]any
}

func newSchemaBuilder() *schemaBuilder {
	return &schemaBuilder{schemas: map[string]map[string]any{}}
}

// kind adds the schema of one kind (and every message it reaches) and
// its List, and returns the kind's component name.
func (b *schemaBuilder) kind(res *resource) string {
	md := res.info.New().ProtoReflect().Descriptor()
	gvk := schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}
	var goType reflect.Type
	if obj, err := kubeTypes.New(gvk); err == nil {
		goType = reflect.TypeOf(obj)
	}
	name := b.message(md, goType)
	s := b.schemas[name]
	props := s["properties"].(map[string]any)
	props["apiVersion"] = map[string]any{"type": "string", "description": "apiVersion is the group/version the object is served as: " + res.GroupVersion() + "."}
	props["kind"] = map[string]any{"type": "string", "description": "kind is the object's kind: " + res.Kind + "."}
	s[extGVK] = []any{gvkMap(gvk)}

	listGVK := gvk
	listGVK.Kind += "List"
	b.schemas[name+"List"] = map[string]any{
		"type":        "object",
		"description": res.Kind + "List is a list of " + res.Kind + " objects.",
		"required":    []any{"items"},
		"properties": map[string]any{
			"apiVersion": map[string]any{"type": "string"},
			"kind":       map[string]any{"type": "string"},
			"metadata":   refSchema(listMetaSchema, "metadata holds the list's resourceVersion and continue token."),
			"items":      map[string]any{"type": "array", "items": ref(name), "description": "items are the objects of the list."},
		},
		extGVK: []any{gvkMap(listGVK)},
	}
	b.metaSchemas()
	return name
}

// metaSchemas adds the meta.k8s.io types the operations answer with or
// take; they are Kubernetes' own wire types, not kplane messages.
func (b *schemaBuilder) metaSchemas() {
	str := map[string]any{"type": "string"}
	b.schemas[listMetaSchema] = map[string]any{
		"type":        "object",
		"description": "ListMeta describes a list: the revision it was read at and how to continue it.",
		"properties": map[string]any{
			"resourceVersion":    str,
			"continue":           str,
			"remainingItemCount": map[string]any{"type": "integer", "format": "int64"},
		},
	}
	b.schemas[statusSchema] = map[string]any{
		"type":        "object",
		"description": "Status is the result of a call that does not return an object, and every error.",
		"properties": map[string]any{
			"apiVersion": str, "kind": str, "status": str, "message": str, "reason": str,
			"code":    map[string]any{"type": "integer", "format": "int32"},
			"details": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
		},
	}
	b.schemas[patchSchema] = map[string]any{
		"type":        "object",
		"description": "Patch is a patch document of the request's Content-Type.",
	}
	b.schemas[deleteOptsSchema] = map[string]any{
		"type":        "object",
		"description": "DeleteOptions may accompany a delete: grace period, propagation policy and preconditions.",
		"properties": map[string]any{
			"apiVersion": str, "kind": str, "propagationPolicy": str,
			"gracePeriodSeconds": map[string]any{"type": "integer", "format": "int64"},
			"dryRun":             map[string]any{"type": "array", "items": str},
			"preconditions": map[string]any{"type": "object", "properties": map[string]any{
				"uid": str, "resourceVersion": str,
			}},
		},
	}
}

// message adds md's schema (once) and returns its component name. goType
// is Kubernetes' Go type at the same place, or nil where there is none.
func (b *schemaBuilder) message(md protoreflect.MessageDescriptor, goType reflect.Type) string {
	name := string(md.FullName())
	if _, ok := b.schemas[name]; ok {
		return name
	}
	props := map[string]any{}
	s := map[string]any{"type": "object", "properties": props}
	if d := kplanev1.Doc(md.FullName()); d != "" {
		s["description"] = d
	}
	b.schemas[name] = s // before the fields: messages may nest themselves
	goFields := jsonFields(goType)
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		gf, ok := goFields[fd.JSONName()]
		var p map[string]any
		if ok {
			p = b.field(fd, &gf)
		} else {
			p = b.field(fd, nil)
		}
		props[fd.JSONName()] = p
	}
	return name
}

// field is the schema of one field, with its comment and, for lists, the
// merge semantics Kubernetes' struct tag gives the field.
func (b *schemaBuilder) field(fd protoreflect.FieldDescriptor, gf *reflect.StructField) map[string]any {
	var goType reflect.Type
	if gf != nil {
		goType = gf.Type
	}
	var s map[string]any
	switch {
	case fd.IsMap():
		s = map[string]any{"type": "object", "additionalProperties": b.value(fd.MapValue(), elem(goType))}
	case fd.IsList():
		s = map[string]any{"type": "array", "items": b.value(fd, elem(goType))}
		if gf != nil {
			addListExtensions(s, gf.Tag)
		}
	default:
		s = b.value(fd, goType)
	}
	d := kplanev1.Doc(fd.FullName())
	if d == "" {
		return s
	}
	if _, isRef := s["$ref"]; isRef {
		// A $ref's siblings are ignored in OpenAPI 3.0; Kubernetes wraps it
		// in allOf to describe the field, and kubectl explain reads that.
		return map[string]any{"allOf": []any{s}, "description": d}
	}
	s["description"] = d
	return s
}

// addListExtensions sets the list's patch strategy and merge key from the
// Go field's patchStrategy/patchMergeKey tags and its list type from them:
// a keyed merge is a map keyed by the merge key, a merge without a key a
// set, anything else is replaced whole (atomic).
func addListExtensions(s map[string]any, tag reflect.StructTag) {
	strategy := tag.Get("patchStrategy")
	key := tag.Get("patchMergeKey")
	if strategy != "" {
		s[extPatchStrategy] = strategy
	}
	if key != "" {
		s[extMergeKey] = key
	}
	merge := false
	for _, st := range strings.Split(strategy, ",") {
		merge = merge || st == "merge"
	}
	switch {
	case merge && key != "":
		s[extListType] = "map"
		s[extListMapKeys] = []any{key}
	case merge:
		s[extListType] = "set"
	default:
		s[extListType] = "atomic"
	}
}

// value is the schema of one value of fd's type (a list element, a map
// value or a singular field), written as the JSON kplane serves.
func (b *schemaBuilder) value(fd protoreflect.FieldDescriptor, goType reflect.Type) map[string]any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch {
		case apijson.IsTimestamp(fd):
			return map[string]any{"type": "string", "format": "date-time"}
		case apijson.IsIntOrString(fd):
			return map[string]any{extIntOrString: true, "format": "int-or-string"}
		case apijson.IsStruct(fd):
			return map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
		}
		return ref(b.message(fd.Message(), goType))
	case protoreflect.StringKind:
		return map[string]any{"type": "string"}
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.BytesKind:
		return map[string]any{"type": "string", "format": "byte"}
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		names := make([]any, 0, values.Len())
		for i := 0; i < values.Len(); i++ {
			names = append(names, string(values.Get(i).Name()))
		}
		return map[string]any{"type": "string", "enum": names}
	case protoreflect.FloatKind:
		return map[string]any{"type": "number", "format": "float"}
	case protoreflect.DoubleKind:
		return map[string]any{"type": "number", "format": "double"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return map[string]any{"type": "integer", "format": "int32"}
	default: // the 64-bit and unsigned integer kinds
		return map[string]any{"type": "integer", "format": "int64"}
	}
}

func ref(name string) map[string]any {
	return map[string]any{"$ref": schemaRefPrefix + name}
}

func refSchema(name, description string) map[string]any {
	return map[string]any{"allOf": []any{ref(name)}, "description": description}
}

func gvkMap(gvk schema.GroupVersionKind) map[string]any {
	return map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}
}

// jsonFields indexes a Go struct's fields by their JSON names, looking
// into inline (embedded) structs as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name != "" && name != "-" {
			out[name] = f
		}
	}
	return out
}

// elem is the element type of a Go slice or map (through pointers), the
// type of a list's items or a map's values.
func elem(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || (t.Kind() != reflect.Slice && t.Kind() != reflect.Map) {
		return nil
	}
	return t.Elem()
}
