package server

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
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
