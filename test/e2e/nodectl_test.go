package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

func init() {
	// The node lifecycle tests run the whole loop: scheduler, node
	// agents and nodectl, besides the apiserver.
	binaries["nodectl"] = "services/nodectl"
	binaries["nodeagent"] = "services/nodeagent"
	binaries["scheduler"] = "services/scheduler"
	binaries["ipamctl"] = "services/ipamctl"
}

// Short node lifecycle timings, so that the tests take seconds.
const (
	ncHeartbeat = time.Second
	ncPeriod    = time.Second
	ncGrace     = 4 * time.Second
)

// ncCluster is an apiserver, a scheduler, nodectl and one node agent
// process per node (fake runtime), so that one agent can be killed alone.
type ncCluster struct {
	t      *testing.T
	api    kplanev1.ResourcesClient
	agents map[string]*launcher.Process
}

// ncStart runs one binary with a free --health-addr (HTTP) and kills it
// when the test ends; grpcHealth, when set, is where WaitHealthy checks.
func ncStart(t *testing.T, name, grpcHealth string, args ...string) *launcher.Process {
	t.Helper()
	return startProcess(t, name, binaryOf(name), grpcHealth, args...)
}

// binaryOf maps a process name such as "nodeagent-b" to its binary.
func binaryOf(name string) string {
	for _, b := range []string{"nodeagent", "nodectl", "scheduler"} {
		if len(name) >= len(b) && name[:len(b)] == b {
			return b
		}
	}
	return name
}

func newNCCluster(t *testing.T, evictionTimeout time.Duration, nodes ...string) *ncCluster {
	t.Helper()
	a, api := ncAPIServer(t, nodes...)
	c := &ncCluster{t: t, api: api, agents: map[string]*launcher.Process{}}
	a.startTokenctl(t, api)
	ncStart(t, "scheduler", "", append(a.connArgs("scheduler"), "--log-level", "debug")...)
	ncStart(t, "nodectl", "", append(a.connArgs("nodectl"), "--log-level", "debug",
		"--node-monitor-period", ncPeriod.String(), "--node-monitor-grace-period", ncGrace.String(),
		"--pod-eviction-timeout", evictionTimeout.String())...)
	ncStart(t, "ipamctl", "", a.connArgs("ipamctl")...) // nodes are Ready once they have a pod CIDR
	for _, n := range nodes {
		logs, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		// One fake node per process, so each agent runs as its own
		// node, as a real one would.
		c.agents[n] = ncStart(t, "nodeagent-"+n, "", append(a.connArgs(n), "--log-level", "debug",
			"--runtime", "fake", "--node-name", n, "--root-dir", t.TempDir(), "--logs-addr", logs,
			"--heartbeat-interval", ncHeartbeat.String(), "--lease-duration", ncGrace.String())...)
	}
	c.eventually("every node registered and Ready", func() bool {
		for _, n := range nodes {
			node, ok := c.node(n)
			if !ok || ncReady(node) != "True" {
				return false
			}
		}
		return true
	})
	return c
}

// ncAPIServer runs a secured bin/apiserver like startAPIServer, with
// node certificates for nodes, returning its configuration too, which
// the other processes connect with.
func ncAPIServer(t *testing.T, nodes ...string) (apiConfig, kplanev1.ResourcesClient) {
	t.Helper()
	a := newAPIConfig(t, nodes...)
	waitHealthy(t, launch(t, a.config(t.TempDir(), t.TempDir(), "--log-level", "info")))
	return a, a.dial(t)
}

func (c *ncCluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting until %s", what)
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatal(c.t.Context().Err())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

func (c *ncCluster) node(name string) (*kplanev1.Node, bool) {
	ctx, opt := call(c.t)
	resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: name}, opt)
	if err != nil {
		return nil, false
	}
	return resp.GetObject().GetNode(), true
}

func (c *ncCluster) pods(field string) []*kplanev1.Pod {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", FieldSelector: field}, opt)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*kplanev1.Pod
	for _, o := range resp.GetItems() {
		out = append(out, o.GetPod())
	}
	return out
}

func (c *ncCluster) evictionEvents() []*kplanev1.Event {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: "default"}, opt)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*kplanev1.Event
	for _, o := range resp.GetItems() {
		if e := o.GetEvent(); e.GetReason() == "TaintManagerEviction" {
			out = append(out, e)
		}
	}
	return out
}

// runPods creates n pods and waits until the scheduler bound them all and
// their agents report them running.
func (c *ncCluster) runPods(n int) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		ctx, opt := call(c.t)
		pod := &kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default"},
			Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(pod)}, opt); err != nil {
			c.t.Fatal(err)
		}
	}
	c.eventually("every pod bound and running", func() bool {
		pods := c.pods("")
		for _, p := range pods {
			if p.GetSpec().GetNodeName() == "" || p.GetStatus().GetPhase() != "Running" {
				return false
			}
		}
		return len(pods) == n
	})
}

// busiestNode returns a node with pods and their uids.
func (c *ncCluster) busiestNode() (string, map[string]string) {
	c.t.Helper()
	byNode := map[string]map[string]string{}
	for _, p := range c.pods("") {
		n := p.GetSpec().GetNodeName()
		if byNode[n] == nil {
			byNode[n] = map[string]string{}
		}
		byNode[n][p.GetMetadata().GetName()] = p.GetMetadata().GetUid()
	}
	best := ""
	for n, ps := range byNode {
		if best == "" || len(ps) > len(byNode[best]) {
			best = n
		}
	}
	return best, byNode[best]
}

func ncReady(n *kplanev1.Node) string {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus()
		}
	}
	return ""
}

func ncTaint(n *kplanev1.Node, key, effect string) *kplanev1.Taint {
	for _, t := range n.GetSpec().GetTaints() {
		if t.GetKey() == key && t.GetEffect() == effect {
			return t
		}
	}
	return nil
}

func ncUnreachable(n *kplanev1.Node) bool {
	return ncReady(n) == "Unknown" &&
		ncTaint(n, "node.kubernetes.io/unreachable", "NoSchedule") != nil &&
		ncTaint(n, "node.kubernetes.io/unreachable", "NoExecute") != nil
}

func TestNodectlEvictsPodsOfKilledAgent(t *testing.T) {
	const timeout = 6 * time.Second
	c := newNCCluster(t, timeout, "node-a", "node-b", "node-c")
	c.runPods(6)
	victim, pods := c.busiestNode()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.agents[victim].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	c.eventually(victim+" is Unknown and tainted unreachable", func() bool {
		n, ok := c.node(victim)
		return ok && ncUnreachable(n)
	})
	n, _ := c.node(victim)
	deadline := ncTaint(n, "node.kubernetes.io/unreachable", "NoExecute").GetTimeAdded().AsTime().Add(timeout)
	c.eventually("the killed agent's pods are deleted", func() bool {
		for _, p := range c.pods("spec.nodeName=" + victim) {
			if pods[p.GetMetadata().GetName()] == p.GetMetadata().GetUid() {
				return false
			}
		}
		return true
	})
	// The events are recorded after the deletions (asynchronously): wait
	// for them, then count.
	c.eventually("an eviction event per pod", func() bool { return len(c.evictionEvents()) >= len(pods) })
	evs := c.evictionEvents()
	if len(evs) != len(pods) {
		t.Fatalf("%d eviction events for %d pods", len(evs), len(pods))
	}
	for _, e := range evs {
		if e.GetFirstTimestamp().AsTime().Before(deadline) {
			t.Fatalf("pod %s evicted at %v, before its deadline %v", e.GetInvolvedObject().GetName(), e.GetFirstTimestamp().AsTime(), deadline)
		}
	}
	for name := range c.agents {
		if name == victim {
			continue
		}
		if n, _ := c.node(name); ncReady(n) != "True" || len(n.GetSpec().GetTaints()) != 0 {
			t.Fatalf("live node %s marked: %v", name, n)
		}
	}
}

func TestNodectlForgivesAgentBackBeforeTimeout(t *testing.T) {
	// A longer timeout than the first case, so that a slow machine still
	// restarts the agent well inside the window.
	const timeout = 15 * time.Second
	c := newNCCluster(t, timeout, "node-a", "node-b", "node-c")
	c.runPods(6)
	victim, pods := c.busiestNode()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.agents[victim].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	c.eventually(victim+" is Unknown and tainted unreachable", func() bool {
		n, ok := c.node(victim)
		return ok && ncUnreachable(n)
	})
	if err := c.agents[victim].Restart(); err != nil {
		t.Fatal(err)
	}
	c.eventually(victim+" is Ready again without taints", func() bool {
		n, ok := c.node(victim)
		return ok && ncReady(n) == "True" && len(n.GetSpec().GetTaints()) == 0
	})
	left := c.pods("spec.nodeName=" + victim)
	if len(left) != len(pods) {
		t.Fatalf("%d of %d pods left on %s", len(left), len(pods), victim)
	}
	for _, p := range left {
		if pods[p.GetMetadata().GetName()] != p.GetMetadata().GetUid() {
			t.Fatalf("pod %s was replaced", p.GetMetadata().GetName())
		}
	}
	if evs := c.evictionEvents(); len(evs) != 0 {
		t.Fatalf("%d evictions", len(evs))
	}
}
