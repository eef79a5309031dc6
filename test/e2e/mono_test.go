package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

// One process or many: the same scenarios against the controllers as
// binaries of their own and as one kcm (docs/architecture.md).

// monoLeaseFlags keep failovers to seconds in both shapes.
var monoLeaseFlags = []string{"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
	"--leader-elect-retry-period", "500ms", "--shutdown-grace-period", "2s"}

// shapeScenario is one behaviour checked in both shapes, in a namespace
// of its own.
type shapeScenario struct {
	name string
	run  func(ctx context.Context, t *testing.T, c *client.Client, ns string)
}

// shapeScenarios touch every hosted loop that does something visible
// within seconds on fake nodes.
var shapeScenarios = []shapeScenario{
	{"replicaset-scale", scenarioReplicaSetScale},
	{"deployment-ready", scenarioDeploymentReady},
	{"job-completes", scenarioJobCompletes},
	{"gc-deletes-dependents", scenarioGarbageCollection},
	{"service-endpoints", scenarioEndpoints},
}

// TestShapes runs the shared scenarios against the whole control plane
// in both shapes: every controller its own process, and every controller
// but the scheduler in one kcm.
func TestShapes(t *testing.T) {
	for _, mono := range []bool{false, true} {
		name := "separate"
		if mono {
			name = "kcm"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			s := startStack(ctx, t, stack.Options{BinDir: binDir, DataDir: t.TempDir(), Runtime: stack.RuntimeFake, Nodes: 2,
				NoProxy: true, Mono: mono, ControllerArgs: monoLeaseFlags})
			if mono && s.Service("kcm-1") == nil {
				t.Fatal("the mono stack runs no kcm")
			}
			c := dialStack(ctx, t, s)
			for _, sc := range shapeScenarios {
				t.Run(sc.name, func(t *testing.T) {
					ns := namespaceWithAccount(ctx, t, c, fmt.Sprintf("%s-%s", name, sc.name))
					sc.run(ctx, t, c, ns)
				})
			}
		})
	}
}

// namespaceWithAccount creates ns and waits for tokenctl's default
// ServiceAccount, which pod admission wants.
func namespaceWithAccount(ctx context.Context, t *testing.T, c *client.Client, ns string) string {
	t.Helper()
	if _, err := client.Namespaces(c).Create(ctx, &kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the default ServiceAccount of "+ns, func() bool {
		_, err := client.ServiceAccounts(c).Get(ctx, ns, "default")
		return err == nil
	})
	return ns
}

func shapeRS(ns, name string, replicas int32) *kplanev1.ReplicaSet {
	l := map[string]string{"app": name}
	return &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: ns},
		Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(replicas), Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox",
					Ports: []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}},
	}
}

// livePods are ns's pods with label app=app that are not being deleted,
// and how many of them run.
func livePods(ctx context.Context, t *testing.T, c *client.Client, ns, app string) (all, running int) {
	t.Helper()
	pods, _, err := client.Pods(c).List(ctx, ns, client.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		all++
		if p.GetStatus().GetPhase() == "Running" {
			running++
		}
	}
	return all, running
}

func scenarioReplicaSetScale(ctx context.Context, t *testing.T, c *client.Client, ns string) {
	if _, err := client.ReplicaSets(c).Create(ctx, shapeRS(ns, "web", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "3 running pods", func() bool {
		all, running := livePods(ctx, t, c, ns, "web")
		return all == 3 && running == 3
	})
	scaleRS(ctx, t, c, ns, "web", 1)
	testutil.Eventually(t, 60*time.Second, "1 pod after scaling down", func() bool {
		all, _ := livePods(ctx, t, c, ns, "web")
		return all == 1
	})
}

func scaleRS(ctx context.Context, t *testing.T, c *client.Client, ns, name string, n int32) {
	t.Helper()
	for {
		rs, err := client.ReplicaSets(c).Get(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		rs.Spec.Replicas = proto.Int32(n)
		if _, err = client.ReplicaSets(c).Update(ctx, rs); err == nil {
			return
		}
		if !client.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

func scenarioDeploymentReady(ctx context.Context, t *testing.T, c *client.Client, ns string) {
	rs := shapeRS(ns, "app", 2)
	d := &kplanev1.Deployment{Metadata: &kplanev1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: &kplanev1.DeploymentSpec{Replicas: proto.Int32(2), Selector: rs.Spec.Selector, Template: rs.Spec.Template}}
	if _, err := client.Deployments(c).Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "the Deployment's 2 ready replicas", func() bool {
		got, err := client.Deployments(c).Get(ctx, ns, "app")
		return err == nil && got.GetStatus().GetReadyReplicas() == 2 && got.GetStatus().GetUpdatedReplicas() == 2
	})
}

func scenarioJobCompletes(ctx context.Context, t *testing.T, c *client.Client, ns string) {
	j := &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{Name: "batch", Namespace: ns},
		Spec: &kplanev1.JobSpec{Completions: proto.Int32(2), Parallelism: proto.Int32(2),
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Annotations: map[string]string{"kplane.io/fake-exit-after": "500ms", "kplane.io/fake-exit-code": "0"}},
				Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
					Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"}}}}}}}
	if _, err := client.Jobs(c).Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "the Job to complete", func() bool {
		got, err := client.Jobs(c).Get(ctx, ns, "batch")
		if err != nil {
			return false
		}
		for _, cond := range got.GetStatus().GetConditions() {
			if cond.GetType() == "Complete" && cond.GetStatus() == kplanev1.ConditionTrue {
				return got.GetStatus().GetSucceeded() == 2
			}
		}
		return false
	})
}

func scenarioGarbageCollection(ctx context.Context, t *testing.T, c *client.Client, ns string) {
	if _, err := client.ReplicaSets(c).Create(ctx, shapeRS(ns, "owned", 2)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "2 pods", func() bool {
		all, _ := livePods(ctx, t, c, ns, "owned")
		return all == 2
	})
	if _, err := client.ReplicaSets(c).Delete(ctx, ns, "owned", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the garbage collector to delete the pods", func() bool {
		pods, _, err := client.Pods(c).List(ctx, ns, client.ListOptions{LabelSelector: "app=owned"})
		return err == nil && len(pods) == 0
	})
}

func scenarioEndpoints(ctx context.Context, t *testing.T, c *client.Client, ns string) {
	if _, err := client.ReplicaSets(c).Create(ctx, shapeRS(ns, "ep", 2)); err != nil {
		t.Fatal(err)
	}
	svc := &kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Name: "ep", Namespace: ns},
		Spec: &kplanev1.ServiceSpec{Selector: map[string]string{"app": "ep"},
			Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")}}}}
	if _, err := client.Services(c).Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "2 ready addresses in the Endpoints", func() bool {
		ep, err := client.Endpoints(c).Get(ctx, ns, "ep")
		if err != nil {
			return false
		}
		n := 0
		for _, sub := range ep.GetSubsets() {
			n += len(sub.GetAddresses())
		}
		return n == 2
	})
}

// leaseHolderPid is the pid in the identity (hostname_pid) holding
// kplane-system/name, or 0.
func leaseHolderPid(ctx context.Context, t *testing.T, c *client.Client, name string) int {
	t.Helper()
	l, err := client.Leases(c).Get(ctx, kplanev1.NamespaceSystem, name)
	if err != nil {
		return 0
	}
	h := l.GetSpec().GetHolderIdentity()
	i := strings.LastIndexByte(h, '_')
	var pid int
	if i < 0 {
		return 0
	}
	if _, err := fmt.Sscan(h[i+1:], &pid); err != nil {
		return 0
	}
	return pid
}

// TestKCMWithSeparateNodectl: a kcm hosting replicactl and nodectl in a
// process of its own cooperate: nodectl evicts the pods of a node tainted
// NoExecute, and the ReplicaSet's controller in kcm replaces them on the
// other node.
func TestKCMWithSeparateNodectl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startStack(ctx, t, stack.Options{BinDir: binDir, DataDir: t.TempDir(), Runtime: stack.RuntimeFake, Nodes: 2, NoProxy: true,
		Controllers: []string{"scheduler", "ipamctl", "replicactl", "nodectl"}, KCM: []string{"replicactl"}, ControllerArgs: monoLeaseFlags,
		Args: map[string][]string{"nodectl": {"--pod-eviction-timeout", "1s", "--node-monitor-period", "1s"}}})
	kcm, nodectl := s.Service("kcm-1"), s.Service("nodectl-1")
	if kcm == nil || nodectl == nil || s.Service("replicactl-1") != nil {
		t.Fatalf("want kcm-1 hosting replicactl and nodectl-1 apart, have %v", s.Services())
	}
	c := dialStack(ctx, t, s)
	ns := namespaceWithAccount(ctx, t, c, "cooperate")
	if _, err := client.ReplicaSets(c).Create(ctx, shapeRS(ns, "web", 4)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "4 running pods", func() bool {
		all, running := livePods(ctx, t, c, ns, "web")
		return all == 4 && running == 4
	})
	if p := leaseHolderPid(ctx, t, c, "replicactl"); p != kcm.Process().Pid() {
		t.Fatalf("replicactl's lease is held by pid %d, not kcm's %d", p, kcm.Process().Pid())
	}
	if p := leaseHolderPid(ctx, t, c, "nodectl"); p != nodectl.Process().Pid() {
		t.Fatalf("nodectl's lease is held by pid %d, not nodectl's %d", p, nodectl.Process().Pid())
	}

	// Drain the node with most of the pods.
	pods, _, err := client.Pods(c).List(ctx, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.GetSpec().GetNodeName()]++
	}
	drained := ""
	for n, k := range perNode {
		if drained == "" || k > perNode[drained] {
			drained = n
		}
	}
	for {
		n, err := client.Nodes(c).Get(ctx, "", drained)
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: "example.com/drain", Effect: kplanev1.TaintEffectNoExecute})
		if _, err = client.Nodes(c).Update(ctx, n); err == nil {
			break
		}
		if !client.IsConflict(err) {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 90*time.Second, "4 running pods, none on the drained node "+drained, func() bool {
		pods, _, err := client.Pods(c).List(ctx, ns, client.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range pods {
			if p.GetSpec().GetNodeName() == drained {
				return false
			}
			if p.GetMetadata().GetDeletionTimestamp() == nil && p.GetStatus().GetPhase() == "Running" {
				running++
			}
		}
		return running == 4
	})
}

// TestMoveReplicactlIntoKCM moves replicactl from its own process into a
// kcm while ReplicaSets are being scaled: the kcm stands by while the
// binary leads, takes the lease when the binary stops, and no ReplicaSet
// ever has more pods than the most replicas it was given (no double
// create), and each ends with exactly its replicas.
func TestMoveReplicactlIntoKCM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := startStack(ctx, t, stack.Options{BinDir: binDir, DataDir: t.TempDir(), Runtime: stack.RuntimeFake, Nodes: 2, NoProxy: true,
		Controllers: []string{"scheduler", "ipamctl", "replicactl"}, ControllerArgs: monoLeaseFlags})
	c := dialStack(ctx, t, s)
	ns := namespaceWithAccount(ctx, t, c, "move")
	const sets = 4
	var mu sync.Mutex
	maxSet := map[string]int32{}  // most replicas each set was given
	current := map[string]int32{} // its replicas now
	for i := range sets {
		name := fmt.Sprintf("rs-%d", i)
		maxSet[name], current[name] = 3, 3
		if _, err := client.ReplicaSets(c).Create(ctx, shapeRS(ns, name, 3)); err != nil {
			t.Fatal(err)
		}
	}

	// The load: every 300ms one set gets a new size in 1..6.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadDone sync.WaitGroup
	var scales atomic.Int64
	loadDone.Add(1)
	go func() {
		defer loadDone.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			name := fmt.Sprintf("rs-%d", i%sets)
			n := int32(1 + (i*7+3)%6)
			mu.Lock()
			if n > maxSet[name] {
				maxSet[name] = n // raised before the write, so a check never sees pods ahead of it
			}
			mu.Unlock()
			rs, err := client.ReplicaSets(c).Get(loadCtx, ns, name)
			if err == nil {
				rs.Spec.Replicas = proto.Int32(n)
				if _, err = client.ReplicaSets(c).Update(loadCtx, rs); err == nil {
					mu.Lock()
					current[name] = n
					mu.Unlock()
					scales.Add(1)
				}
			}
			select {
			case <-loadCtx.Done():
			case <-time.After(300 * time.Millisecond): // the load's pace
			}
		}
	}()
	defer func() { stopLoad(); loadDone.Wait() }()

	// The invariant, checked all along: no set has more live pods than it
	// was ever asked for.
	var violation atomic.Value
	checkCtx, stopCheck := context.WithCancel(ctx)
	var checkDone sync.WaitGroup
	checkDone.Add(1)
	go func() {
		defer checkDone.Done()
		for checkCtx.Err() == nil {
			for i := range sets {
				name := fmt.Sprintf("rs-%d", i)
				all, _ := livePodsQuiet(checkCtx, c, ns, name)
				mu.Lock()
				most := maxSet[name]
				mu.Unlock()
				if all > int(most) {
					violation.Store(fmt.Sprintf("%s has %d live pods, but was never given more than %d replicas", name, all, most))
				}
			}
			select {
			case <-checkCtx.Done():
			case <-time.After(100 * time.Millisecond): // sampling pace
			}
		}
	}()
	defer func() { stopCheck(); checkDone.Wait() }()

	solo := s.Service("replicactl-1")
	testutil.Eventually(t, 30*time.Second, "replicactl-1 to lead", func() bool {
		return leaseHolderPid(ctx, t, c, "replicactl") == solo.Process().Pid()
	})
	kcm, err := s.StartKCM(ctx, []string{"replicactl"})
	if err != nil {
		t.Fatal(err)
	}
	// The kcm stands by while the binary leads (over several renewals).
	standby := time.Now().Add(3 * time.Second)
	for time.Now().Before(standby) {
		if p := leaseHolderPid(ctx, t, c, "replicactl"); p != solo.Process().Pid() {
			t.Fatalf("the lease moved to pid %d while replicactl-1 (%d) runs", p, solo.Process().Pid())
		}
		time.Sleep(200 * time.Millisecond) // spacing the observations
	}
	before := scales.Load()
	if err := solo.Process().Term(ctx); err != nil {
		t.Fatalf("stop replicactl-1: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "kcm to take replicactl's lease", func() bool {
		return leaseHolderPid(ctx, t, c, "replicactl") == kcm.Process().Pid()
	})
	testutil.Eventually(t, 30*time.Second, "more scaling under kcm", func() bool { return scales.Load() >= before+10 })
	stopLoad()
	loadDone.Wait()
	testutil.Eventually(t, 90*time.Second, "every set to have exactly its replicas", func() bool {
		for i := range sets {
			name := fmt.Sprintf("rs-%d", i)
			all, running := livePodsQuiet(ctx, c, ns, name)
			mu.Lock()
			want := int(current[name])
			mu.Unlock()
			if all != want || running != want {
				return false
			}
		}
		return true
	})
	stopCheck()
	checkDone.Wait()
	if v := violation.Load(); v != nil {
		t.Fatal(v)
	}
	t.Logf("%d scale writes; replicactl moved from pid %d to kcm pid %d", scales.Load(), solo.Process().Pid(), kcm.Process().Pid())
}

// livePodsQuiet is livePods for a goroutine: -1 on a failed list.
func livePodsQuiet(ctx context.Context, c *client.Client, ns, app string) (all, running int) {
	pods, _, err := client.Pods(c).List(ctx, ns, client.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return -1, -1
	}
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		all++
		if p.GetStatus().GetPhase() == "Running" {
			running++
		}
	}
	return all, running
}
