package informer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kplane/kplane/pkg/intern"
	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// tallyScheduled counts pods under their controller's uid, marked when
// bound to a node.
func tallyScheduled(obj *kplanev1.Object) (string, bool, bool) {
	for _, r := range obj.Meta().GetOwnerReferences() {
		if r.GetController() {
			return r.GetUid(), obj.GetPod().GetSpec().GetNodeName() != "", true
		}
	}
	return "", false, false
}

// setKey is a label set's key as the tally keeps it.
func setKey(lbls map[string]string) string { return string(intern.AppendSetKey(nil, lbls)) }

// bruteTally counts what tallyScheduled would, by walking the store.
func bruteTally(s *Store, value string) map[string][2]int {
	out := map[string][2]int{}
	for _, o := range s.List() {
		v, marked, ok := tallyScheduled(o)
		if !ok || v != value {
			continue
		}
		c := out[setKey(o.Meta().GetLabels())]
		c[0]++
		if marked {
			c[1]++
		}
		out[setKey(o.Meta().GetLabels())] = c
	}
	return out
}

func tallyView(t *testing.T, s *Store, value string) map[string][2]int {
	t.Helper()
	groups, err := s.Tally("scheduled", value)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int{}
	for _, g := range groups {
		k := setKey(g.Labels)
		if _, dup := out[k]; dup {
			t.Fatalf("label set %q in two groups", k)
		}
		out[k] = [2]int{g.Count, g.Marked}
	}
	return out
}

// TestTallyFollowsTheStore adds, replaces and removes random pods and
// checks after every step that the tally equals a count over the store,
// for a tally added before the pods and one added after some.
func TestTallyFollowsTheStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	s := NewStore(nil)
	if err := s.AddTally("scheduled", tallyScheduled); err != nil {
		t.Fatal(err)
	}
	late := NewStore(nil)
	labelSets := []map[string]string{nil, {"app": "web"}, {"app": "web", "tier": "front"}, {"tier": "front", "app": "web", "x": "y"}, {"app": "db"}}
	owners := []string{"", "u1", "u2"}
	for step := range 2000 {
		name := fmt.Sprintf("p%d", rng.IntN(40))
		if step == 500 {
			if err := late.AddTally("scheduled", tallyScheduled); err != nil {
				t.Fatal(err)
			}
		}
		for _, st := range []*Store{s, late} {
			if rng.IntN(4) == 0 {
				st.remove("ns/" + name)
				continue
			}
			var own []string
			if o := owners[rng.IntN(len(owners))]; o != "" {
				own = append(own, o)
			}
			node := ""
			if rng.IntN(2) == 0 {
				node = "n1"
			}
			o := testPod("ns", name, node, labelSets[rng.IntN(len(labelSets))], own...)
			st.put(o.Key(), o)
		}
		if step < 500 {
			continue
		}
		for _, st := range []*Store{s, late} {
			for _, v := range owners[1:] {
				want, got := bruteTally(st, v), tallyView(t, st, v)
				if fmt.Sprint(want) != fmt.Sprint(got) {
					t.Fatalf("step %d, owner %s: tally %v, store %v", step, v, got, want)
				}
			}
		}
	}
	for _, st := range []*Store{s, late} {
		for _, k := range st.ListKeys() {
			st.remove(k)
		}
		if len(st.tallies["scheduled"].counts) != 0 {
			t.Errorf("an empty store's tally still holds %v", st.tallies["scheduled"].counts)
		}
	}
}

func TestTallyErrors(t *testing.T) {
	s := NewStore(nil)
	if err := s.AddTally("scheduled", tallyScheduled); err != nil {
		t.Fatal(err)
	}
	if err := s.AddTally("scheduled", tallyScheduled); err == nil {
		t.Error("adding a tally twice should fail")
	}
	if _, err := s.Tally("other", "u1"); err == nil {
		t.Error("reading a tally never added should fail")
	}
	if g, err := s.Tally("scheduled", "nobody"); err != nil || len(g) != 0 {
		t.Errorf("a value nothing counts under: %v, %v; want no groups", g, err)
	}
}

func TestHasOrphan(t *testing.T) {
	for _, ix := range []Indexers{nil, {OrphanIndex: IndexOrphansByNamespace}} {
		s := NewStore(ix)
		for _, o := range []*kplanev1.Object{
			testPod("a", "owned", "", map[string]string{"app": "web"}, "u1"),
			testPod("a", "orphan", "", map[string]string{"app": "db"}),
			testPod("b", "elsewhere", "", map[string]string{"app": "web"}),
		} {
			s.put(o.Key(), o)
		}
		web, db := labels.SelectorFromSet(map[string]string{"app": "web"}), labels.SelectorFromSet(map[string]string{"app": "db"})
		if s.HasOrphan("a", web) {
			t.Errorf("indexed %v: an owned pod counted as an orphan", ix != nil)
		}
		if !s.HasOrphan("a", db) || !s.HasOrphan("b", web) || !s.HasOrphan("a", nil) {
			t.Errorf("indexed %v: an orphan was missed", ix != nil)
		}
		if s.HasOrphan("c", nil) {
			t.Errorf("indexed %v: an orphan in an empty namespace", ix != nil)
		}
	}
}
