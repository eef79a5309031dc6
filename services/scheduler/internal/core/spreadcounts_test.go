package core

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	hostKey = kplanev1.LabelHostname
	zoneKey = "topology.kubernetes.io/zone"
)

// spreadQuery is one (namespace, selector) and the domain totals asked of
// it.
type spreadQuery struct {
	ns   string
	sel  labels.Selector
	key  string
	also []string
}

// selKey names the query's selector (Everything and Nothing both print
// as "").
func (q spreadQuery) selKey() string {
	switch {
	case q.sel.Empty():
		return q.ns + "\x00*"
	case q.sel.String() == "":
		return q.ns + "\x00!"
	}
	return q.ns + "\x00=" + q.sel.String()
}

func mustParse(s string) labels.Selector {
	sel, err := labels.Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

// spreadQueries: selectors filed by a label they require (app=web,
// app=db, tier=front,app in (web)) and the rest (Everything, Nothing, a
// set of values, notin), in two namespaces.
var spreadQueries = []spreadQuery{
	{"default", labels.SelectorFromSet(map[string]string{"app": "web"}), hostKey, nil},
	{"default", labels.SelectorFromSet(map[string]string{"app": "web"}), zoneKey, nil},
	{"default", labels.SelectorFromSet(map[string]string{"app": "web"}), zoneKey, []string{hostKey, zoneKey}},
	{"default", labels.SelectorFromSet(map[string]string{"app": "db"}), zoneKey, []string{"rack"}},
	{"default", mustParse("tier=front,app in (web)"), hostKey, nil},
	{"other", labels.SelectorFromSet(map[string]string{"app": "web"}), hostKey, nil},
	{"default", labels.Everything(), zoneKey, nil},
	{"other", labels.Everything(), hostKey, nil},
	{"default", labels.Nothing(), zoneKey, nil},
	{"default", mustParse("app in (db,web)"), hostKey, nil},
	{"default", mustParse("app notin (db)"), zoneKey, []string{"rack"}},
}

// recount is what the kept counts must equal: a walk of every pod.
func recount(c *Cache, q spreadQuery) (perNode, domains map[string]int64) {
	perNode, domains = map[string]int64{}, map[string]int64{}
	for name, n := range c.nodes {
		for _, p := range n.pods {
			if p.Namespace == q.ns && p.Pod.GetMetadata().GetDeletionTimestamp() == nil && q.sel.Matches(p.Labels) {
				perNode[name]++
			}
		}
	}
	for _, n := range c.order {
		eligible := true
		for _, k := range append([]string{q.key}, q.also...) {
			if _, ok := n.Labels[k]; !ok {
				eligible = false
			}
		}
		if eligible {
			domains[n.Labels[q.key]] += perNode[n.Name]
		}
	}
	return perNode, domains
}

// checkSpreadCounts compares every query's kept counts with a recount,
// reading them as a cycle does (inside Schedule's decide).
func checkSpreadCounts(t interface {
	Helper()
	Fatalf(string, ...any)
}, c *Cache, step string, queries []spreadQuery) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.order) > 0 && SpreadCountsOf(c.order) != c.counts {
		t.Fatalf("%s: SpreadCountsOf the cache's own nodes is not its counts", step)
	}
	for _, q := range queries {
		s := c.counts.Selector(q.selKey(), q.ns, q.sel)
		wantNodes, wantDomains := recount(c, q)
		for name, n := range c.nodes {
			if got := s.Node(n); got != wantNodes[name] {
				t.Fatalf("%s: %s %q on %s: kept %d, recount %d", step, q.ns, q.sel, name, got, wantNodes[name])
			}
		}
		if got := s.Domains(q.key, q.also); !maps.Equal(got, wantDomains) {
			t.Fatalf("%s: %s %q by %s (also %v): kept %v, recount %v", step, q.ns, q.sel, q.key, q.also, got, wantDomains)
		}
	}
}

func spreadPod(name, ns, app string) *kplanev1.Pod {
	p := testPod(name, [2]string{"10m", ""})
	p.Metadata.Namespace = ns
	p.Metadata.Labels = map[string]string{"app": app, "tier": "front"}
	return p
}

func spreadNode(name string, kv ...string) *kplanev1.Node {
	return testNode(name, "4", "8Gi", 110, withLabels(append([]string{hostKey, name}, kv...)...))
}

// Every way the cache changes pods and nodes moves the counts: each step
// is checked against a recount, so leaving out any one update fails
// here.
func TestSpreadCountsFollowEveryChange(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	c := NewCache(time.Minute, clock.now, 1)
	queries := spreadQueries
	c.SetNode(spreadNode("a", zoneKey, "z1", "rack", "r1"))
	c.SetNode(spreadNode("b", zoneKey, "z1"))
	c.SetNode(spreadNode("c", zoneKey, "z2", "rack", "r2"))
	// Follow the queries from the start, so that every later figure
	// comes from updates, not from a first count.
	checkSpreadCounts(t, c, "empty", queries)

	web := func(name string) *kplanev1.Pod { return spreadPod(name, "default", "web") }
	steps := []struct {
		name string
		do   func()
	}{
		{"bound pod seen", func() { c.SyncPod(bound(web("w1"), "a")) }},
		{"pod of another namespace", func() { c.SyncPod(bound(spreadPod("o1", "other", "web"), "b")) }},
		{"pod of another app", func() { c.SyncPod(bound(spreadPod("d1", "default", "db"), "c")) }},
		{"assume", func() {
			if err := c.Assume(mustInfo(web("w2")), "b"); err != nil {
				t.Fatal(err)
			}
		}},
		{"assumed pod confirmed", func() { c.SyncPod(bound(web("w2"), "b")) }},
		{"assume and forget", func() {
			if err := c.Assume(mustInfo(web("w3")), "c"); err != nil {
				t.Fatal(err)
			}
			checkSpreadCounts(t, c, "assumed w3", queries)
			c.Forget("uid-w3")
		}},
		{"assume, bind, expire", func() {
			if err := c.Assume(mustInfo(web("w4")), "c"); err != nil {
				t.Fatal(err)
			}
			checkSpreadCounts(t, c, "assumed w4", queries)
			c.FinishBinding("uid-w4")
			clock.t = clock.t.Add(2 * time.Minute)
			if got := c.Expire(); len(got) != 1 {
				t.Fatalf("expired %d pods, want 1", len(got))
			}
		}},
		{"pod relabelled", func() {
			p := web("w1")
			p.Metadata.Labels["app"] = "db"
			c.SyncPod(bound(p, "a"))
		}},
		{"pod labelled back", func() { c.SyncPod(bound(web("w1"), "a")) }},
		{"pod marked for deletion", func() {
			p := bound(web("w2"), "b")
			p.Metadata.DeletionTimestamp = timestamppb.New(clock.t)
			c.SyncPod(p)
		}},
		{"marked pod deleted", func() { c.RemovePod(bound(web("w2"), "b")) }},
		{"pod finished", func() {
			c.SyncPod(bound(web("w5"), "c"))
			checkSpreadCounts(t, c, "w5 running", queries)
			p := bound(web("w5"), "c")
			p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodSucceeded}
			c.SyncPod(p)
		}},
		{"pod bound to an unknown node", func() { c.SyncPod(bound(web("w6"), "d")) }},
		{"that node appears", func() { c.SetNode(spreadNode("d", zoneKey, "z2")) }},
		{"node moves zone", func() { c.SetNode(spreadNode("d", zoneKey, "z3", "rack", "r3")) }},
		{"node loses its zone", func() { c.SetNode(spreadNode("a", "rack", "r1")) }},
		{"node heartbeat", func() { c.SetNode(spreadNode("a", "rack", "r1")) }},
		{"node removed with pods", func() { c.RemoveNode("d") }},
		{"pod of the removed node bound elsewhere", func() {
			c.RemovePod(bound(web("w6"), "d"))
			c.SyncPod(bound(web("w7"), "d"))
		}},
		{"node comes back", func() { c.SetNode(spreadNode("d", zoneKey, "z1")) }},
		{"empty node removed", func() {
			c.SetNode(spreadNode("e", zoneKey, "z4"))
			checkSpreadCounts(t, c, "e added", queries)
			c.RemoveNode("e")
		}},
	}
	for _, st := range steps {
		st.do()
		checkSpreadCounts(t, c, st.name, queries)
	}
}

// The kept counts equal a recount through random sequences of the
// cache's changes, with selectors and domain totals first asked for at
// random points (so both the first count and the updates are checked),
// and the least recently used selectors dropped past the bound.
func TestPropertySpreadCountsMatchRecount(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := &fakeClock{t: time.Unix(1000, 0)}
		c := NewCache(time.Minute, clock.now, 1)
		zones := []string{"z1", "z2", "z3"}
		nodeNames := []string{"n0", "n1", "n2", "n3", "n4"}
		apps := []string{"web", "db", "cache"}
		pods := map[string]*kplanev1.Pod{} // the cache's, by name
		var asked []spreadQuery
		next := 0
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0: // a node appears or changes labels
				name := rapid.SampledFrom(nodeNames).Draw(t, "node")
				var kv []string
				if rapid.Bool().Draw(t, "zoned") {
					kv = append(kv, zoneKey, rapid.SampledFrom(zones).Draw(t, "zone"))
				}
				if rapid.Bool().Draw(t, "racked") {
					kv = append(kv, "rack", "r")
				}
				c.SetNode(spreadNode(name, kv...))
			case 1:
				c.RemoveNode(rapid.SampledFrom(nodeNames).Draw(t, "node"))
			case 2, 3: // a bound pod seen, or assumed
				next++
				p := spreadPod(fmt.Sprintf("p%d", next), rapid.SampledFrom([]string{"default", "other"}).Draw(t, "ns"), rapid.SampledFrom(apps).Draw(t, "app"))
				node := rapid.SampledFrom(nodeNames).Draw(t, "node")
				if rapid.Bool().Draw(t, "assumed") {
					if err := c.Assume(mustInfo(p), node); err != nil {
						t.Fatal(err)
					}
				} else {
					c.SyncPod(bound(p, node))
				}
				pods[p.Metadata.Name] = bound(p, node)
			default:
				if len(pods) == 0 {
					continue
				}
				name := rapid.SampledFrom(slices.Sorted(maps.Keys(pods))).Draw(t, "pod")
				p := proto.CloneOf(pods[name])
				switch rapid.IntRange(0, 5).Draw(t, "podOp") {
				case 0: // confirmed, or its labels change
					p.Metadata.Labels = map[string]string{"app": rapid.SampledFrom(apps).Draw(t, "app")}
					if rapid.Bool().Draw(t, "front") {
						p.Metadata.Labels["tier"] = "front"
					}
					c.SyncPod(p)
					pods[name] = p
				case 1:
					p.Metadata.DeletionTimestamp = timestamppb.New(clock.t)
					c.SyncPod(p)
					pods[name] = p
				case 2:
					c.RemovePod(p)
					delete(pods, name)
				case 3:
					if c.Forget(p.Metadata.Uid) {
						delete(pods, name)
					}
				case 4:
					c.FinishBinding(p.Metadata.Uid)
					clock.t = clock.t.Add(2 * time.Minute)
					for _, e := range c.Expire() {
						delete(pods, e.Pod.Metadata.Name)
					}
				case 5: // moved: the watch shows it on another node
					p.Spec.NodeName = rapid.SampledFrom(nodeNames).Draw(t, "to")
					c.SyncPod(p)
					pods[name] = p
				}
			}
			if rapid.IntRange(0, 3).Draw(t, "ask") == 0 {
				asked = append(asked, rapid.SampledFrom(spreadQueries).Draw(t, "query"))
			}
			checkSpreadCounts(t, c, fmt.Sprintf("step %d", step), asked)
		}
	})
}

// Past MaxCountedSelectors the least recently used selector is dropped,
// and one asked for again is counted afresh, correctly.
func TestSpreadCountsBounded(t *testing.T) {
	c := NewCache(0, nil, 1)
	c.SetNode(spreadNode("a", zoneKey, "z1"))
	c.SyncPod(bound(spreadPod("w", "default", "web"), "a"))
	web := spreadQueries[0]
	checkSpreadCounts(t, c, "first", []spreadQuery{web})
	c.mu.Lock()
	for i := range MaxCountedSelectors {
		sel := labels.SelectorFromSet(map[string]string{"app": fmt.Sprint(i)})
		c.counts.Selector("default\x00"+sel.String(), "default", sel)
	}
	_, kept := c.counts.bySel[web.selKey()]
	n := len(c.counts.bySel)
	c.mu.Unlock()
	if kept || n != MaxCountedSelectors {
		t.Fatalf("after %d more selectors: web kept %v, %d followed", MaxCountedSelectors, kept, n)
	}
	c.SyncPod(bound(spreadPod("w2", "default", "web"), "a"))
	checkSpreadCounts(t, c, "asked again", []spreadQuery{web})
}

// Domains keeps one set of totals per key and set of required keys,
// whatever the order or repeats of also; another set gets its own.
func TestSpreadDomainsSharedPerKeySet(t *testing.T) {
	c := NewCache(0, nil, 1)
	c.SetNode(spreadNode("a", zoneKey, "z1"))
	c.mu.Lock()
	defer c.mu.Unlock()
	sel := labels.SelectorFromSet(map[string]string{"app": "web"})
	s := c.counts.Selector("default\x00"+sel.String(), "default", sel)
	s.Domains(zoneKey, []string{hostKey, "rack"})
	s.Domains(zoneKey, []string{"rack", hostKey, zoneKey, "rack"})
	if n := len(s.domains); n != 1 {
		t.Fatalf("the same key set in another order kept %d sets of totals, want 1", n)
	}
	s.Domains(zoneKey, []string{"rack"})
	s.Domains(zoneKey, []string{hostKey, "rack", "other"})
	s.Domains(hostKey, []string{zoneKey, "rack"})
	if n := len(s.domains); n != 4 {
		t.Fatalf("four key sets kept %d sets of totals, want 4", n)
	}
}
