package watchcache

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/pkg/intern"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// An entry keeps only its wire form and what selectors read: labels and
// its kind's precomputed fields. Decoding a whole object for those few
// strings was a third of the decoding a pod Create costs the apiserver
// (the request and its reply are the others), so an entry made from a
// stored value reads them from the bytes in place: it follows the field
// numbers down to them and skips everything else by its length.

// wirePath is a field's location in an encoded message: field numbers
// from the outermost message in.
type wirePath []protowire.Number

// wireKind is where one kind's attributes are in an encoded Object.
type wireKind struct {
	labels wirePath // Object → kind → metadata → labels
	table  *fieldTable
	fields []wirePath // table.paths, in order
}

// wireKinds is every kind's wireKind by its field number in Object,
// resolved once from the descriptors.
var wireKinds = func() map[protowire.Number]*wireKind {
	meta := (&kplanev1.ObjectMeta{}).ProtoReflect().Descriptor()
	out := map[protowire.Number]*wireKind{}
	for _, k := range kplanev1.Kinds() {
		f := k.OneofField()
		w := &wireKind{}
		if m := f.Message().Fields().ByName("metadata"); m != nil {
			w.labels = wirePath{f.Number(), m.Number(), meta.Fields().ByName("labels").Number()}
		}
		if t := precomputed[k.Name]; t != nil {
			w.table = t
			for _, p := range t.paths {
				w.fields = append(w.fields, append(wirePath{f.Number()}, mustResolve(f.Message(), p)...))
			}
		}
		out[f.Number()] = w
	}
	return out
}()

// mustResolve is the wirePath of a dotted JSON field path ("spec.nodeName")
// in md, which must end at a string field; a path that does not is a
// programming error in precomputed.
func mustResolve(md protoreflect.MessageDescriptor, path string) wirePath {
	var out wirePath
	parts := strings.Split(path, ".")
	for i, name := range parts {
		f := md.Fields().ByJSONName(name)
		if f == nil {
			panic(fmt.Sprintf("watchcache: precomputed path %q: no field %q in %s", path, name, md.FullName()))
		}
		out = append(out, f.Number())
		last := i == len(parts)-1
		switch {
		case last && f.Kind() == protoreflect.StringKind && !f.IsList() && !f.IsMap():
		case !last && f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap():
			md = f.Message()
		default:
			panic(fmt.Sprintf("watchcache: precomputed path %q: %s is not a %s", path, f.FullName(),
				map[bool]string{true: "string", false: "singular message"}[last]))
		}
	}
	return out
}

// visit calls fn with the contents of every occurrence of the
// length-delimited field at path in b, in wire order: a decoder merges
// repeated occurrences of a message field and keeps the last of a
// string field, so reading them all in order reads what it would.
func visit(b []byte, path wirePath, fn func([]byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num != path[0] || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var err error
		if len(path) == 1 {
			err = fn(v)
		} else {
			err = visit(v, path[1:], fn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// entryFromWire is the entry under key whose wire form is b (an Object
// with its resourceVersion), its attributes read from b.
func entryFromWire(key string, b []byte, rev int64) (*entry, error) {
	num, _, n := protowire.ConsumeTag(b)
	w := wireKinds[num]
	if n < 0 || w == nil {
		return nil, fmt.Errorf("cache %s: not an encoded object of a known kind", key)
	}
	e := &entry{key: key, rev: rev, b: b}
	if w.labels != nil {
		var labels map[string]string
		err := visit(b, w.labels, func(kv []byte) error {
			k, v, err := mapEntry(kv)
			if err == nil {
				if labels == nil {
					labels = map[string]string{}
				}
				labels[k] = v
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cache %s: labels: %w", key, err)
		}
		// The pods of one ReplicaSet share their labels; so do their
		// entries (a tenth of the cache's heap at 85,000 pods otherwise).
		e.labels = intern.Map(labels)
	}
	if w.table != nil {
		e.table = w.table
		e.fields = make([]string, len(w.fields))
		for i, p := range w.fields {
			err := visit(b, p, func(v []byte) error {
				e.fields[i] = intern.String(string(v))
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("cache %s: %s: %w", key, w.table.paths[i], err)
			}
		}
	}
	return e, nil
}

// mapEntry reads the key (field 1) and value (field 2) of one encoded
// map<string, string> entry; an absent one is "", as a decoder has it.
func mapEntry(b []byte) (key, value string, err error) {
	if err := visit(b, wirePath{1}, func(v []byte) error { key = string(v); return nil }); err != nil {
		return "", "", err
	}
	if err := visit(b, wirePath{2}, func(v []byte) error { value = string(v); return nil }); err != nil {
		return "", "", err
	}
	return key, value, nil
}
