package nodeipam

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A write that failed with an unknown outcome (a timeout) may have landed:
// its range stays reserved until the cache shows the node settled, so a
// second node cannot get the same range meanwhile. A write refused outright
// frees its range at once.
func TestUnknownWriteOutcomeKeepsTheRange(t *testing.T) {
	f, c := newCacheOnlyController(t, "10.0.0.0/22", 24) // four ranges
	set, nodes := c.set, c.nodes
	f.createNode("n1")
	testutil.Eventually(t, 30*time.Second, "n1 cached", func() bool { _, ok := nodes.Store().Get("n1"); return ok })

	i, ok, err := c.reserve("n1")
	if err != nil || !ok {
		t.Fatalf("reserve: %d %v %v", i, ok, err)
	}
	c.settle(i, nil, status.Error(codes.DeadlineExceeded, "timeout"))
	if j, _, _ := c.reserve("n2"); j == i {
		t.Fatalf("range %d given again while the write's outcome is unknown", i)
	} else {
		c.settle(j, nil, status.Error(codes.Aborted, "conflict")) // refused: freed at once
		c.mu.Lock()
		_, kept := c.pending[j]
		c.mu.Unlock()
		if kept {
			t.Fatalf("range %d of a refused write still reserved", j)
		}
	}

	// The timed-out write had landed after all: once the cache shows it, the
	// index holds the range and the reservation goes.
	cur := f.nodes()["n1"]
	cur.Spec.PodCidr = set.prefix(i).String()
	if _, err := f.api.Update(f.ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(cur)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "n1's range cached", func() bool {
		o, _ := nodes.Store().Get("n1")
		return o.GetNode().GetSpec().GetPodCidr() != ""
	})
	if _, _, err := c.reserve("n4"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pending[i]; ok && p.rv == outcomeUnknown {
		t.Fatalf("reservation of range %d kept after the cache settled n1", i)
	}
	if !c.heldByNode(i) {
		t.Fatalf("range %d not held by n1 in the index", i)
	}
}

// A node whose write timed out retries with the same range: on a cluster
// CIDR with no other range free it must not find itself blocked by its own
// earlier reservation. A retry that writes nothing (the node has a range
// now, perhaps from the timed-out write) keeps the range until the cache
// shows the node settled.
func TestRetryAfterUnknownOutcomeReusesTheRange(t *testing.T) {
	f, c := newCacheOnlyController(t, "10.9.0.0/24", 26) // four ranges
	f.createNode("n1")
	testutil.Eventually(t, 30*time.Second, "n1 cached", func() bool { _, ok := c.nodes.Store().Get("n1"); return ok })

	first, ok, err := c.reserve("n1")
	if err != nil || !ok {
		t.Fatalf("reserve n1: %d %v %v", first, ok, err)
	}
	c.settle(first, nil, status.Error(codes.DeadlineExceeded, "timeout"))
	for _, n := range []string{"n2", "n3", "n4"} { // the other three ranges go elsewhere
		if _, ok, err := c.reserve(n); err != nil || !ok {
			t.Fatalf("reserve %s: %v %v", n, ok, err)
		}
	}
	again, ok, err := c.reserve("n1")
	if err != nil || !ok {
		t.Fatalf("n1's retry found no range (%v): its own reservation blocks it", err)
	}
	if again != first {
		t.Fatalf("n1's retry got range %d, want its reserved range %d", again, first)
	}
	c.settle(again, nil, nil) // the retry wrote nothing: the first write may be why
	c.mu.Lock()
	p, kept := c.pending[first]
	c.mu.Unlock()
	if !kept || p.rv != outcomeUnknown {
		t.Fatalf("range %d freed by a retry that wrote nothing (%+v, kept %v)", first, p, kept)
	}
}

// A node that found every range taken only because another node's write
// was in flight is woken when that write frees its range (it was refused,
// or wrote nothing): the full-CIDR report is not its last word.
func TestFreedRangeWakesWaitingNodes(t *testing.T) {
	f, c := newCacheOnlyController(t, "10.9.0.0/24", 26) // four ranges
	var mu sync.Mutex
	woken := map[string]bool{}
	c.enqueue = func(name string) { mu.Lock(); woken[name] = true; mu.Unlock() }
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		f.createNode(n)
	}
	testutil.Eventually(t, 30*time.Second, "five nodes cached", func() bool { return len(c.nodes.Store().List()) == 5 })
	held := map[string]int{}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		i, ok, err := c.reserve(n)
		if err != nil || !ok {
			t.Fatalf("reserve %s: %v %v", n, ok, err)
		}
		held[n] = i
	}
	if _, ok, _ := c.reserve("n5"); ok {
		t.Fatal("a fifth range out of four")
	}
	c.settle(held["n2"], nil, nil) // n2's write found it had a range: nothing written
	mu.Lock()
	defer mu.Unlock()
	if !woken["n5"] {
		t.Fatalf("n5 not requeued when range %d was freed (woken: %v)", held["n2"], woken)
	}
}

// newCacheOnlyController is an ipamController over a running Node informer
// with the range index, and no work queue (enqueue does nothing): the
// tests call reserve and settle themselves.
func newCacheOnlyController(t *testing.T, cluster string, mask int) (*fixture, *ipamController) {
	t.Helper()
	f := newFixture(t)
	set, err := newCIDRSet(cluster, mask)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := informer.New(f.api, informer.Options{Selection: informer.Selection{Kind: "Node"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes.AddIndexers(informer.Indexers{rangeIndex: func(o *kplanev1.Object) []string {
		var out []string
		for _, i := range set.indexes(o.GetNode().GetSpec().GetPodCidr()) {
			out = append(out, strconv.Itoa(i))
		}
		return out
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- nodes.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("informer: %v", err)
		}
	})
	return f, &ipamController{set: set, nodes: nodes, log: hclog.NewNullLogger(), pending: map[int]pendingInfo{}, enqueue: func(string) {}}
}
