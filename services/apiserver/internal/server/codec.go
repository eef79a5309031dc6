package server

import (
	"context"
	"encoding/binary"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

// One watch event goes to every watcher of its kind. Marshalling it per
// watcher would dominate the fan-out, so the watch cache marshals each
// object once and the server sends the event as pre-encoded bytes
// through this codec, which passes them through and leaves every other
// message to the standard protobuf codec.

// encodedMessage is a message already in wire form.
type encodedMessage struct {
	parts mem.BufferSlice
}

// WireSize is the message's encoded size (counted in the apiserver's
// kplane_apiserver_sent_bytes_total).
func (e *encodedMessage) WireSize() int { return e.parts.Len() }

type passThroughCodec struct {
	encoding.CodecV2
}

func (c passThroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedMessage); ok {
		return e.parts, nil
	}
	return c.CodecV2.Marshal(v)
}

// CodecOption installs the pass-through codec on a gRPC server.
func CodecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(passThroughCodec{encoding.GetCodecV2("proto")})
}

// encodeWatchResponse builds a WatchResponse's wire form around an
// already-encoded object without copying it.
func encodeWatchResponse(r *kplanev1.WatchResponse, object []byte) *encodedMessage {
	head := make([]byte, 0, 32+len(r.ResourceVersion))
	if r.Type != 0 {
		head = protowire.AppendTag(head, 1, protowire.VarintType)
		head = protowire.AppendVarint(head, uint64(r.Type))
	}
	if r.ResourceVersion != "" {
		head = protowire.AppendTag(head, 3, protowire.BytesType)
		head = protowire.AppendString(head, r.ResourceVersion)
	}
	head = protowire.AppendTag(head, 2, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(object)))
	return &encodedMessage{parts: mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(object)}}
}

// DecodeSent returns the WatchResponse a stream's SendMsg was given,
// decoding the pre-encoded form; in-process callers of Watch (the REST
// front end) use it to read what the server sent.
func DecodeSent(m any) (*kplanev1.WatchResponse, error) {
	switch v := m.(type) {
	case *kplanev1.WatchResponse:
		return v, nil
	case *encodedMessage:
		r := &kplanev1.WatchResponse{}
		if err := proto.Unmarshal(v.parts.Materialize(), r); err != nil {
			return nil, fmt.Errorf("decode watch event: %w", err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("decode watch event: unexpected message %T", m)
}

// A List served from the watch cache is sent the same way: each object's
// wire form is kept by the cache, so the reply is those bytes framed as
// a ListResponse, not a marshalling of every object per List. The
// handler's signature returns a *ListResponse (in-process callers, the
// REST side, read it), so the wire form travels beside it: the
// PreEncodedReplies interceptor gives each call a slot in its context,
// List fills it, and the interceptor sends the slot's bytes in place of
// the reply they encode.

type replySlotKey struct{}

// replySlot holds the wire form of one reply.
type replySlot struct {
	reply any
	wire  *encodedMessage
}

// PreEncodedReplies is the innermost unary interceptor of a server using
// CodecOption: it sends a reply in the wire form its handler left, when
// the handler left one for the very reply it returned.
func PreEncodedReplies() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		slot := &replySlot{}
		resp, err := handler(context.WithValue(ctx, replySlotKey{}, slot), req)
		if err == nil && slot.wire != nil && slot.reply == resp {
			return slot.wire, nil
		}
		return resp, err
	}
}

// replySlotOf is the reply slot PreEncodedReplies put in ctx; nil for a
// call in process (the REST side), which did not come through gRPC.
func replySlotOf(ctx context.Context) *replySlot {
	slot, _ := ctx.Value(replySlotKey{}).(*replySlot)
	return slot
}

// withWireFor asks the store for the wire form of what a write stores
// (store.WithWire) when slot can send it: over gRPC. In process the
// sink stays unused and nil.
func withWireFor(ctx context.Context, slot *replySlot) (context.Context, *[]byte) {
	if slot == nil {
		return ctx, new([]byte)
	}
	return store.WithWire(ctx)
}

// offerObject leaves reply's wire form, framed around object (the object
// as stored, from store.WithWire), for PreEncodedReplies; reply is a
// message whose one field is that object. Nothing happens without a
// slot (in process) or without the object's bytes (nothing was stored).
func (slot *replySlot) offerObject(reply any, object []byte) {
	if slot == nil || object == nil {
		return
	}
	slot.reply, slot.wire = reply, encodeObjectReply(object)
}

// encodeObjectReply is the wire form of a reply whose one field is the
// object (field 1, as in CreateResponse), around the object's wire form,
// without copying it.
func encodeObjectReply(object []byte) *encodedMessage {
	head := protowire.AppendTag(make([]byte, 0, 1+binary.MaxVarintLen32), 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(object)))
	return &encodedMessage{parts: mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(object)}}
}

// offerListWire leaves the wire form of r with entries as its items,
// built from the entries' kept wire forms, for PreEncodedReplies, and
// reports whether it did: r then need not hold the items, as its wire
// form is sent in its place. Without that interceptor in ctx (an
// in-process call), or when an entry has no wire form, it does nothing
// and r, with its items set, is marshalled as usual.
func offerListWire(ctx context.Context, r *kplanev1.ListResponse, entries []watchcache.Entry) bool {
	slot := replySlotOf(ctx)
	if slot == nil {
		return false
	}
	w := encodeListResponse(r, entries)
	if w == nil {
		return false
	}
	slot.reply, slot.wire = r, w
	return true
}

// encodeListResponse is r's wire form with its items' bytes taken from
// entries (r.Items in the same order), without copying them; nil when an
// entry has no wire form.
func encodeListResponse(r *kplanev1.ListResponse, entries []watchcache.Entry) *encodedMessage {
	parts := make(mem.BufferSlice, 0, 2*len(entries)+1)
	// Every item's tag and length go into one array, sliced per item.
	heads := make([]byte, 0, len(entries)*(1+binary.MaxVarintLen32))
	for _, e := range entries {
		b := e.Encoded()
		if b == nil {
			return nil
		}
		at := len(heads)
		heads = protowire.AppendTag(heads, 1, protowire.BytesType)
		heads = protowire.AppendVarint(heads, uint64(len(b)))
		parts = append(parts, mem.SliceBuffer(heads[at:len(heads):len(heads)]), mem.SliceBuffer(b))
	}
	var tail []byte
	if r.ResourceVersion != "" {
		tail = protowire.AppendTag(tail, 2, protowire.BytesType)
		tail = protowire.AppendString(tail, r.ResourceVersion)
	}
	if r.Continue != "" {
		tail = protowire.AppendTag(tail, 3, protowire.BytesType)
		tail = protowire.AppendString(tail, r.Continue)
	}
	if r.RemainingItemCount != 0 {
		tail = protowire.AppendTag(tail, 4, protowire.VarintType)
		tail = protowire.AppendVarint(tail, uint64(r.RemainingItemCount))
	}
	if len(tail) > 0 {
		parts = append(parts, mem.SliceBuffer(tail))
	}
	return &encodedMessage{parts: parts}
}
