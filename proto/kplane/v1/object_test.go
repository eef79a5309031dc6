package kplanev1

import "testing"

func TestKindsFromOneof(t *testing.T) {
	if got := len(KindNames()); got != 26 {
		t.Fatalf("KindNames: got %d kinds, want 26: %v", got, KindNames())
	}
	for _, k := range Kinds() {
		o := k.Wrap(k.New())
		if o.KindName() != k.Name {
			t.Errorf("wrap %s: KindName() = %q", k.Name, o.KindName())
		}
		o.Meta().Name = "x"
		if o.Key() == "" {
			t.Errorf("%s: empty key after setting name", k.Name)
		}
	}
	if LookupKind("Node").Namespaced || !LookupKind("Pod").Namespaced {
		t.Fatal("scope of Node/Pod wrong")
	}
	if LookupKind("Lease").HasStatus() || !LookupKind("Pod").HasStatus() {
		t.Fatal("HasStatus wrong")
	}
}

func TestWrapRejectsNonKinds(t *testing.T) {
	if _, err := Wrap(&PodSpec{}); err == nil {
		t.Fatal("Wrap(PodSpec) succeeded")
	}
	o := MustWrap(&Pod{Metadata: &ObjectMeta{Namespace: "default", Name: "p"}})
	if o.GetPod().GetMetadata().GetName() != "p" || o.Key() != "default/p" {
		t.Fatalf("unexpected %v", o)
	}
	if ns, n := SplitKey("default/p"); ns != "default" || n != "p" {
		t.Fatal("SplitKey")
	}
	var empty *Object
	if empty.KindName() != "" || (&Object{}).Meta() != nil {
		t.Fatal("empty object")
	}
}

func BenchmarkMeta(b *testing.B) {
	o := MustWrap(&Pod{Metadata: &ObjectMeta{Name: "p", Namespace: "default"}})
	for b.Loop() {
		if o.Meta().Name != "p" {
			b.Fatal("wrong meta")
		}
	}
}
