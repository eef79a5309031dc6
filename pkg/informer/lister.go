package informer

import (
	"fmt"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Lister reads an informer's cache as T (e.g. *kplanev1.Pod), sparing
// callers the oneof. Returned objects are shared with the cache: read-only.
type Lister[T client.Object] struct {
	store *Store
}

// NewLister returns a typed view of inf's cache. It panics if T is not the
// informer's kind, a programming error.
func NewLister[T client.Object](inf *Informer) Lister[T] {
	var zero T
	if name := string(zero.ProtoReflect().Descriptor().Name()); name != inf.Kind() {
		panic(fmt.Sprintf("informer.NewLister: %s lister for a %s informer", name, inf.Kind()))
	}
	return Lister[T]{store: inf.Store()}
}

func convert[T client.Object](objs []*kplanev1.Object) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if v, ok := o.Message().(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// Get returns the cached object namespace/name.
func (l Lister[T]) Get(namespace, name string) (T, bool) {
	var zero T
	o, ok := l.store.GetByName(namespace, name)
	if !ok {
		return zero, false
	}
	v, ok := o.Message().(T)
	return v, ok
}

// List returns every cached object, sorted by key.
func (l Lister[T]) List() []T { return convert[T](l.store.List()) }

// ByIndex returns the objects whose index indexName has value.
func (l Lister[T]) ByIndex(indexName, value string) ([]T, error) {
	objs, err := l.store.ByIndex(indexName, value)
	if err != nil {
		return nil, err
	}
	return convert[T](objs), nil
}

// ListBySelector returns the objects in namespace ("" = all) matching sel.
func (l Lister[T]) ListBySelector(namespace string, sel Matcher) []T {
	return convert[T](l.store.ListBySelector(namespace, sel))
}
