package server

import (
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
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
		codec := passThroughCodec{encoding.GetCodecV2("proto")}
		data, err := codec.Marshal(encodeWatchResponse(want, objBytes))
		if err != nil {
			t.Fatal(err)
		}
		got := &kplanev1.WatchResponse{}
		if err := proto.Unmarshal(data.Materialize(), got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("round trip: got %v, want %v", got, want)
		}
	}
}
