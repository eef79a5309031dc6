package store

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestWithRevisionDecodesAsDecode checks the splice against the decoder
// for every kind and for revisions whose text and varint lengths differ.
func TestWithRevisionDecodesAsDecode(t *testing.T) {
	kinds := (&kplanev1.Object{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields()
	for i := range kinds.Len() {
		f := kinds.Get(i)
		obj := &kplanev1.Object{}
		msg := obj.ProtoReflect().NewField(f).Message()
		meta := &kplanev1.ObjectMeta{Name: "n", Namespace: "ns", Uid: "u", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{"long": strings.Repeat("x", 300)}}
		msg.Set(msg.Descriptor().Fields().ByName("metadata"), protoreflect.ValueOfMessage(meta.ProtoReflect()))
		obj.ProtoReflect().Set(f, protoreflect.ValueOfMessage(msg))
		value, err := Encode(obj)
		if err != nil {
			t.Fatalf("%s: encode: %v", f.Name(), err)
		}
		for _, rev := range []int64{1, 127, 128, 1 << 20, math.MaxInt64} {
			want, err := Decode(value, rev)
			if err != nil {
				t.Fatalf("%s: decode: %v", f.Name(), err)
			}
			spliced, err := WithRevision(value, rev)
			if err != nil {
				t.Fatalf("%s: WithRevision: %v", f.Name(), err)
			}
			got := &kplanev1.Object{}
			if err := proto.Unmarshal(spliced, got); err != nil {
				t.Fatalf("%s at %d: the spliced form does not decode: %v", f.Name(), rev, err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s at %d: spliced form decodes to\n%v\nwant\n%v", f.Name(), rev, got, want)
			}
		}
	}
}

// TestEncodeLeavesRoomForTheRevision checks that a store reply adds the
// revision to Encode's bytes in place, at the largest revision, and that
// the result is what WithRevision's copy is.
func TestEncodeLeavesRoomForTheRevision(t *testing.T) {
	obj := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "d", Name: "p",
		Annotations: map[string]string{"long": strings.Repeat("x", 300)}}})
	for _, rev := range []int64{1, 128, math.MaxInt64} {
		value, err := Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		want, err := WithRevision(value, rev)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if allocs := testing.AllocsPerRun(1, func() { got, err = appendRevision(value, rev, true) }); allocs != 0 || err != nil {
			t.Fatalf("at %d: appending in place allocated %v times (error %v)", rev, allocs, err)
		}
		if &got[0] != &value[0] || !bytes.Equal(got, want) {
			t.Fatalf("at %d: in place %v, bytes equal to WithRevision's %v", rev, &got[0] == &value[0], bytes.Equal(got, want))
		}
	}
}

// TestWithRevisionKeepsValue checks that the input is copied, not
// appended to in place (the watch response's buffer is shared).
func TestWithRevisionKeepsValue(t *testing.T) {
	value, err := Encode(kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "d", Name: "p"}}))
	if err != nil {
		t.Fatal(err)
	}
	spare := append(value[:len(value):len(value)], make([]byte, 64)...)[:len(value)]
	before := string(spare[:cap(spare)])
	if _, err := WithRevision(spare, 42); err != nil {
		t.Fatal(err)
	}
	if string(spare[:cap(spare)]) != before {
		t.Fatal("WithRevision wrote into its input's spare capacity")
	}
}

func TestWithRevisionRejectsWhatIsNotAnObject(t *testing.T) {
	for name, value := range map[string][]byte{
		"empty":           nil,
		"truncated tag":   {0x80},
		"varint kind":     protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1),
		"unknown kind":    protowire.AppendBytes(protowire.AppendTag(nil, 9999, protowire.BytesType), nil),
		"fixed-size kind": protowire.AppendFixed32(protowire.AppendTag(nil, 3, protowire.Fixed32Type), 1),
	} {
		if out, err := WithRevision(value, 7); err == nil {
			t.Errorf("%s: WithRevision(%x) = %x, want an error", name, value, out)
		}
	}
}
