package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/record"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startIPAM runs one ipamctl in-process against srv until stop is called
// or the test ends; args are added to the command line. With an id it
// stands for election as that id (short leases); without, it runs
// unelected.
func startIPAM(t *testing.T, srv *testserver.Server, id string, args ...string) (stop func()) {
	t.Helper()
	if id != "" {
		args = append(controllertest.LeaderElection(id), args...)
	}
	ctl := controllertest.Run(t, srv.Addr(), NewService(), args...)
	return func() {
		if err := ctl.Stop(); err != nil {
			t.Errorf("ipamctl %s: %v", id, err)
		}
	}
}

type fixture struct {
	t   *testing.T
	srv *testserver.Server
	api kplanev1.ResourcesClient
	ctx context.Context
}

func newFixture(t *testing.T) *fixture {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return &fixture{t: t, srv: srv, api: srv.Client(), ctx: ctx}
}

func (f *fixture) createNode(name string) {
	f.t.Helper()
	_, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Node{
		Metadata: &kplanev1.ObjectMeta{Name: name}, Spec: &kplanev1.NodeSpec{}})})
	if err != nil {
		f.t.Errorf("create node %s: %v", name, err)
	}
}

func (f *fixture) deleteNode(name string) {
	f.t.Helper()
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Node", Name: name}); err != nil {
		f.t.Fatalf("delete node %s: %v", name, err)
	}
}

func (f *fixture) nodes() map[string]*kplanev1.Node {
	f.t.Helper()
	resp, err := f.api.List(f.ctx, &kplanev1.ListRequest{Kind: "Node"})
	if err != nil {
		f.t.Fatalf("list nodes: %v", err)
	}
	out := map[string]*kplanev1.Node{}
	for _, o := range resp.GetItems() {
		out[o.Meta().GetName()] = o.GetNode()
	}
	return out
}

// waitAssigned waits until every listed node has a pod CIDR and returns the nodes.
func (f *fixture) waitAssigned(names ...string) map[string]*kplanev1.Node {
	f.t.Helper()
	var nodes map[string]*kplanev1.Node
	testutil.Eventually(f.t, 30*time.Second, fmt.Sprintf("pod CIDRs on %v", names), func() bool {
		nodes = f.nodes()
		for _, n := range names {
			if nodes[n].GetSpec().GetPodCidr() == "" {
				return false
			}
		}
		return true
	})
	return nodes
}

// checkDistinct fails when two nodes' pod CIDRs overlap or one lies
// outside cluster or does not have the node mask.
func checkDistinct(t *testing.T, nodes map[string]*kplanev1.Node, cluster string, mask int) {
	t.Helper()
	c := netip.MustParsePrefix(cluster)
	seen := map[string]netip.Prefix{}
	for name, n := range nodes {
		s := n.GetSpec().GetPodCidr()
		if s == "" {
			continue
		}
		if got := n.GetSpec().GetPodCidrs(); len(got) != 1 || got[0] != s {
			t.Errorf("node %s has podCIDRs %v, want [%s]", name, got, s)
		}
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Bits() != mask || !c.Contains(p.Addr()) || p != p.Masked() {
			t.Errorf("node %s has pod CIDR %q, want a /%d range of %s", name, s, mask, cluster)
			continue
		}
		for other, q := range seen {
			if p.Overlaps(q) {
				t.Errorf("nodes %s (%s) and %s (%s) overlap", name, p, other, q)
			}
		}
		seen[name] = p
	}
}

// Fifty nodes registering at once, against two replicas (one leads): every
// node gets a range, no two overlap. The leader is then stopped (the lease
// is handed over) while more nodes register; the standby takes over from
// the Nodes alone and still never hands out a taken range.
func TestConcurrentRegistrationTwoReplicas(t *testing.T) {
	f := newFixture(t)
	stopA := startIPAM(t, f.srv, "replica-a")
	startIPAM(t, f.srv, "replica-b")

	var names []string
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		name := fmt.Sprintf("node-%02d", i)
		names = append(names, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.createNode(name)
		}()
	}
	wg.Wait()
	nodes := f.waitAssigned(names...)
	checkDistinct(t, nodes, defaultClusterCIDR, defaultNodeMaskSize)

	stopA() // whichever replica leads, the other one finishes the job
	for i := 50; i < 60; i++ {
		name := fmt.Sprintf("node-%02d", i)
		names = append(names, name)
		f.createNode(name)
	}
	nodes = f.waitAssigned(names...)
	if len(nodes) != 60 {
		t.Fatalf("%d nodes, want 60", len(nodes))
	}
	checkDistinct(t, nodes, defaultClusterCIDR, defaultNodeMaskSize)

	// Set once: the apiserver refuses to change an assigned range.
	n := nodes["node-00"]
	n.Spec.PodCidr = "127.99.99.0/24"
	_, err := f.api.Update(f.ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(n)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("changing spec.podCIDR: %v, want InvalidArgument", err)
	}
}

// A cluster CIDR with four ranges: the fifth node gets none, with a
// Warning Event and NetworkUnavailable=True, and no range twice; deleting
// a node frees its range for the waiting node, whose condition then turns
// False.
func TestExhaustionReleaseAndReuse(t *testing.T) {
	f := newFixture(t)
	const cluster = "10.9.0.0/24"
	startIPAM(t, f.srv, "", "--cluster-cidr", cluster, "--node-cidr-mask-size", "26")
	for i := 1; i <= 4; i++ {
		f.createNode(fmt.Sprintf("n%d", i))
	}
	nodes := f.waitAssigned("n1", "n2", "n3", "n4")
	checkDistinct(t, nodes, cluster, 26)
	freed := nodes["n2"].GetSpec().GetPodCidr()

	f.createNode("n5")
	testutil.Eventually(t, 30*time.Second, "n5 reported without a range", func() bool {
		c := networkCondition(f.nodes()["n5"])
		return c.GetStatus() == kplanev1.ConditionTrue && c.GetReason() == reasonCIDRNotAvailable
	})
	testutil.Eventually(t, 30*time.Second, "a CIDRNotAvailable Warning Event on n5", func() bool {
		resp, err := f.api.List(f.ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: kplanev1.NamespaceDefault})
		if err != nil {
			return false
		}
		for _, o := range resp.GetItems() {
			e := o.GetEvent()
			if e.GetReason() == reasonCIDRNotAvailable && e.GetType() == record.Warning && e.GetInvolvedObject().GetName() == "n5" {
				return true
			}
		}
		return false
	})
	nodes = f.nodes()
	if got := nodes["n5"].GetSpec().GetPodCidr(); got != "" {
		t.Fatalf("n5 got %s from a full cluster CIDR", got)
	}
	checkDistinct(t, nodes, cluster, 26)

	f.deleteNode("n2")
	nodes = f.waitAssigned("n5")
	if got := nodes["n5"].GetSpec().GetPodCidr(); got != freed {
		t.Fatalf("n5 got %s, want the freed range %s", got, freed)
	}
	checkDistinct(t, nodes, cluster, 26)
	testutil.Eventually(t, 30*time.Second, "n5's NetworkUnavailable condition False", func() bool {
		c := networkCondition(f.nodes()["n5"])
		return c.GetStatus() == kplanev1.ConditionFalse && c.GetReason() == reasonCIDRAssigned
	})
}

// ipamctl keeps nothing but the Nodes: a new process, started after nodes
// registered while none ran, skips every range the Nodes hold (including
// one set by hand) and carries on without a duplicate.
func TestRestartRebuildsFromNodes(t *testing.T) {
	f := newFixture(t)
	const cluster = "10.9.0.0/24"
	args := []string{"--cluster-cidr", cluster, "--node-cidr-mask-size", "27"}
	stop := startIPAM(t, f.srv, "", args...)
	f.createNode("a")
	f.createNode("b")
	before := f.waitAssigned("a", "b")
	stop()

	// A range set by the node's creator counts as taken: the first one
	// a and b do not hold (which ranges they got depends on the order
	// ipamctl saw them in).
	manual := ""
	for _, r := range []string{"10.9.0.0/27", "10.9.0.32/27", "10.9.0.64/27"} {
		if r != before["a"].GetSpec().GetPodCidr() && r != before["b"].GetSpec().GetPodCidr() {
			manual = r
			break
		}
	}
	_, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Node{
		Metadata: &kplanev1.ObjectMeta{Name: "manual"}, Spec: &kplanev1.NodeSpec{PodCidr: manual}})})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"c", "d", "e", "f", "g"} {
		f.createNode(n)
	}
	startIPAM(t, f.srv, "", args...)
	after := f.waitAssigned("a", "b", "c", "d", "e", "f", "g")
	for _, n := range []string{"a", "b"} {
		if after[n].GetSpec().GetPodCidr() != before[n].GetSpec().GetPodCidr() {
			t.Errorf("node %s changed range: %s -> %s", n, before[n].GetSpec().GetPodCidr(), after[n].GetSpec().GetPodCidr())
		}
	}
	checkDistinct(t, after, cluster, 27)
	// 8 ranges, 8 nodes: the next one waits.
	f.createNode("h")
	testutil.Eventually(t, 30*time.Second, "h reported without a range", func() bool {
		return networkCondition(f.nodes()["h"]).GetStatus() == kplanev1.ConditionTrue
	})
	checkDistinct(t, f.nodes(), cluster, 27)
}
