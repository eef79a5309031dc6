package informer

import (
	"fmt"

	"github.com/kplane/kplane/pkg/intern"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TallyFunc says what obj adds to a tally: the value it is counted under
// (an owner's uid, say), and whether it is marked (ready, say). ok false
// leaves obj out of the tally.
type TallyFunc func(obj *kplanev1.Object) (value string, marked, ok bool)

// LabelGroup is one label set's share of a tally value: how many of the
// objects counted under the value carry exactly Labels, and how many of
// those are marked.
type LabelGroup struct {
	// Labels is the label set, shared with the cache: read-only.
	Labels map[string]string
	Count  int
	Marked int
}

// tally is a TallyFunc's running counts: value, then label set's key
// (intern.AppendSetKey). It is changed only under the store's write
// lock, which also guards buf, the key's scratch space.
type tally struct {
	fn     TallyFunc
	counts map[string]map[string]*LabelGroup
	buf    []byte
}

// AddTally keeps counts under name, for the objects stored and those to
// come, updated with the indexes under the store's lock: a controller
// reads how many objects an owner has, and how many are marked, by label
// set, without walking them, and the counts always agree with what the
// store holds. Adding a name that exists is an error.
func (s *Store) AddTally(name string, fn TallyFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tallies[name]; ok {
		return fmt.Errorf("informer: tally %q already exists", name)
	}
	t := &tally{fn: fn, counts: map[string]map[string]*LabelGroup{}}
	if s.tallies == nil {
		s.tallies = map[string]*tally{}
	}
	s.tallies[name] = t
	for _, obj := range s.items {
		t.add(obj, 1)
	}
	return nil
}

// Tally returns the label groups counted under value by the tally name,
// in no particular order: none when no object counts under value.
func (s *Store) Tally(name, value string) ([]LabelGroup, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tallies[name]
	if !ok {
		return nil, fmt.Errorf("informer: no tally %q", name)
	}
	groups := t.counts[value]
	out := make([]LabelGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	return out, nil
}

// add counts obj in (by +1) or out (by -1). It allocates only for a
// label set or value it has not counted yet.
func (t *tally) add(obj *kplanev1.Object, by int) {
	value, marked, ok := t.fn(obj)
	if !ok {
		return
	}
	lbls := obj.Meta().GetLabels()
	t.buf = intern.AppendSetKey(t.buf[:0], lbls)
	groups := t.counts[value]
	if groups == nil {
		groups = map[string]*LabelGroup{}
		t.counts[value] = groups
	}
	g := groups[string(t.buf)]
	if g == nil {
		g = &LabelGroup{Labels: lbls}
		groups[string(t.buf)] = g
	}
	g.Count += by
	if marked {
		g.Marked += by
	}
	if g.Count == 0 {
		delete(groups, string(t.buf))
		if len(groups) == 0 {
			delete(t.counts, value)
		}
	}
}
