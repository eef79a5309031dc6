package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

func init() {
	replicactlBinaries["daemonsetctl"] = "services/daemonsetctl"
}

// dsNodes tracks the DaemonSet pods by node from the watch, and the most
// nodes of a given set ever without a Ready pod while a rollout runs.
type dsNodes struct {
	mu       sync.Mutex
	pods     map[string]*kplanev1.Pod
	watching map[string]bool
	worst    int
}

func (c *cluster) watchDaemonPods() *dsNodes {
	c.tb.Helper()
	w := &dsNodes{pods: map[string]*kplanev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		c.tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			p := ev.GetObject().GetPod()
			if p == nil {
				continue
			}
			w.mu.Lock()
			if ev.GetType() == kplanev1.EventType_EVENT_TYPE_DELETED {
				delete(w.pods, p.GetMetadata().GetName())
			} else {
				w.pods[p.GetMetadata().GetName()] = p
			}
			if w.watching != nil {
				ready := map[string]bool{}
				for _, q := range w.pods {
					if apiutil.IsPodReady(q) && q.GetMetadata().GetDeletionTimestamp() == nil {
						ready[q.GetSpec().GetNodeName()] = true
					}
				}
				n := 0
				for node := range w.watching {
					if !ready[node] {
						n++
					}
				}
				w.worst = max(w.worst, n)
			}
			w.mu.Unlock()
		}
	}()
	c.tb.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *dsNodes) watch(nodes []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watching = map[string]bool{}
	for _, n := range nodes {
		w.watching[n] = true
	}
	w.worst = 0
}

func (w *dsNodes) worstUnavailable() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst
}

// daemonPods lists the bound, non-terminating pods of app by node.
func (c *cluster) daemonPods(app string) map[string][]*kplanev1.Pod {
	c.tb.Helper()
	resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=" + app})
	if err != nil {
		c.tb.Fatal(err)
	}
	out := map[string][]*kplanev1.Pod{}
	for _, o := range resp.GetItems() {
		if p := o.GetPod(); p.GetMetadata().GetDeletionTimestamp() == nil && p.GetSpec().GetNodeName() != "" {
			out[p.GetSpec().GetNodeName()] = append(out[p.GetSpec().GetNodeName()], p)
		}
	}
	return out
}

// daemonOn: exactly one Ready pod on each of nodes and nowhere else, at
// the template's image, and the status agrees.
func (c *cluster) daemonOn(app string, nodes ...string) func() string {
	return func() string {
		got := c.daemonPods(app)
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "DaemonSet", Namespace: "default", Name: app})
		if err != nil {
			return err.Error()
		}
		ds := resp.GetObject().GetDaemonSet()
		img := ds.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage()
		if len(got) != len(nodes) {
			return fmt.Sprintf("pods on %d nodes, want %d", len(got), len(nodes))
		}
		for _, n := range nodes {
			if ps := got[n]; len(ps) != 1 || !apiutil.IsPodReady(ps[0]) || ps[0].GetSpec().GetContainers()[0].GetImage() != img {
				return fmt.Sprintf("node %s: %d pods", n, len(ps))
			}
		}
		st, k := ds.GetStatus(), int32(len(nodes))
		if st.GetDesiredNumberScheduled() != k || st.GetNumberReady() != k || st.GetUpdatedNumberScheduled() != k || st.GetNumberAvailable() != k {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	}
}

func (c *cluster) changeNodeE2E(name string, mutate func(*kplanev1.Node)) {
	c.tb.Helper()
	err := client.RetryOnConflict(c.ctx(), client.DefaultRetry, func() error {
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "Node", Name: name})
		if err != nil {
			return err
		}
		mutate(resp.GetObject().GetNode())
		_, err = c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: resp.GetObject()})
		return err
	})
	if err != nil {
		c.tb.Fatal(err)
	}
}

// launcherFreeAddr is a free loopback address (a node agent's logs
// server must not take the fixed :10250 another test may hold).
func launcherFreeAddr() (string, error) { return launcher.FreeAddr() }

func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := launcherFreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func fakeNodes(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	sort.Strings(out)
	return out
}

// TestDaemonSet with real processes and fake nodes: 5 nodes get 5 pods,
// each bound by the scheduler through its matchFields node affinity; a
// 6th node joins and gets its own; a node tainted NoSchedule keeps its
// pod but does not get a new one; a cordoned node does; a rolling update
// with maxUnavailable 1 never has two nodes without a Ready pod; a set
// whose pod fits no node leaves every pod Pending with the scheduler's
// reason.
func TestDaemonSet(t *testing.T) {
	needBinaries(t, "daemonsetctl", "scheduler", "nodeagent", "ipamctl")
	c := startCluster(t)
	c.startController("daemonsetctl", "daemonsetctl")
	c.startController("scheduler", "scheduler", "--log-level", "warn")
	c.startController("ipamctl", "ipamctl", "--log-level", "warn")
	c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "5", "--node-name", "fake",
		"--root-dir", t.TempDir(), "--log-level", "warn", "--logs-addr", freeAddr(t))
	w := c.watchDaemonPods()
	l := map[string]string{"app": "logs"}
	ds := &kplanev1.DaemonSet{Metadata: &kplanev1.ObjectMeta{Name: "logs", Namespace: "default"}, Spec: &kplanev1.DaemonSetSpec{
		Selector: &kplanev1.LabelSelector{MatchLabels: l},
		Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l, Annotations: map[string]string{annotationStartDelay: "300ms"}},
			Spec: &kplanev1.PodSpec{TerminationGracePeriodSeconds: proto.Int64(1), Containers: []*kplanev1.Container{{Name: "tail", Image: "tail:1"}}}}}}
	if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(ds)}); err != nil {
		t.Fatal(err)
	}
	five := fakeNodes("fake", 5)
	c.eventually(time.Minute, c.daemonOn("logs", five...))
	for node, ps := range c.daemonPods("logs") {
		terms := ps[0].GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms()
		if len(terms) != 1 || len(terms[0].GetMatchFields()) != 1 || terms[0].GetMatchFields()[0].GetValues()[0] != node {
			t.Fatalf("pod on %s: required node affinity %v, want matchFields metadata.name In [%s]", node, terms, node)
		}
	}

	c.startController("nodeagent-extra", "nodeagent", "--runtime", "fake", "--fake-nodes", "1", "--node-name", "extra",
		"--root-dir", t.TempDir(), "--log-level", "warn", "--logs-addr", freeAddr(t))
	six := append(append([]string(nil), five...), "extra-0")
	c.eventually(time.Minute, c.daemonOn("logs", six...))

	// NoSchedule without a toleration: the running pod stays, a deleted
	// one is not replaced there.
	c.changeNodeE2E("fake-1", func(n *kplanev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: "dedicated", Value: "db", Effect: kplanev1.TaintEffectNoSchedule})
	})
	// Cordoned: still a DaemonSet node.
	c.changeNodeE2E("fake-2", func(n *kplanev1.Node) { n.Spec.Unschedulable = true })
	c.eventually(time.Minute, func() string {
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "DaemonSet", Namespace: "default", Name: "logs"})
		if err != nil {
			return err.Error()
		}
		if st := resp.GetObject().GetDaemonSet().GetStatus(); st.GetDesiredNumberScheduled() != 5 || st.GetNumberMisscheduled() != 1 {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
	if got := c.daemonPods("logs"); len(got["fake-1"]) != 1 {
		t.Fatal("the NoSchedule node lost its running pod")
	}
	for _, node := range []string{"fake-1", "fake-2"} {
		p := c.daemonPods("logs")[node][0]
		if _, err := c.api.Delete(c.ctx(), &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: p.GetMetadata().GetName()}); err != nil {
			t.Fatal(err)
		}
	}
	eligible := []string{"extra-0", "fake-0", "fake-2", "fake-3", "fake-4"}
	c.eventually(time.Minute, c.daemonOn("logs", eligible...))

	// Rolling update, maxUnavailable 1 (the default).
	w.watch(eligible)
	err := client.RetryOnConflict(c.ctx(), client.DefaultRetry, func() error {
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "DaemonSet", Namespace: "default", Name: "logs"})
		if err != nil {
			return err
		}
		resp.GetObject().GetDaemonSet().Spec.Template.Spec.Containers[0].Image = "tail:2"
		_, err = c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: resp.GetObject()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(2*time.Minute, c.daemonOn("logs", eligible...))
	if n := w.worstUnavailable(); n != 1 {
		t.Fatalf("rolling update: at worst %d nodes without a Ready pod, want 1", n)
	}
	if out, err := c.kpctl("get", "ds", "logs"); err != nil || !strings.Contains(out, "logs   5         5         5       5            5") {
		t.Fatalf("kpctl get ds: %v\n%s", err, out)
	}

	// A pod no node has room for: created for each eligible node, left
	// Pending by the scheduler with its reason, never forced on a node.
	big := proto.Clone(ds).(*kplanev1.DaemonSet)
	big.Metadata = &kplanev1.ObjectMeta{Name: "big", Namespace: "default"}
	bl := map[string]string{"app": "big"}
	big.Spec.Selector.MatchLabels, big.Spec.Template.Metadata.Labels = bl, bl
	big.Spec.Template.Spec.Containers[0].Resources = &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "10000"}}
	if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(big)}); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Minute, func() string {
		resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=big"})
		if err != nil {
			return err.Error()
		}
		if len(resp.GetItems()) != len(eligible) {
			return fmt.Sprintf("%d pods, want %d", len(resp.GetItems()), len(eligible))
		}
		for _, o := range resp.GetItems() {
			p := o.GetPod()
			cond := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodScheduled)
			if p.GetSpec().GetNodeName() != "" || p.GetStatus().GetPhase() != kplanev1.PodPending || cond.GetReason() != "Unschedulable" ||
				!strings.Contains(cond.GetMessage(), "Insufficient cpu") {
				return fmt.Sprintf("pod %s: node %q, phase %s, PodScheduled %v", p.GetMetadata().GetName(), p.GetSpec().GetNodeName(), p.GetStatus().GetPhase(), cond)
			}
		}
		return ""
	})
}
