package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

// The pre-encoded form must decode to exactly the message the standard
// codec would have sent.
func TestEncodeWatchResponseMatchesProto(t *testing.T) {
	obj := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "default", ResourceVersion: "42", Labels: map[string]string{"a": "b"}}})
	objBytes, err := proto.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*kplanev1.WatchResponse{
		{Type: kplanev1.EventType_EVENT_TYPE_ADDED, Object: obj, ResourceVersion: "42"},
		{Type: kplanev1.EventType_EVENT_TYPE_DELETED, Object: obj},
	} {
		sendsAs(t, encodeWatchResponse(want, objBytes), want)
	}
}

// sendsAs checks that the pre-encoded message, sent through the server's
// codec, decodes to exactly want and has want's size.
func sendsAs(t *testing.T, e *encodedMessage, want proto.Message) {
	t.Helper()
	data, err := passThroughCodec{encoding.GetCodecV2("proto")}.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got := want.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("round trip: got %v, want %v", got, want)
	}
	if size := e.WireSize(); size != proto.Size(want) {
		t.Fatalf("wire size %d, proto.Size %d", size, proto.Size(want))
	}
}

func listEntries(n int) []watchcache.Entry {
	var out []watchcache.Entry
	for i := range n {
		o := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default",
			ResourceVersion: strconv.Itoa(40 + i), Labels: map[string]string{"a": "b"}},
			Status: &kplanev1.PodStatus{Phase: kplanev1.PodRunning, PodIp: "10.0.0.1"}})
		out = append(out, watchcache.NewEntry("default/"+o.Meta().GetName(), o))
	}
	return out
}

// A List's reply built from the cache's wire forms decodes to exactly the
// ListResponse the standard codec would have sent, with or without the
// paging fields and items.
func TestEncodeListResponseMatchesProto(t *testing.T) {
	for _, n := range []int{0, 1, 3, 300} {
		entries := listEntries(n)
		items := make([]*kplanev1.Object, n)
		for i, e := range entries {
			obj, err := e.Object()
			if err != nil {
				t.Fatal(err)
			}
			items[i] = obj
		}
		for _, want := range []*kplanev1.ListResponse{
			{Items: items, ResourceVersion: "99"},
			{Items: items, ResourceVersion: "99", Continue: "tok", RemainingItemCount: 1 << 40},
			{Items: items},
		} {
			t.Run(fmt.Sprintf("%d items", n), func(t *testing.T) { sendsAs(t, encodeListResponse(want, entries), want) })
		}
	}
}

// PreEncodedReplies sends the wire form List left only for the reply
// the handler returned; an in-process call (no interceptor) leaves none.
func TestPreEncodedReplies(t *testing.T) {
	entries := listEntries(2)
	var items []*kplanev1.Object
	for _, e := range entries {
		obj, err := e.Object()
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, obj)
	}
	reply := &kplanev1.ListResponse{Items: items, ResourceVersion: "7"}
	intercept := PreEncodedReplies()
	got, err := intercept(context.Background(), nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		offerListWire(ctx, reply, entries)
		return reply, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wire, ok := got.(*encodedMessage)
	if !ok {
		t.Fatalf("reply %T, want the pre-encoded form", got)
	}
	decoded := &kplanev1.ListResponse{}
	if err := proto.Unmarshal(wire.parts.Materialize(), decoded); err != nil || !proto.Equal(decoded, reply) {
		t.Fatalf("pre-encoded reply decodes to %v (%v), want %v", decoded, err, reply)
	}

	// A handler (or a decorator around it) that returns another reply
	// than the one encoded has that reply sent.
	other := &kplanev1.ListResponse{ResourceVersion: "8"}
	got, err = intercept(context.Background(), nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		offerListWire(ctx, reply, entries)
		return other, nil
	})
	if err != nil || got != other {
		t.Fatalf("replaced reply: got %v, %v; want the handler's own", got, err)
	}
	// An error is passed on as it is.
	failure := errors.New("boom")
	if _, err := intercept(context.Background(), nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		offerListWire(ctx, reply, entries)
		return nil, failure
	}); !errors.Is(err, failure) {
		t.Fatalf("error: got %v", err)
	}
	// Without the interceptor there is no slot: nothing happens.
	if offerListWire(context.Background(), reply, entries) {
		t.Fatal("a wire form was offered without the interceptor")
	}
}

// A Create's reply built around the stored object's wire form decodes to
// the CreateResponse the standard codec would have sent, and its size is
// that message's.
func TestEncodeObjectReplyMatchesProto(t *testing.T) {
	obj := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "default",
		ResourceVersion: "42", Annotations: map[string]string{"big": strings.Repeat("x", 300)}}})
	objBytes, err := proto.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	sendsAs(t, encodeObjectReply(objBytes), &kplanev1.CreateResponse{Object: obj})
}

// offerObject leaves a wire form only over gRPC (a slot) and only when
// the store wrote the object (its bytes).
func TestOfferObject(t *testing.T) {
	reply := &kplanev1.UpdateResponse{}
	var none *replySlot
	none.offerObject(reply, []byte{1}) // in process: nothing, no panic
	slot := &replySlot{}
	slot.offerObject(reply, nil)
	if slot.wire != nil {
		t.Fatal("a wire form was offered without the stored bytes")
	}
	slot.offerObject(reply, []byte{0x1a, 0})
	if slot.reply != reply || slot.wire == nil || slot.wire.WireSize() != 4 {
		t.Fatalf("slot holds %v / %v, want the reply and its 4-byte wire form", slot.reply, slot.wire)
	}
	ctx, wire := withWireFor(context.Background(), nil)
	if ctx != context.Background() || wire == nil || *wire != nil {
		t.Fatal("in process, the store was asked for a wire form")
	}
}
