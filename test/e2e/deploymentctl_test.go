package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/rollout"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func init() {
	replicactlBinaries["deploymentctl"] = "services/deploymentctl"
	replicactlBinaries["kpctl"] = "cmd/kpctl"
}

// annotationStartDelay makes the fake runtime start a pod's containers
// (and so report it Ready) only after this long: the readiness delay.
const annotationStartDelay = "kplane.io/fake-start-delay"

// deployCluster is an apiserver, replicactl, deploymentctl, the
// scheduler, ipamctl and a node agent faking nodes, as processes.
func deployCluster(tb testing.TB, nodes int, controllerArgs ...string) *cluster {
	tb.Helper()
	needBinaries(tb, "replicactl", "deploymentctl", "scheduler", "nodeagent", "ipamctl", "kpctl")
	c := startCluster(tb)
	c.startController("replicactl", "replicactl", append([]string{"--log-level", "warn"}, controllerArgs...)...)
	c.startController("deploymentctl", "deploymentctl", controllerArgs...)
	c.startController("scheduler", "scheduler", "--log-level", "warn")
	c.startController("ipamctl", "ipamctl", "--log-level", "warn")
	c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", fmt.Sprint(nodes), "--node-name", "fake",
		"--root-dir", tb.TempDir(), "--log-level", "warn")
	return c
}

// observers feeds every pod event to the Observer of the pod's app label,
// in watch order.
type observers struct {
	mu  sync.Mutex
	obs map[string]*rollout.Observer
}

func (c *cluster) observePods() *observers {
	c.tb.Helper()
	o := &observers{obs: map[string]*rollout.Observer{}}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		c.tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			p := resp.GetObject().GetPod()
			if p == nil {
				continue
			}
			o.of(p.GetMetadata().GetLabels()["app"]).Observe(resp.GetType(), p, time.Now())
		}
	}()
	c.tb.Cleanup(func() { cancel(); <-done })
	return o
}

func (o *observers) of(app string) *rollout.Observer {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.obs[app] == nil {
		o.obs[app] = rollout.NewObserver(0)
	}
	return o.obs[app]
}

// armFloor arms o's bounds with the availability floor once o itself
// counts every replica available: the Deployment's status can say so
// before the pods' Ready events reach the observer's watch, and a floor
// armed during that lag fails at once.
func (c *cluster) armFloor(o *rollout.Observer, replicas, maxPods, minAvailable int32) {
	c.tb.Helper()
	c.eventually(time.Minute, func() string {
		if _, a := o.Counts(time.Now()); a < replicas {
			return fmt.Sprintf("the observer counts %d of %d replicas available", a, replicas)
		}
		return ""
	})
	o.SetBounds(maxPods, minAvailable, false, time.Now())
}

func e2eDeployment(name string, replicas int32, image, startDelay string) *kplanev1.Deployment {
	l := map[string]string{"app": name}
	return &kplanev1.Deployment{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.DeploymentSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: l, Annotations: map[string]string{annotationStartDelay: startDelay}},
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

func (c *cluster) deployment(name string) *kplanev1.Deployment {
	c.tb.Helper()
	resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "Deployment", Namespace: "default", Name: name})
	if err != nil {
		c.tb.Fatal(err)
	}
	return resp.GetObject().GetDeployment()
}

func (c *cluster) deploymentSets(name string) []*kplanev1.ReplicaSet {
	c.tb.Helper()
	resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "ReplicaSet", Namespace: "default", LabelSelector: "app=" + name})
	if err != nil {
		c.tb.Fatal(err)
	}
	var out []*kplanev1.ReplicaSet
	for _, o := range resp.GetItems() {
		out = append(out, o.GetReplicaSet())
	}
	return out
}

// kpctl runs bin/kpctl against the cluster.
func (c *cluster) kpctl(args ...string) (string, error) {
	out, err := c.cfg.kpctl(args...).CombinedOutput()
	return string(out), err
}

func (c *cluster) mustKpctl(args ...string) string {
	c.tb.Helper()
	out, err := c.kpctl(args...)
	if err != nil {
		c.tb.Fatalf("kpctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// rolledOut waits until the Deployment's current template is fully rolled
// out: observed, every replica updated and available, nothing else left.
func (c *cluster) rolledOut(name string, d time.Duration) *kplanev1.Deployment {
	c.tb.Helper()
	var last *kplanev1.Deployment
	c.eventually(d, func() string {
		last = c.deployment(name)
		st, want := last.GetStatus(), last.GetSpec().GetReplicas()
		prog := apiutil.FindCondition(st.GetConditions(), kplanev1.DeploymentProgressing)
		if st.GetObservedGeneration() != last.GetMetadata().GetGeneration() || st.GetUpdatedReplicas() != want ||
			st.GetReplicas() != want || st.GetAvailableReplicas() != want || prog.GetReason() != kplanev1.ReasonNewReplicaSetAvailable {
			return fmt.Sprintf("deployment %s not rolled out: %v", name, st)
		}
		return ""
	})
	return last
}

func requireNoViolations(tb testing.TB, name string, o *rollout.Observer) {
	tb.Helper()
	events, peak, low, v := o.Report()
	if len(v) > 0 {
		tb.Fatalf("%s: bounds broken %d times in %d pod events: %s", name, len(v), events, strings.Join(v[:min(5, len(v))], "; "))
	}
	tb.Logf("%s: %d pod events checked, peak %d pods, lowest availability %d", name, events, peak, low)
}

// TestDeploymentRolloutE2E runs bin/deploymentctl with bin/replicactl, the
// scheduler and a fake-runtime node agent (pods Ready 300ms after they
// start): a rollout of 10 replicas with maxSurge 2 and maxUnavailable 1
// is watched by an observer that checks both bounds at every pod event;
// kpctl rollout undo restores the old template and ReplicaSet; pause
// stops a rollout half-way; a template whose pods never become ready
// hits the progress deadline, which kpctl rollout status reports.
func TestDeploymentRolloutE2E(t *testing.T) {
	c := deployCluster(t, 5)
	obs := c.observePods()
	web := obs.of("web")
	d := e2eDeployment("web", 10, "web:1", "300ms")
	d.Spec.ProgressDeadlineSeconds = proto.Int32(5)
	d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: kplanev1.DeploymentStrategyRollingUpdate, RollingUpdate: &kplanev1.RollingUpdateDeployment{
		MaxSurge: kplanev1.IntOrStringFromInt32(2), MaxUnavailable: kplanev1.IntOrStringFromInt32(1)}}
	web.SetBounds(12, -1, false, time.Now())
	if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(d)}); err != nil {
		t.Fatal(err)
	}
	c.rolledOut("web", 2*time.Minute)
	c.armFloor(web, 10, 12, 9)

	// A rolling update, followed by kpctl rollout status to its end.
	c.mustKpctl("set", "image", "deploy/web", "app=web:2")
	if out := c.mustKpctl("rollout", "status", "deploy/web", "--timeout=2m"); !strings.HasSuffix(out, "deployment \"web\" successfully rolled out\n") {
		t.Fatalf("rollout status:\n%s", out)
	}
	c.rolledOut("web", 2*time.Minute)
	requireNoViolations(t, "rolling update", web)
	sets := c.deploymentSets("web")
	if len(sets) != 2 {
		t.Fatalf("%d sets after one update", len(sets))
	}
	var first *kplanev1.ReplicaSet
	for _, rs := range sets {
		if rollout.Revision(rs.GetMetadata()) == 1 {
			first = rs
		}
	}
	if first == nil || first.GetSpec().GetReplicas() != 0 {
		t.Fatalf("revision 1 set: %v", first)
	}

	// Rollback restores the first template and set.
	if out := c.mustKpctl("rollout", "undo", "deploy/web"); out != "deployment/web rolled back\n" {
		t.Fatalf("undo: %q", out)
	}
	back := c.rolledOut("web", 2*time.Minute)
	requireNoViolations(t, "rollback", web)
	if img := back.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage(); img != "web:1" || rollout.Revision(back.GetMetadata()) != 3 {
		t.Fatalf("after undo: image %s revision %d", img, rollout.Revision(back.GetMetadata()))
	}
	for _, rs := range c.deploymentSets("web") {
		if rs.GetMetadata().GetUid() == first.GetMetadata().GetUid() && rs.GetSpec().GetReplicas() != 10 {
			t.Fatalf("the first set was not reused: %d replicas", rs.GetSpec().GetReplicas())
		}
	}
	if out := c.mustKpctl("rollout", "history", "deploy/web"); !strings.Contains(out, "\n2 ") || !strings.Contains(out, "\n3 ") {
		t.Fatalf("history:\n%s", out)
	}

	// Pause half-way: slow pods, pause once the new set has started.
	slow := c.deployment("web")
	slow.Spec.Template.Spec.Containers[0].Image = "web:3"
	slow.Spec.Template.Metadata.Annotations[annotationStartDelay] = "2s"
	if _, err := c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(slow)}); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Minute, func() string {
		for _, rs := range c.deploymentSets("web") {
			if rs.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage() == "web:3" && rs.GetSpec().GetReplicas() > 0 {
				return ""
			}
		}
		return "no web:3 set with replicas yet"
	})
	c.mustKpctl("rollout", "pause", "deploy/web")
	var frozen map[string]int32
	c.eventually(time.Minute, func() string {
		d := c.deployment("web")
		prog := apiutil.FindCondition(d.GetStatus().GetConditions(), kplanev1.DeploymentProgressing)
		if d.GetStatus().GetObservedGeneration() != d.GetMetadata().GetGeneration() || prog.GetReason() != kplanev1.ReasonDeploymentPaused {
			return "pause not observed"
		}
		frozen = map[string]int32{}
		var specSum int32
		for _, rs := range c.deploymentSets("web") {
			frozen[rs.GetMetadata().GetName()] = rs.GetSpec().GetReplicas()
			specSum += rs.GetSpec().GetReplicas()
		}
		// Every pod the sets ask for is available and the Deployment's
		// status says so: the controller has seen the state in which an
		// unpaused rollout would move on.
		if d.GetStatus().GetAvailableReplicas() != specSum {
			return fmt.Sprintf("%d of %d pods available", d.GetStatus().GetAvailableReplicas(), specSum)
		}
		return ""
	})
	for _, rs := range c.deploymentSets("web") {
		if frozen[rs.GetMetadata().GetName()] != rs.GetSpec().GetReplicas() {
			t.Fatalf("paused rollout moved: %s %d -> %d", rs.GetMetadata().GetName(), frozen[rs.GetMetadata().GetName()], rs.GetSpec().GetReplicas())
		}
	}
	if len(frozen) != 3 || frozen[first.GetMetadata().GetName()] == 0 || frozen[first.GetMetadata().GetName()] == 10 {
		t.Fatalf("pause was not mid-way: %v", frozen)
	}
	c.mustKpctl("rollout", "resume", "deploy/web")
	c.rolledOut("web", 2*time.Minute)
	requireNoViolations(t, "pause and resume", web)

	// Pods that never become ready: Progressing=False, ProgressDeadlineExceeded.
	dd := c.deployment("web")
	dd.Spec.Template.Metadata.Annotations[annotationStartDelay] = "1h"
	if _, err := c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(dd)}); err != nil {
		t.Fatal(err)
	}
	out, err := c.kpctl("rollout", "status", "deploy/web", "--timeout=1m")
	if err == nil || !strings.Contains(out, `deployment "web" exceeded its progress deadline`) {
		t.Fatalf("rollout status of a stuck rollout: %v\n%s", err, out)
	}
	prog := apiutil.FindCondition(c.deployment("web").GetStatus().GetConditions(), kplanev1.DeploymentProgressing)
	if prog.GetStatus() != kplanev1.ConditionFalse || prog.GetReason() != kplanev1.ReasonProgressDeadlineExceeded {
		t.Fatalf("Progressing: %v", prog)
	}
	requireNoViolations(t, "stuck rollout", web)
}

// TestDeploymentRecreateE2E: with Recreate, no pod of the new template
// exists while any pod of the old one does (terminating included).
func TestDeploymentRecreateE2E(t *testing.T) {
	c := deployCluster(t, 3)
	obs := c.observePods()
	db := obs.of("db")
	d := e2eDeployment("db", 4, "db:1", "200ms")
	d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: kplanev1.DeploymentStrategyRecreate}
	if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(d)}); err != nil {
		t.Fatal(err)
	}
	c.rolledOut("db", 2*time.Minute)
	db.SetBounds(4, -1, true, time.Now())
	c.mustKpctl("set", "image", "deploy/db", "app=db:2")
	c.rolledOut("db", 2*time.Minute)
	requireNoViolations(t, "recreate", db)
	events, _, _, _ := db.Report()
	if events < 16 { // 4 old pods going, 4 new coming: several events each
		t.Fatalf("only %d pod events observed", events)
	}
}
