package informer

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Names of the indexes this package provides.
const (
	// NamespaceIndex maps a namespace to the objects in it; every Store has it.
	NamespaceIndex = "namespace"
	// PodNodeNameIndex maps spec.nodeName to the pods bound to that node.
	PodNodeNameIndex = "spec.nodeName"
	// OwnerUIDIndex maps an owner's uid to the objects it owns.
	OwnerUIDIndex = "metadata.ownerReferences.uid"
	// OrphanIndex maps a namespace to its objects that no controller
	// owns: the ones a controller may adopt.
	OrphanIndex = "orphans"
)

// IndexFunc returns the index values of an object; none means the object is
// not in the index.
type IndexFunc func(obj *kplanev1.Object) []string

// Indexers names IndexFuncs.
type Indexers map[string]IndexFunc

// IndexByNamespace indexes objects by metadata.namespace.
func IndexByNamespace(obj *kplanev1.Object) []string {
	return []string{obj.Meta().GetNamespace()}
}

// IndexPodsByNodeName indexes pods by spec.nodeName; unscheduled pods
// (and other kinds) are not indexed.
func IndexPodsByNodeName(obj *kplanev1.Object) []string {
	if n := obj.GetPod().GetSpec().GetNodeName(); n != "" {
		return []string{n}
	}
	return nil
}

// IndexByOwnerUID indexes objects by the uid of each of their owner references.
func IndexByOwnerUID(obj *kplanev1.Object) []string {
	refs := obj.Meta().GetOwnerReferences()
	if len(refs) == 0 {
		return nil
	}
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		if r.GetUid() != "" {
			out = append(out, r.GetUid())
		}
	}
	return out
}

// IndexOrphansByNamespace indexes objects without a controller owner
// reference by metadata.namespace; controlled objects are not indexed.
func IndexOrphansByNamespace(obj *kplanev1.Object) []string {
	for _, r := range obj.Meta().GetOwnerReferences() {
		if r.GetController() {
			return nil
		}
	}
	return []string{obj.Meta().GetNamespace()}
}

// Matcher selects objects by their labels; labels.Selector satisfies it.
type Matcher interface {
	Matches(labels map[string]string) bool
}

// Store is a thread-safe, indexed map of objects keyed by "namespace/name"
// (or "name" for cluster-scoped kinds). Objects handed out are shared with
// the cache and every other reader: treat them as read-only and
// proto.Clone them before modifying.
type Store struct {
	mu       sync.RWMutex
	items    map[string]*kplanev1.Object
	indexers Indexers
	// indices[indexName][value] is the set of keys with that value.
	indices map[string]map[string]map[string]struct{}
	// tallies are counts kept with the indexes (AddTally).
	tallies map[string]*tally
}

// NewStore returns an empty store with the namespace index and indexers.
func NewStore(indexers Indexers) *Store {
	s := &Store{
		items:    map[string]*kplanev1.Object{},
		indexers: Indexers{NamespaceIndex: IndexByNamespace},
		indices:  map[string]map[string]map[string]struct{}{NamespaceIndex: {}},
	}
	for name, fn := range indexers {
		s.indexers[name] = fn
		s.indices[name] = map[string]map[string]struct{}{}
	}
	return s
}

// NewStoreOf returns a store holding objs with the indexes a Factory's
// informers have (namespace, owner uid, orphans) and indexers: a cache
// not fed by a watch, for reading a fixed set of objects the way a
// controller reads its informer's.
func NewStoreOf(indexers Indexers, objs ...*kplanev1.Object) *Store {
	ix := ownerIndexers()
	maps.Copy(ix, indexers)
	s := NewStore(ix)
	for _, o := range objs {
		s.put(o.Key(), o)
	}
	return s
}

// ownerIndexers are the indexes every Factory informer keeps: by owner
// uid and the orphans by namespace (ClaimCandidates, HasOrphan).
func ownerIndexers() Indexers {
	return Indexers{OwnerUIDIndex: IndexByOwnerUID, OrphanIndex: IndexOrphansByNamespace}
}

// AddIndexers adds indexes, computing them for the objects already stored.
// Adding a name that exists is an error.
func (s *Store) AddIndexers(indexers Indexers) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range indexers {
		if _, ok := s.indexers[name]; ok {
			return fmt.Errorf("informer: index %q already exists", name)
		}
	}
	for name, fn := range indexers {
		s.indexers[name] = fn
		idx := map[string]map[string]struct{}{}
		s.indices[name] = idx
		for key, obj := range s.items {
			for _, v := range fn(obj) {
				addToIndex(idx, v, key)
			}
		}
	}
	return nil
}

func addToIndex(idx map[string]map[string]struct{}, value, key string) {
	set := idx[value]
	if set == nil {
		set = map[string]struct{}{}
		idx[value] = set
	}
	set[key] = struct{}{}
}

// Get returns the object with the given key.
func (s *Store) Get(key string) (*kplanev1.Object, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o, ok := s.items[key]
	return o, ok
}

// GetByName returns the object namespace/name.
func (s *Store) GetByName(namespace, name string) (*kplanev1.Object, bool) {
	return s.Get(kplanev1.MetaKey(namespace, name))
}

// Len returns the number of objects.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// List returns every object, sorted by key.
func (s *Store) List() []*kplanev1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sortedLocked(nil)
}

// ListKeys returns every key, sorted.
func (s *Store) ListKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]string, 0, len(s.items))
	for k := range s.items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// sortedLocked returns the objects of keys (all objects when keys is nil)
// sorted by key, so results are deterministic.
func (s *Store) sortedLocked(keys map[string]struct{}) []*kplanev1.Object {
	var ks []string
	if keys == nil {
		ks = make([]string, 0, len(s.items))
		for k := range s.items {
			ks = append(ks, k)
		}
	} else {
		ks = make([]string, 0, len(keys))
		for k := range keys {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	out := make([]*kplanev1.Object, 0, len(ks))
	for _, k := range ks {
		out = append(out, s.items[k])
	}
	return out
}

// ByIndex returns the objects whose index indexName has value, sorted by key.
func (s *Store) ByIndex(indexName, value string) ([]*kplanev1.Object, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("informer: no index %q", indexName)
	}
	set := idx[value]
	if len(set) == 0 {
		return nil, nil
	}
	return s.sortedLocked(set), nil
}

// ByIndexAnyOrder is ByIndex without the sort: the objects in no
// particular order. A controller that looks at every pod of a large set
// on each reconcile (and orders what it needs itself) saves sorting
// 100,000 keys under the store's lock each time.
func (s *Store) ByIndexAnyOrder(indexName, value string) ([]*kplanev1.Object, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("informer: no index %q", indexName)
	}
	set := idx[value]
	out := make([]*kplanev1.Object, 0, len(set))
	for k := range set {
		out = append(out, s.items[k])
	}
	return out, nil
}

// ListBySelectorAnyOrder is ListBySelector without the sort: the
// objects in namespace (every namespace when "") whose labels sel
// matches (all when sel is nil), in no particular order.
func (s *Store) ListBySelectorAnyOrder(namespace string, sel Matcher) []*kplanev1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*kplanev1.Object
	match := func(o *kplanev1.Object) {
		if sel == nil || sel.Matches(o.Meta().GetLabels()) {
			out = append(out, o)
		}
	}
	if namespace == "" {
		for _, o := range s.items {
			match(o)
		}
		return out
	}
	for k := range s.indices[NamespaceIndex][namespace] {
		match(s.items[k])
	}
	return out
}

// ClaimCandidates returns, in no particular order, what a controller
// (uid ownerUID, selector sel, in namespace) must look at when it claims
// objects: those naming it as an owner (to keep or release) and the
// orphans of namespace that sel matches (to adopt). Objects another
// controller owns are left out, as a claim ignores them. It reads the
// owner and orphan indexes, not the namespace: a ReplicaSet of 100,000
// pods costs its own pods, not a label match of every pod around it. One
// read lock, so each object appears once. A store without OrphanIndex
// falls back to walking namespace.
func (s *Store) ClaimCandidates(namespace, ownerUID string, sel Matcher) []*kplanev1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	owned := s.indices[OwnerUIDIndex][ownerUID]
	out := make([]*kplanev1.Object, 0, len(owned))
	for k := range owned {
		out = append(out, s.items[k])
	}
	s.eachOrphanLocked(namespace, sel, func(k string, o *kplanev1.Object) bool {
		if _, dup := owned[k]; !dup {
			out = append(out, o)
		}
		return true
	})
	return out
}

// HasOrphan reports whether namespace holds an object that no controller
// owns and that sel matches: one a controller with selector sel would
// adopt.
func (s *Store) HasOrphan(namespace string, sel Matcher) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	found := false
	s.eachOrphanLocked(namespace, sel, func(string, *kplanev1.Object) bool {
		found = true
		return false
	})
	return found
}

// eachOrphanLocked calls fn with the key and object of each orphan of
// namespace that sel (nil: any) matches, until fn returns false. It reads
// OrphanIndex, or walks namespace in a store without it.
func (s *Store) eachOrphanLocked(namespace string, sel Matcher, fn func(string, *kplanev1.Object) bool) {
	orphans, indexed := s.indices[OrphanIndex]
	keys := orphans[namespace]
	if !indexed {
		keys = s.indices[NamespaceIndex][namespace]
	}
	for k := range keys {
		o := s.items[k]
		if !indexed && IndexOrphansByNamespace(o) == nil {
			continue
		}
		if (sel == nil || sel.Matches(o.Meta().GetLabels())) && !fn(k, o) {
			return
		}
	}
}

// SortByKey sorts objs by their store key, for callers that want a
// deterministic order from an AnyOrder read.
func SortByKey(objs []*kplanev1.Object) {
	slices.SortFunc(objs, func(a, b *kplanev1.Object) int { return strings.Compare(a.Key(), b.Key()) })
}

// IndexKeys returns the keys whose index indexName has value, sorted.
func (s *Store) IndexKeys(indexName, value string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("informer: no index %q", indexName)
	}
	keys := make([]string, 0, len(idx[value]))
	for k := range idx[value] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// ListBySelector returns the objects in namespace ("" = all namespaces)
// whose labels match sel, sorted by key.
func (s *Store) ListBySelector(namespace string, sel Matcher) []*kplanev1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var candidates []*kplanev1.Object
	if namespace == "" {
		candidates = s.sortedLocked(nil)
	} else {
		set := s.indices[NamespaceIndex][namespace]
		if len(set) == 0 {
			// sortedLocked(nil) would be every object of every namespace.
			return nil
		}
		candidates = s.sortedLocked(set)
	}
	out := candidates[:0]
	for _, o := range candidates {
		if sel == nil || sel.Matches(o.Meta().GetLabels()) {
			out = append(out, o)
		}
	}
	return out
}

// put stores obj under key, updating the indexes.
func (s *Store) put(key string, obj *kplanev1.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.items[key]; ok {
		s.unindexLocked(key, old)
	}
	s.items[key] = obj
	for name, fn := range s.indexers {
		for _, v := range fn(obj) {
			addToIndex(s.indices[name], v, key)
		}
	}
	for _, t := range s.tallies {
		t.add(obj, 1)
	}
}

// remove deletes key, updating the indexes.
func (s *Store) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.items[key]; ok {
		s.unindexLocked(key, old)
		delete(s.items, key)
	}
}

func (s *Store) unindexLocked(key string, obj *kplanev1.Object) {
	for _, t := range s.tallies {
		t.add(obj, -1)
	}
	for name, fn := range s.indexers {
		idx := s.indices[name]
		for _, v := range fn(obj) {
			if set := idx[v]; set != nil {
				delete(set, key)
				if len(set) == 0 {
					delete(idx, v)
				}
			}
		}
	}
}
