package watchcache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
)

// decodedAttributes is what an entry's attributes must be, read from the
// decoded object: the oracle for entryFromWire.
func decodedAttributes(t *testing.T, b []byte) (map[string]string, []string) {
	t.Helper()
	obj := &kplanev1.Object{}
	if err := proto.Unmarshal(b, obj); err != nil {
		t.Fatalf("decode: %v", err)
	}
	labels := obj.Meta().GetLabels()
	if len(labels) == 0 {
		labels = nil
	}
	var fields []string
	if p := obj.GetPod(); p != nil {
		fields = []string{p.GetSpec().GetNodeName(), p.GetStatus().GetPhase()}
	}
	return labels, fields
}

func randomPod(r *rand.Rand, i int) *kplanev1.Object {
	p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i),
		Annotations: map[string]string{"a": "x"}}}
	for j := range r.IntN(4) {
		if p.Metadata.Labels == nil {
			p.Metadata.Labels = map[string]string{}
		}
		p.Metadata.Labels[fmt.Sprintf("k%d", j)] = fmt.Sprintf("v%d", r.IntN(3))
	}
	if r.IntN(3) > 0 {
		p.Spec = &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}
		if r.IntN(2) == 0 {
			p.Spec.NodeName = fmt.Sprintf("node-%d", r.IntN(9))
		}
	}
	if r.IntN(2) == 0 {
		p.Status = &kplanev1.PodStatus{Phase: []string{"", "Pending", "Running"}[r.IntN(3)], PodIp: "10.0.0.1"}
	}
	return kplanev1.MustWrap(p)
}

// Every kind's entry read from its stored bytes, resourceVersion spliced
// in, has the attributes its decoded object has.
func TestEntryFromWireMatchesDecoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var objs []*kplanev1.Object
	for i := range 300 {
		objs = append(objs, randomPod(r, i))
	}
	for _, k := range kplanev1.Kinds() {
		m := k.New()
		obj := k.Wrap(m)
		obj.Meta().Name, obj.Meta().Labels = "x", map[string]string{"kind": k.Name}
		objs = append(objs, obj)
	}
	for _, obj := range objs {
		value, err := store.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		b, err := store.WithRevision(value, 1234)
		if err != nil {
			t.Fatal(err)
		}
		e, err := entryFromWire("k", b, 1234)
		if err != nil {
			t.Fatalf("%s: %v", obj.KindName(), err)
		}
		labels, fields := decodedAttributes(t, b)
		if !maps.Equal(e.labels, labels) || (e.labels == nil) != (labels == nil) {
			t.Fatalf("%s %v: labels %v, decoded %v", obj.KindName(), obj, e.labels, labels)
		}
		if !slices.Equal(e.fields, fields) {
			t.Fatalf("%s %v: fields %q, decoded %q", obj.KindName(), obj, e.fields, fields)
		}
	}
}

// A message field that occurs twice merges and a string field's last
// occurrence wins, in the wire reader as in the decoder.
func TestEntryFromWireMergesRepeatedFields(t *testing.T) {
	first, err := proto.Marshal(kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "1", "b": "2"}},
		Spec:     &kplanev1.PodSpec{NodeName: "n1"},
		Status:   &kplanev1.PodStatus{Phase: "Pending"}}))
	if err != nil {
		t.Fatal(err)
	}
	second, err := proto.Marshal(kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"b": "3", "c": "4"}},
		Spec:     &kplanev1.PodSpec{NodeName: "n2"}}))
	if err != nil {
		t.Fatal(err)
	}
	b := append(first, second...)
	e, err := entryFromWire("k", b, 1)
	if err != nil {
		t.Fatal(err)
	}
	labels, fields := decodedAttributes(t, b)
	if want := map[string]string{"a": "1", "b": "3", "c": "4"}; !maps.Equal(labels, want) {
		t.Fatalf("the decoder merged labels to %v, want %v (the test's premise)", labels, want)
	}
	if !maps.Equal(e.labels, labels) || !slices.Equal(e.fields, fields) {
		t.Fatalf("wire reader: %v %q; decoder: %v %q", e.labels, e.fields, labels, fields)
	}
}

func TestEntryFromWireRejectsMalformedBytes(t *testing.T) {
	good, err := store.Encode(kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p",
		Labels: map[string]string{"a": "b"}}, Spec: &kplanev1.PodSpec{NodeName: "n"}}))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":        nil,
		"unknown kind": protowire.AppendBytes(protowire.AppendTag(nil, 9999, protowire.BytesType), nil),
		"truncated":    good[:len(good)-3],
		"bad length":   append(protowire.AppendTag(nil, 3, protowire.BytesType), 0x7f, 0x0a),
	} {
		if e, err := entryFromWire("k", b, 1); err == nil {
			t.Errorf("%s: entryFromWire(%x) = %+v, want an error", name, b, e)
		}
	}
}

func TestMustResolveRefusesWhatIsNotAStringPath(t *testing.T) {
	pod := (&kplanev1.Pod{}).ProtoReflect().Descriptor()
	if got := mustResolve(pod, "spec.nodeName"); len(got) != 2 {
		t.Fatalf("spec.nodeName resolved to %v", got)
	}
	for _, path := range []string{"spec.noSuchField", "spec", "spec.containers.name", "metadata.labels"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("mustResolve(Pod, %q) did not refuse it", path)
				}
			}()
			mustResolve(pod, path)
		}()
	}
}

// Entries with equal labels share one interned map, whose content is
// still each entry's own.
func TestEntryFromWireSharesLabels(t *testing.T) {
	encode := func(name string, labels map[string]string) []byte {
		b, err := proto.Marshal(kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: name, Labels: labels}}))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, err := entryFromWire("a", encode("a", map[string]string{"app": "web", "tier": "x"}), 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := entryFromWire("b", encode("b", map[string]string{"tier": "x", "app": "web"}), 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := entryFromWire("c", encode("c", map[string]string{"app": "db"}), 3)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(a.labels).UnsafePointer() != reflect.ValueOf(b.labels).UnsafePointer() {
		t.Error("two entries with equal labels hold two maps")
	}
	if !maps.Equal(c.labels, map[string]string{"app": "db"}) || !maps.Equal(a.labels, map[string]string{"app": "web", "tier": "x"}) {
		t.Errorf("labels %v and %v, want each entry's own", a.labels, c.labels)
	}
}
