package store

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Encode serialises an object for etcd: the Object wrapper in protobuf
// binary (so a value names its own kind), without resourceVersion, which
// is the key's ModRevision and only exists on read.
//
// The bytes have room after them for what WithRevision appends, so the
// store's own replies (leaveWire) add the revision in place.
func Encode(obj *kplanev1.Object) ([]byte, error) {
	meta := obj.Meta()
	rv := meta.ResourceVersion
	meta.ResourceVersion = ""
	// Size caches every message's size, which MarshalAppend then reuses:
	// the object is walked for its size once, as proto.Marshal does.
	size := proto.Size(obj)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(make([]byte, 0, size+revisionRoom), obj)
	meta.ResourceVersion = rv
	if err != nil {
		return nil, fmt.Errorf("encode %s %q: %w", obj.KindName(), obj.Key(), err)
	}
	return b, nil
}

// WithRevision is value, an object as Encode wrote it, with its
// resourceVersion set to rev, made without decoding it: a copy of value
// followed by a second occurrence of the object's kind field that holds
// only metadata.resourceVersion. Protobuf decoders merge a message field
// that occurs twice, so the result decodes as Decode(value, rev) does;
// the watch cache and Create's reply send it in place of a re-encoding.
func WithRevision(value []byte, rev int64) ([]byte, error) {
	return appendRevision(value, rev, false)
}

// revisionRoom bounds what appendRevision adds: three tags and three
// lengths of at most 3 bytes each (field numbers and lengths are small)
// and a revision of at most 19 digits.
const revisionRoom = 3*3 + 3*3 + 19

// appendRevision is WithRevision; inPlace lets it append to value's own
// spare capacity (value's owner never reads past its length and makes
// no other such call on it), else it copies.
func appendRevision(value []byte, rev int64, inPlace bool) ([]byte, error) {
	kind, typ, n := protowire.ConsumeTag(value)
	if n < 0 || typ != protowire.BytesType {
		return nil, fmt.Errorf("stored object: no kind field at its start")
	}
	metaField, ok := revisionPath.metadata[kind]
	if !ok {
		return nil, fmt.Errorf("stored object: unknown kind field %d", kind)
	}
	var rv [20]byte
	rvBytes := strconv.AppendInt(rv[:0], rev, 10)
	rvLen := protowire.SizeTag(revisionPath.resourceVersion) + protowire.SizeBytes(len(rvBytes))
	metaLen := protowire.SizeTag(metaField) + protowire.SizeBytes(rvLen)
	out := value
	if need := protowire.SizeTag(kind) + protowire.SizeBytes(metaLen); !inPlace || cap(value)-len(value) < need {
		out = make([]byte, len(value), len(value)+need)
		copy(out, value)
	}
	out = protowire.AppendTag(out, kind, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(metaLen))
	out = protowire.AppendTag(out, metaField, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(rvLen))
	out = protowire.AppendTag(out, revisionPath.resourceVersion, protowire.BytesType)
	out = protowire.AppendBytes(out, rvBytes)
	return out, nil
}

type wireKey struct{}

// WithWire returns ctx and a place where a write made with it (Create,
// CreateOwned, Update, UpdateStatus) leaves the wire form of the object
// it stored, resourceVersion included (WithRevision of the bytes
// written), so that a reply need not encode the object again. It stays
// nil when the write stored nothing of its own: a dry run, an update that
// changed nothing, a last finalizer's removal that deleted the object.
func WithWire(ctx context.Context) (context.Context, *[]byte) {
	sink := new([]byte)
	return context.WithValue(ctx, wireKey{}, sink), sink
}

// leaveWire puts the wire form of value, stored at rev, where WithWire
// asked for it; it does nothing (and costs nothing) when ctx did not.
func leaveWire(ctx context.Context, value []byte, rev int64) {
	sink, _ := ctx.Value(wireKey{}).(*[]byte)
	if sink == nil {
		return
	}
	// value came from Encode, so this cannot fail (a failure would only
	// mean the reply is encoded the usual way), and it has room for the
	// revision; the write is done with it (etcd's Put copied it).
	if b, err := appendRevision(value, rev, true); err == nil {
		*sink = b
	}
}

// revisionPath holds the field numbers WithRevision writes: each kind's
// field of Object, the metadata field of that kind's message, and
// ObjectMeta's resource_version; read once from the descriptors.
var revisionPath = func() (p struct {
	metadata        map[protowire.Number]protowire.Number
	resourceVersion protowire.Number
}) {
	p.metadata = map[protowire.Number]protowire.Number{}
	kinds := (&kplanev1.Object{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields()
	for i := range kinds.Len() {
		f := kinds.Get(i)
		if m := f.Message().Fields().ByName("metadata"); m != nil {
			p.metadata[f.Number()] = m.Number()
		}
	}
	p.resourceVersion = (&kplanev1.ObjectMeta{}).ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name("resource_version")).Number()
	return p
}()

// Decode parses a stored value and stamps it with its revision.
func Decode(value []byte, modRevision int64) (*kplanev1.Object, error) {
	obj := &kplanev1.Object{}
	if err := proto.Unmarshal(value, obj); err != nil {
		return nil, fmt.Errorf("decode stored object: %w", err)
	}
	if obj.Info() == nil {
		return nil, fmt.Errorf("decode stored object: no kind set")
	}
	obj.Meta().ResourceVersion = FormatRevision(modRevision)
	return obj, nil
}

// FormatRevision renders an etcd revision as a resourceVersion.
func FormatRevision(rev int64) string {
	return strconv.FormatInt(rev, 10)
}

// ParseRevision parses a resourceVersion; "" is 0.
func ParseRevision(rv string) (int64, error) { return apiutil.ParseResourceVersion(rv) }
