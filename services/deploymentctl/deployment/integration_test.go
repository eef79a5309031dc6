package deployment

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/pkg/rollout"
	"github.com/kplane/kplane/pkg/strategy"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/replicactl/replicaset"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is an apiserver with replicactl and deploymentctl in-process, a
// fake kubelet that makes pods Ready after a delay (never for images
// starting "never"), and an Observer fed every pod event.
type cluster struct {
	api kplanev1.ResourcesClient
	obs *rollout.Observer
}

func startCluster(t *testing.T, readyAfter time.Duration) *cluster {
	t.Helper()
	srv := testserver.Start(t)
	api := srv.Client()
	controllertest.Run(t, srv.Addr(), replicaset.NewService(), controllertest.LeaderElection("rc")...)
	controllertest.Run(t, srv.Addr(), NewService(), controllertest.LeaderElection("dc")...)
	c := &cluster{api: api, obs: rollout.NewObserver(0)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	stream, err := api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			pod := ev.GetObject().GetPod()
			if pod == nil {
				continue
			}
			c.obs.Observe(ev.GetType(), pod, time.Now())
			if ev.GetType() != kplanev1.EventType_EVENT_TYPE_ADDED || strings.HasPrefix(pod.GetSpec().GetContainers()[0].GetImage(), "never") {
				continue
			}
			wg.Add(1)
			go func() { // the kubelet: Ready after a delay
				defer wg.Done()
				select {
				case <-ctx.Done():
					return
				case <-time.After(readyAfter):
				}
				p := proto.Clone(pod).(*kplanev1.Pod)
				p.Metadata.ResourceVersion = ""
				p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
					Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.Now()}}}
				_, _ = api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(p)})
			}()
		}
	}()
	return c
}

func newDeployment(name string, replicas int32, image string) *kplanev1.Deployment {
	l := map[string]string{"app": name}
	return &kplanev1.Deployment{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.DeploymentSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: image}}}},
		},
	}
}

func (c *cluster) create(t *testing.T, d *kplanev1.Deployment) {
	t.Helper()
	if _, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(d)}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) get(t *testing.T, name string) *kplanev1.Deployment {
	t.Helper()
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "Deployment", Namespace: "default", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetObject().GetDeployment()
}

// change applies mutate to the Deployment with CAS retries, as a user would.
func (c *cluster) change(t *testing.T, name string, mutate func(*kplanev1.Deployment)) {
	t.Helper()
	err := client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		d := c.get(t, name)
		mutate(d)
		_, err := c.api.Update(t.Context(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(d)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) sets(t *testing.T, name string) []*kplanev1.ReplicaSet {
	t.Helper()
	resp, err := c.api.List(t.Context(), &kplanev1.ListRequest{Kind: "ReplicaSet", Namespace: "default", LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []*kplanev1.ReplicaSet
	for _, o := range resp.GetItems() {
		out = append(out, o.GetReplicaSet())
	}
	return out
}

// complete waits until the rollout of the Deployment's current template
// is done: every replica updated and available, no other pods.
func (c *cluster) complete(t *testing.T, name string, d time.Duration) *kplanev1.Deployment {
	t.Helper()
	var last *kplanev1.Deployment
	testutil.Eventually(t, d, "rollout of "+name+" complete", func() bool {
		last = c.get(t, name)
		st, want := last.GetStatus(), last.GetSpec().GetReplicas()
		prog := apiutil.FindCondition(st.GetConditions(), kplanev1.DeploymentProgressing)
		return st.GetObservedGeneration() == last.GetMetadata().GetGeneration() && st.GetUpdatedReplicas() == want &&
			st.GetReplicas() == want && st.GetAvailableReplicas() == want && prog.GetReason() == kplanev1.ReasonNewReplicaSetAvailable
	})
	return last
}

func (c *cluster) noViolations(t *testing.T) {
	t.Helper()
	events, peak, low, v := c.obs.Report()
	if len(v) > 0 {
		t.Fatalf("bounds broken (%d of %d events checked): %s", len(v), events, strings.Join(v[:min(len(v), 5)], "; "))
	}
	t.Logf("%d pod events checked; peak %d pods, lowest availability %d", events, peak, low)
}

func setImage(img string) func(*kplanev1.Deployment) {
	return func(d *kplanev1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = img }
}

// TestRollingUpdateWithinBounds: 10 replicas, maxSurge 2, maxUnavailable
// 1, pods ready 200ms after creation; the observer checks both bounds at
// every pod event of the rollout; then a rollback restores the first
// template and its ReplicaSet with a new revision.
func TestRollingUpdateWithinBounds(t *testing.T) {
	c := startCluster(t, 200*time.Millisecond)
	d := newDeployment("web", 10, "web:1")
	d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDeployment{
		MaxSurge: kplanev1.IntOrStringFromInt32(2), MaxUnavailable: kplanev1.IntOrStringFromInt32(1)}}
	c.obs.SetBounds(12, -1, false, time.Now())
	c.create(t, d)
	first := c.complete(t, "web", time.Minute)
	if rollout.Revision(first.GetMetadata()) != 1 {
		t.Fatalf("revision %v", first.GetMetadata().GetAnnotations())
	}
	c.obs.SetBounds(12, 9, false, time.Now())
	c.change(t, "web", setImage("web:2"))
	second := c.complete(t, "web", time.Minute)
	c.noViolations(t)
	sets := c.sets(t, "web")
	if len(sets) != 2 || rollout.Revision(second.GetMetadata()) != 2 {
		t.Fatalf("%d sets, revision %d", len(sets), rollout.Revision(second.GetMetadata()))
	}
	var oldRS *kplanev1.ReplicaSet
	for _, rs := range sets {
		if rollout.Revision(rs.GetMetadata()) == 1 {
			oldRS = rs
		}
		if !strings.HasPrefix(rs.GetMetadata().GetName(), "web-") || rs.GetMetadata().GetLabels()[kplanev1.LabelPodTemplateHash] == "" {
			t.Fatalf("set %s labels %v", rs.GetMetadata().GetName(), rs.GetMetadata().GetLabels())
		}
	}
	if oldRS == nil || oldRS.GetSpec().GetReplicas() != 0 {
		t.Fatalf("old set: %v", oldRS)
	}

	// Rollback: the old template written back reuses the old set.
	c.change(t, "web", setImage("web:1"))
	third := c.complete(t, "web", time.Minute)
	c.noViolations(t)
	if rollout.Revision(third.GetMetadata()) != 3 {
		t.Fatalf("revision after rollback %d", rollout.Revision(third.GetMetadata()))
	}
	sets = c.sets(t, "web")
	if len(sets) != 2 {
		t.Fatalf("%d sets after rollback", len(sets))
	}
	for _, rs := range sets {
		if rs.GetMetadata().GetUid() == oldRS.GetMetadata().GetUid() {
			if rs.GetSpec().GetReplicas() != 10 || rollout.Revision(rs.GetMetadata()) != 3 ||
				rs.GetMetadata().GetAnnotations()[kplanev1.AnnotationDeploymentRevisionHistory] != "1" {
				t.Fatalf("rolled-back set: replicas %d annotations %v", rs.GetSpec().GetReplicas(), rs.GetMetadata().GetAnnotations())
			}
		}
	}
}

// TestRecreateHasNoOverlap: with Recreate no pod of the new template
// exists while one of the old is still present, terminating included.
func TestRecreateHasNoOverlap(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	d := newDeployment("db", 3, "db:1")
	d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "Recreate"}
	c.create(t, d)
	c.complete(t, "db", time.Minute)
	c.obs.SetBounds(3, -1, true, time.Now())
	c.change(t, "db", setImage("db:2"))
	c.complete(t, "db", time.Minute)
	c.noViolations(t)
}

// TestPauseProportionalScalingAndDeadline: a paused Deployment does not
// roll out a new template (no new set) but scales; resumed it rolls; a
// scale mid-rollout is shared across both sets; a template whose pods
// never become ready ends in ProgressDeadlineExceeded.
func TestPauseProportionalScalingAndDeadline(t *testing.T) {
	c := startCluster(t, 100*time.Millisecond)
	d := newDeployment("api", 4, "api:1")
	d.Spec.ProgressDeadlineSeconds = proto.Int32(3)
	c.create(t, d)
	c.complete(t, "api", time.Minute)

	c.change(t, "api", func(d *kplanev1.Deployment) { d.Spec.Paused = true; d.Spec.Template.Spec.Containers[0].Image = "api:2" })
	testutil.Eventually(t, 30*time.Second, "paused condition", func() bool {
		st := c.get(t, "api").GetStatus()
		return apiutil.FindCondition(st.GetConditions(), kplanev1.DeploymentProgressing).GetReason() == kplanev1.ReasonDeploymentPaused
	})
	if n := len(c.sets(t, "api")); n != 1 {
		t.Fatalf("paused deployment made %d sets", n)
	}
	c.change(t, "api", func(d *kplanev1.Deployment) { d.Spec.Replicas = proto.Int32(6) })
	testutil.Eventually(t, 30*time.Second, "paused deployment scaled", func() bool {
		sets := c.sets(t, "api")
		return len(sets) == 1 && sets[0].GetSpec().GetReplicas() == 6
	})
	c.change(t, "api", func(d *kplanev1.Deployment) { d.Spec.Paused = false })
	c.complete(t, "api", time.Minute)
	if n := len(c.sets(t, "api")); n != 2 {
		t.Fatalf("resumed deployment has %d sets", n)
	}

	// Never-ready pods: the rollout stalls with both sets active; a scale
	// then is proportional; the deadline passes.
	c.change(t, "api", setImage("never:1"))
	testutil.Eventually(t, 30*time.Second, "rollout stalled with two active sets", func() bool {
		active := 0
		for _, rs := range c.sets(t, "api") {
			if rs.GetSpec().GetReplicas() > 0 {
				active++
			}
		}
		return active == 2
	})
	c.change(t, "api", func(d *kplanev1.Deployment) { d.Spec.Replicas = proto.Int32(12) })
	testutil.Eventually(t, 30*time.Second, "proportional scale", func() bool {
		var total int32
		for _, rs := range c.sets(t, "api") {
			if rs.GetSpec().GetReplicas() > 0 && rs.GetMetadata().GetAnnotations()[kplanev1.AnnotationDesiredReplicas] != "12" {
				return false
			}
			total += rs.GetSpec().GetReplicas()
		}
		return total == 12+3 // replicas + 25% surge
	})
	testutil.Eventually(t, 30*time.Second, "progress deadline exceeded", func() bool {
		c := apiutil.FindCondition(c.get(t, "api").GetStatus().GetConditions(), kplanev1.DeploymentProgressing)
		return c.GetStatus() == kplanev1.ConditionFalse && c.GetReason() == kplanev1.ReasonProgressDeadlineExceeded
	})
	// Rolling back to a good template recovers.
	c.change(t, "api", setImage("api:2"))
	c.complete(t, "api", time.Minute)
}

// TestHashCollision: a foreign ReplicaSet already holds the name the
// template hashes to; the controller counts the collision in
// status.collisionCount, hashes anew and rolls out under the next name,
// leaving the foreign set alone.
func TestHashCollision(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	d := newDeployment("clash", 2, "clash:1")
	obj := kplanev1.MustWrap(proto.Clone(d))
	strategy.For("Deployment").Default(obj) // the template as the store keeps it
	taken := "clash-" + rollout.TemplateHash(obj.GetDeployment().GetSpec().GetTemplate(), nil)
	other := map[string]string{"app": "other"}
	foreign := &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: taken, Namespace: "default", Labels: other},
		Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(0), Selector: &kplanev1.LabelSelector{MatchLabels: other},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: other},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "other"}}}}},
	}
	if _, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(foreign)}); err != nil {
		t.Fatal(err)
	}
	c.create(t, d)
	done := c.complete(t, "clash", time.Minute)
	if done.GetStatus().GetCollisionCount() != 1 {
		t.Fatalf("collisionCount %d, want 1", done.GetStatus().GetCollisionCount())
	}
	sets := c.sets(t, "clash")
	if len(sets) != 1 || sets[0].GetMetadata().GetName() == taken || sets[0].GetSpec().GetReplicas() != 2 {
		t.Fatalf("sets: %v", sets)
	}
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: taken})
	if err != nil || len(resp.GetObject().Meta().GetOwnerReferences()) != 0 {
		t.Fatalf("foreign set changed: %v %v", resp.GetObject(), err)
	}
}

// TestAdoptsOrphanSet: an orphan ReplicaSet the selector matches and
// that runs the Deployment's template is adopted and used as the new set;
// no second set is made.
func TestAdoptsOrphanSet(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	d := newDeployment("legacy", 2, "legacy:1")
	orphan := &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: "legacy-by-hand", Namespace: "default", Labels: map[string]string{"app": "legacy"}},
		Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(2), Selector: proto.Clone(d.Spec.Selector).(*kplanev1.LabelSelector),
			Template: proto.Clone(d.Spec.Template).(*kplanev1.PodTemplateSpec)},
	}
	if _, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(orphan)}); err != nil {
		t.Fatal(err)
	}
	c.create(t, d)
	c.complete(t, "legacy", time.Minute)
	sets := c.sets(t, "legacy")
	if len(sets) != 1 || sets[0].GetMetadata().GetName() != "legacy-by-hand" {
		t.Fatalf("sets: %v", sets)
	}
	refs := sets[0].GetMetadata().GetOwnerReferences()
	if len(refs) != 1 || !refs[0].GetController() || refs[0].GetKind() != "Deployment" || refs[0].GetName() != "legacy" {
		t.Fatalf("owner references %v", refs)
	}
}

// slowReplicactl is the test playing replicactl, by hand and late, for
// TestScaleUpWaitsForReplicactl.
type slowReplicactl struct {
	t   *testing.T
	api kplanev1.ResourcesClient
}

// set waits for the Deployment's set running image at size replicas (any
// size when replicas < 0).
func (s slowReplicactl) set(image string, replicas int32) *kplanev1.ReplicaSet {
	s.t.Helper()
	var got *kplanev1.ReplicaSet
	testutil.Eventually(s.t, 30*time.Second, fmt.Sprintf("set of %s at %d", image, replicas), func() bool {
		resp, err := s.api.List(s.t.Context(), &kplanev1.ListRequest{Kind: "ReplicaSet", Namespace: "default"})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, o := range resp.GetItems() {
			rs := o.GetReplicaSet()
			if rs.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage() == image && (replicas < 0 || rs.GetSpec().GetReplicas() == replicas) {
				got = rs
				return true
			}
		}
		return false
	})
	return got
}

// pod creates a Ready pod of rs named name.
func (s slowReplicactl) pod(rs *kplanev1.ReplicaSet, name string) {
	s.t.Helper()
	m := rs.GetMetadata()
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: rs.GetSpec().GetTemplate().GetMetadata().GetLabels(),
			OwnerReferences: []*kplanev1.OwnerReference{{ApiVersion: kplanev1.APIVersion(kindReplicaSet), Kind: kindReplicaSet,
				Name: m.GetName(), Uid: m.GetUid(), Controller: true}}},
		Spec: rs.GetSpec().GetTemplate().GetSpec(),
	}
	resp, err := s.api.Create(s.t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(p)})
	if err != nil {
		s.t.Fatal(err)
	}
	p = resp.GetObject().GetPod()
	p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
		Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.Now()}}}
	if _, err := s.api.UpdateStatus(s.t.Context(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(p)}); err != nil {
		s.t.Fatal(err)
	}
}

// ack writes rs's status as replicactl does once it acted on rs's
// current size, with n pods, all available.
func (s slowReplicactl) ack(rs *kplanev1.ReplicaSet, n int32) {
	s.t.Helper()
	err := client.RetryOnConflict(s.t.Context(), client.DefaultRetry, func() error {
		resp, err := s.api.Get(s.t.Context(), &kplanev1.GetRequest{Kind: kindReplicaSet, Namespace: "default", Name: rs.GetMetadata().GetName()})
		if err != nil {
			return err
		}
		cur := resp.GetObject().GetReplicaSet()
		cur.Status = &kplanev1.ReplicaSetStatus{Replicas: n, FullyLabeledReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
			ObservedGeneration: cur.GetMetadata().GetGeneration()}
		_, err = s.api.UpdateStatus(s.t.Context(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(cur)})
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s slowReplicactl) deletePod(name string) {
	s.t.Helper()
	if _, err := s.api.Delete(s.t.Context(), &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: name}); err != nil {
		s.t.Fatal(err)
	}
}

// TestScaleUpWaitsForReplicactl: with no replicactl running, the test
// plays it, late. A rollout (2 replicas, maxSurge 1, maxUnavailable 0)
// lowers the old set to 1; one old pod goes. The new set is not raised
// while the old set's status says replicactl has not acted on the 1: a
// pod it was still creating for the old size may land (it does), and
// the two would pass the surge bound. Acknowledged, the old set's pods
// still fill the room; only once replicactl removes the extra pod is the
// new set raised. Between steps the test makes the controller's caches
// hold its writes and reconciles itself, so each check follows a
// reconcile that saw them.
func TestScaleUpWaitsForReplicactl(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	r := newController()
	ctl := controllertest.Run(t, srv.Addr(), r.service())
	ctl.Context(t)
	rc := slowReplicactl{t: t, api: api}

	d := newDeployment("slow", 2, "slow:1")
	d.Spec.Strategy = &kplanev1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDeployment{
		MaxSurge: kplanev1.IntOrStringFromInt32(1), MaxUnavailable: kplanev1.IntOrStringFromInt32(0)}}
	if _, err := api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(d)}); err != nil {
		t.Fatal(err)
	}
	old := rc.set("slow:1", 2)
	rc.pod(old, "a1")
	rc.pod(old, "a2")
	rc.ack(old, 2)
	err := client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		resp, err := api.Get(t.Context(), &kplanev1.GetRequest{Kind: kindDeployment, Namespace: "default", Name: "slow"})
		if err != nil {
			return err
		}
		cur := resp.GetObject().GetDeployment()
		cur.Spec.Template.Spec.Containers[0].Image = "slow:2"
		_, err = api.Update(t.Context(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(cur)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Acknowledged at once, as replicactl would: the new set may start at
	// 0 when the controller's cache had not yet seen the old set's ack.
	rc.ack(rc.set("slow:2", -1), 0)
	next := rc.set("slow:2", 1)
	rc.pod(next, "b1")
	rc.ack(next, 1)
	rc.set("slow:1", 1) // three available: one old pod may go

	// reconcile waits until the caches show cond, then reconciles until
	// a reconcile succeeds: the controller's own workers run too, and a
	// write of theirs in between fails ours with a conflict.
	reconcile := func(what string, cond func() bool) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, cond)
		testutil.Eventually(t, 10*time.Second, "a reconcile after "+what, func() bool {
			err := r.Reconcile(t.Context(), "default/slow")
			return err == nil || app.IsRequeue(err)
		})
	}
	newSize := func() int32 {
		t.Helper()
		resp, err := api.Get(t.Context(), &kplanev1.GetRequest{Kind: kindReplicaSet, Namespace: "default", Name: next.GetMetadata().GetName()})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetObject().GetReplicaSet().GetSpec().GetReplicas()
	}
	podGone := func(name string) func() bool {
		return func() bool { _, ok := r.pods.Store().GetByName("default", name); return !ok }
	}
	podSeen := func(name string) func() bool {
		return func() bool { _, ok := r.pods.Store().GetByName("default", name); return ok }
	}

	rc.deletePod("a1")
	reconcile("a1 gone from the cache", podGone("a1"))
	if n := newSize(); n != 1 {
		t.Fatalf("new set raised to %d while the old set's size was not acted on", n)
	}
	rc.pod(old, "a3") // the create for the old size, landing late
	rc.ack(old, 2)
	reconcile("a3 in the cache", podSeen("a3"))
	if n := newSize(); n != 1 {
		t.Fatalf("new set raised to %d while the old set still has 2 pods", n)
	}
	rc.deletePod("a3")
	reconcile("a3 gone from the cache", podGone("a3"))
	if n := newSize(); n != 2 {
		t.Fatalf("new set at %d; want 2 once the old set is down to its size", n)
	}
}

// TestRecountReadsTheAPIServer: recount counts each set's pods from a
// List (active ones, and every one still there), by controller uid:
// orphans and other owners' pods are not counted, nor are any for a set
// not yet created; a failed List is an error.
func TestRecountReadsTheAPIServer(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	c, err := client.Dial(t.Context(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	rc := slowReplicactl{t: t, api: api}
	d := newDeployment("count", 3, "count:1")
	sel, err := labels.FromLabelSelector(d.GetSpec().GetSelector())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string) *kplanev1.ReplicaSet {
		rs := &kplanev1.ReplicaSet{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: d.Spec.Selector.MatchLabels},
			Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(1), Selector: d.Spec.Selector, Template: d.Spec.Template}}
		resp, err := api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(rs)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetObject().GetReplicaSet()
	}
	a, b, other := mk("count-a"), mk("count-b"), mk("count-other")
	rc.pod(a, "a1")
	rc.pod(a, "a2")
	rc.pod(b, "b1")
	rc.pod(other, "x1")
	orphan := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "o1", Namespace: "default", Labels: d.Spec.Selector.MatchLabels}, Spec: d.Spec.Template.Spec}
	if _, err := api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(orphan)}); err != nil {
		t.Fatal(err)
	}
	resp, err := api.Get(t.Context(), &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	failed := resp.GetObject().GetPod()
	failed.Status.Phase = kplanev1.PodFailed
	if _, err := api.UpdateStatus(t.Context(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(failed)}); err != nil {
		t.Fatal(err)
	}

	r := &deploymentController{api: c}
	unwritten := Set{RS: &kplanev1.ReplicaSet{Metadata: &kplanev1.ObjectMeta{}}}
	sets := []Set{unwritten, {RS: a, Available: 7}, {RS: b, Pods: 9, AllPods: 9}}
	got, err := r.recount(t.Context(), d, sel, sets)()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][3]int32{{0, 0, 0}, {1, 2, 7}, {1, 1, 0}} {
		if g := [3]int32{got[i].Pods, got[i].AllPods, got[i].Available}; g != want {
			t.Errorf("set %d: pods, all pods, available = %v; want %v", i, g, want)
		}
	}
	if sets[2].Pods != 9 {
		t.Error("recount changed the sets it was given")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.recount(ctx, d, sel, sets)(); err == nil || !strings.Contains(err.Error(), "count the pods of deployment default/count") {
		t.Fatalf("recount on a cancelled context: %v", err)
	}
}
