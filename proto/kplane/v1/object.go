package kplanev1

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// KindInfo describes one kind served by the Resources API. It is derived
// from the Object oneof, so adding a kind to the oneof adds it here.
type KindInfo struct {
	// Name is the Kubernetes kind name, e.g. "ReplicaSet".
	Name string
	// Namespaced is false for cluster-scoped kinds (Node, Namespace, ...).
	Namespaced bool
	// field is the Object oneof field holding this kind.
	field protoreflect.FieldDescriptor
}

// New returns an empty message of this kind.
func (k *KindInfo) New() proto.Message {
	return (&Object{}).ProtoReflect().NewField(k.field).Message().Interface()
}

// Wrap puts a message of this kind into an Object.
func (k *KindInfo) Wrap(m proto.Message) *Object {
	o := &Object{}
	o.ProtoReflect().Set(k.field, protoreflect.ValueOfMessage(m.ProtoReflect()))
	return o
}

// OneofField is the Object oneof field holding this kind; its JSON name
// is the key protojson reads the kind under.
func (k *KindInfo) OneofField() protoreflect.FieldDescriptor { return k.field }

// HasStatus reports whether the kind has a status field that UpdateStatus writes.
func (k *KindInfo) HasStatus() bool {
	return k.field.Message().Fields().ByName("status") != nil
}

// HasSpec reports whether the kind has a spec field.
func (k *KindInfo) HasSpec() bool {
	return k.field.Message().Fields().ByName("spec") != nil
}

// clusterScoped lists the kinds that live outside namespaces.
var clusterScoped = map[string]bool{
	"Namespace":          true,
	"Node":               true,
	"PersistentVolume":   true,
	"StorageClass":       true,
	"PriorityClass":      true,
	"ClusterRole":        true,
	"ClusterRoleBinding": true,
}

var (
	kindOneof    protoreflect.OneofDescriptor
	kindsByName  = map[string]*KindInfo{}
	kindsByField = map[protoreflect.FieldNumber]*KindInfo{}
	kindNames    []string
)

func init() {
	// Go initialises files in name order; make sure the descriptors exist.
	file_kplane_v1_resources_proto_init()
	kindOneof = (&Object{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	fields := kindOneof.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		name := string(f.Message().Name())
		k := &KindInfo{Name: name, Namespaced: !clusterScoped[name], field: f}
		kindsByName[name] = k
		kindsByField[f.Number()] = k
		kindNames = append(kindNames, name)
	}
	sort.Strings(kindNames)
}

// LookupKind returns the kind with the given Kubernetes name, or nil.
func LookupKind(name string) *KindInfo {
	return kindsByName[name]
}

// KindNames returns every kind name, sorted.
func KindNames() []string {
	return append([]string(nil), kindNames...)
}

// Kinds returns every kind, sorted by name.
func Kinds() []*KindInfo {
	out := make([]*KindInfo, 0, len(kindNames))
	for _, n := range kindNames {
		out = append(out, kindsByName[n])
	}
	return out
}

// UnknownKindError is the message for a kind name the API does not serve.
func UnknownKindError(name string) string {
	return fmt.Sprintf("unknown kind %q; known kinds: %s", name, strings.Join(kindNames, ", "))
}

// Wrap puts any kind message (*Pod, *Node, ...) into an Object.
func Wrap(m proto.Message) (*Object, error) {
	if m == nil {
		return nil, fmt.Errorf("wrap: nil message")
	}
	k := kindsByName[string(m.ProtoReflect().Descriptor().Name())]
	if k == nil || k.field.Message().FullName() != m.ProtoReflect().Descriptor().FullName() {
		return nil, fmt.Errorf("wrap: %s is not a kind of the Resources API", m.ProtoReflect().Descriptor().FullName())
	}
	return k.Wrap(m), nil
}

// MustWrap is Wrap for messages known to be kinds; it panics otherwise.
func MustWrap(m proto.Message) *Object {
	o, err := Wrap(m)
	if err != nil {
		panic(err)
	}
	return o
}

// Info returns the KindInfo of the object's kind, or nil when the oneof is empty.
func (x *Object) Info() *KindInfo {
	if x == nil {
		return nil
	}
	f := x.ProtoReflect().WhichOneof(kindOneof)
	if f == nil {
		return nil
	}
	return kindsByField[f.Number()]
}

// KindName returns the object's kind name, or "" when the oneof is empty.
func (x *Object) KindName() string {
	if k := x.Info(); k != nil {
		return k.Name
	}
	return ""
}

// Message returns the kind message held by the object (*Pod, *Node, ...), or nil.
func (x *Object) Message() proto.Message {
	if x == nil {
		return nil
	}
	if m, ok := x.kindMessage(); ok {
		return m
	}
	k := x.Info()
	if k == nil {
		return nil
	}
	return x.ProtoReflect().Get(k.field).Message().Interface()
}

// metadataHolder is what every kind message is: it has metadata.
type metadataHolder interface{ GetMetadata() *ObjectMeta }

// Meta returns the object's metadata, creating an empty one when absent so
// callers may set fields on it. It returns nil only when the oneof is empty.
// It is on the hot path of every watch event and selector match, so the
// common case avoids reflection beyond finding the oneof's message.
func (x *Object) Meta() *ObjectMeta {
	if m, ok := x.kindMessage(); ok {
		if md := m.(metadataHolder).GetMetadata(); md != nil {
			return md
		}
	}
	m := x.Message()
	if m == nil {
		return nil
	}
	r := m.ProtoReflect()
	f := r.Descriptor().Fields().ByName("metadata")
	return r.Mutable(f).Message().Interface().(*ObjectMeta)
}

// Key returns "namespace/name" for namespaced objects and "name" otherwise,
// the form used by caches and work queues.
func (x *Object) Key() string {
	m := x.Meta()
	if m == nil {
		return ""
	}
	return MetaKey(m.GetNamespace(), m.GetName())
}

// MetaKey builds a cache key from a namespace and a name.
func MetaKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// SplitKey is the inverse of MetaKey.
func SplitKey(key string) (namespace, name string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}
