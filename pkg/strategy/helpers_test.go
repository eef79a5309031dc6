package strategy

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// tc is one validation case on a valid object of kind T: mut breaks it (or
// not) and want lists the exact errors expected, in order. An entry ending
// in "..." matches as a prefix; no entries means the object stays valid.
type tc[T proto.Message] struct {
	name string
	mut  func(T)
	want []string
}

// checkValidate runs Default then Validate on a fresh valid object per case.
func checkValidate[T proto.Message](t *testing.T, kind string, valid func() T, cases []tc[T]) {
	t.Helper()
	s := For(kind)
	if s == nil {
		t.Fatalf("no strategy for %s", kind)
	}
	t.Run("valid", func(t *testing.T) {
		obj := kplanev1.MustWrap(valid())
		s.Default(obj)
		if errs := s.Validate(obj); len(errs) != 0 {
			t.Fatalf("valid %s rejected: %v", kind, errs)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := valid()
			c.mut(m)
			obj := kplanev1.MustWrap(m)
			s.Default(obj)
			assertErrors(t, s.Validate(obj), c.want)
		})
	}
}

// utc is one update case: mut changes a copy of the stored (defaulted,
// valid) object.
type utc[T proto.Message] struct {
	name string
	mut  func(T)
	want []string
}

func checkUpdate[T proto.Message](t *testing.T, kind string, valid func() T, cases []utc[T]) {
	t.Helper()
	s := For(kind)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := kplanev1.MustWrap(valid())
			s.(CreatePreparer).PrepareForCreate(old)
			s.Default(old)
			if errs := s.Validate(old); len(errs) != 0 {
				t.Fatalf("stored object invalid: %v", errs)
			}
			obj := proto.Clone(old).(*kplanev1.Object)
			c.mut(obj.Message().(T))
			s.Default(obj)
			if errs := s.Validate(obj); len(errs) != 0 && len(c.want) == 0 {
				t.Fatalf("updated object invalid: %v", errs)
			}
			assertErrors(t, s.ValidateUpdate(obj, old), c.want)
		})
	}
}

func assertErrors(t *testing.T, errs validation.ErrorList, want []string) {
	t.Helper()
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = e.Error()
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		if p, isPrefix := strings.CutSuffix(want[i], "..."); isPrefix {
			ok = strings.HasPrefix(got[i], p)
		} else {
			ok = got[i] == want[i]
		}
	}
	if !ok {
		t.Errorf("errors:\n  got:  %s\n  want: %s", strings.Join(got, "\n        "), strings.Join(want, "\n        "))
	}
}

// defaulted wraps m, applies its kind's defaults and returns the message.
func defaulted[T proto.Message](m T) T {
	obj := kplanev1.MustWrap(m)
	For(obj.KindName()).Default(obj)
	return obj.Message().(T)
}

// created runs what the store runs on create: PrepareForCreate, then
// Default.
func created[T proto.Message](m T) T {
	obj := kplanev1.MustWrap(m)
	s := For(obj.KindName())
	s.(CreatePreparer).PrepareForCreate(obj)
	s.Default(obj)
	return obj.Message().(T)
}

func meta(ns, name string) *kplanev1.ObjectMeta {
	return &kplanev1.ObjectMeta{Namespace: ns, Name: name}
}
