package nodeipam

import (
	"context"
	"strconv"
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
	f := newFixture(t)
	set, err := newCIDRSet("10.0.0.0/22", 24) // four ranges
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := informer.New(f.api, informer.Options{Selection: informer.Selection{Kind: "Node"}})
	if err != nil {
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
	c := &ipamController{set: set, nodes: nodes, log: hclog.NewNullLogger(), pending: map[int]pendingInfo{}}
	if err := nodes.AddIndexers(informer.Indexers{rangeIndex: func(o *kplanev1.Object) []string {
		var out []string
		for _, i := range set.indexes(o.GetNode().GetSpec().GetPodCidr()) {
			out = append(out, strconv.Itoa(i))
		}
		return out
	}}); err != nil {
		t.Fatal(err)
	}
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
