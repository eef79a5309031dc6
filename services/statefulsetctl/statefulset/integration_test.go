package statefulset

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
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 30 * time.Second

// cluster is an apiserver with statefulsetctl in-process and a fake
// kubelet: it binds each new pod to node-1 and makes it Running and Ready
// after a delay (never for images starting "never"), and finishes a
// graceful deletion after a delay, as a node agent stopping containers.
// A watcher records every pod event and checks the StatefulSet rules as
// they happen.
type cluster struct {
	api kplanev1.ResourcesClient

	mu sync.Mutex
	// live is every pod object the watcher knows, by name.
	live map[string]*kplanev1.Pod
	// created and deleted are pod names in event order.
	created, deleted []string
	violations       []string
}

func startCluster(t *testing.T, readyAfter time.Duration) *cluster {
	t.Helper()
	srv := testserver.Start(t)
	api := srv.Client()
	controllertest.Run(t, srv.Addr(), NewService(), controllertest.LeaderElection("sts")...)
	c := &cluster{api: api, live: map[string]*kplanev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	stream, err := api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	later := func(d time.Duration, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
			case <-time.After(d):
				fn()
			}
		}()
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
			c.observe(ev.GetType(), pod)
			switch {
			case ev.GetType() == kplanev1.EventType_EVENT_TYPE_ADDED && pod.GetSpec().GetNodeName() == "":
				p := proto.Clone(pod).(*kplanev1.Pod)
				p.Spec.NodeName = "node-1"
				_, _ = api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(p)})
				if strings.HasPrefix(pod.GetSpec().GetContainers()[0].GetImage(), "never") {
					continue
				}
				later(readyAfter, func() {
					cur, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: pod.GetMetadata().GetName()})
					if err != nil || cur.GetObject().Meta().GetUid() != pod.GetMetadata().GetUid() {
						return
					}
					p := cur.GetObject().GetPod()
					p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
						Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.Now()}}}
					_, _ = api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(p)})
				})
			case ev.GetType() == kplanev1.EventType_EVENT_TYPE_MODIFIED && pod.GetMetadata().GetDeletionTimestamp() != nil:
				later(readyAfter, func() {
					zero := int64(0)
					_, _ = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: pod.GetMetadata().GetName(),
						GracePeriodSeconds: &zero, Preconditions: &kplanev1.Preconditions{Uid: pod.GetMetadata().GetUid()}})
				})
			}
		}
	}()
	return c
}

// observe checks, at every pod event: two pod objects never share an
// identity (the pod-name label), and under OrderedReady (every set in
// these tests named "ord*") pod k is created only while k-1 exists and
// is Running and Ready.
func (c *cluster) observe(typ kplanev1.EventType, pod *kplanev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := pod.GetMetadata().GetName()
	switch typ {
	case kplanev1.EventType_EVENT_TYPE_ADDED:
		if old, ok := c.live[name]; ok && old.GetMetadata().GetUid() != pod.GetMetadata().GetUid() {
			c.violations = append(c.violations, fmt.Sprintf("%s created while the previous %s exists", name, name))
		}
		id := pod.GetMetadata().GetLabels()[kplanev1.LabelStatefulSetPodName]
		for n, p := range c.live {
			if n != name && p.GetMetadata().GetLabels()[kplanev1.LabelStatefulSetPodName] == id && id != "" {
				c.violations = append(c.violations, fmt.Sprintf("%s and %s share identity %s", n, name, id))
			}
		}
		if set, i := identity(name); strings.HasPrefix(set, "ord") && i > 0 {
			prev := c.live[fmt.Sprintf("%s-%d", set, i-1)]
			if prev == nil || !apiutil.IsPodReady(prev) || prev.GetMetadata().GetDeletionTimestamp() != nil {
				c.violations = append(c.violations, fmt.Sprintf("%s created before %s-%d was Ready", name, set, i-1))
			}
		}
		c.live[name] = pod
		c.created = append(c.created, name)
	case kplanev1.EventType_EVENT_TYPE_MODIFIED:
		c.live[name] = pod
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		delete(c.live, name)
		c.deleted = append(c.deleted, name)
	}
}

func identity(name string) (string, int) {
	i := strings.LastIndexByte(name, '-')
	var n int
	if _, err := fmt.Sscanf(name[i+1:], "%d", &n); err != nil {
		return "", -1
	}
	return name[:i], n
}

func (c *cluster) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.violations {
		t.Error(v)
	}
}

func (c *cluster) events() (created, deleted []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.created...), append([]string(nil), c.deleted...)
}

func newSet(name string, replicas int32, image string) *kplanev1.StatefulSet {
	l := map[string]string{"app": name}
	return &kplanev1.StatefulSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.StatefulSetSpec{
			Replicas: proto.Int32(replicas), ServiceName: name,
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: image,
					VolumeMounts: []*kplanev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
			VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Metadata: &kplanev1.ObjectMeta{Name: "data"},
				Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"},
					Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}}}},
		},
	}
}

func (c *cluster) create(t *testing.T, ss *kplanev1.StatefulSet) {
	t.Helper()
	if _, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(ss)}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) get(t *testing.T, name string) *kplanev1.StatefulSet {
	t.Helper()
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "StatefulSet", Namespace: "default", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetObject().GetStatefulSet()
}

func (c *cluster) change(t *testing.T, name string, mutate func(*kplanev1.StatefulSet)) {
	t.Helper()
	err := client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		ss := c.get(t, name)
		mutate(ss)
		_, err := c.api.Update(t.Context(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(ss)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pods lists the set's pods by name.
func (c *cluster) pods(t *testing.T, set string) map[string]*kplanev1.Pod {
	t.Helper()
	resp, err := c.api.List(t.Context(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=" + set})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*kplanev1.Pod{}
	for _, o := range resp.GetItems() {
		out[o.Meta().GetName()] = o.GetPod()
	}
	return out
}

func (c *cluster) claim(t *testing.T, name string) *kplanev1.PersistentVolumeClaim {
	t.Helper()
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "PersistentVolumeClaim", Namespace: "default", Name: name})
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetObject().GetPersistentVolumeClaim()
}

// settled: every ordinal below replicas has a Ready pod at the update
// revision, nothing else exists, and the status says so.
func (c *cluster) settled(t *testing.T, name string) func() bool {
	return func() bool {
		ss := c.get(t, name)
		st := ss.GetStatus()
		n := ss.GetSpec().GetReplicas()
		pods := c.pods(t, name)
		if int32(len(pods)) != n || st.GetReadyReplicas() != n || st.GetUpdatedReplicas() != n || st.GetCurrentRevision() != st.GetUpdateRevision() ||
			st.GetObservedGeneration() != ss.GetMetadata().GetGeneration() {
			return false
		}
		for i := range n {
			p := pods[PodName(name, i)]
			if p == nil || !apiutil.IsPodReady(p) || Revision(p) != st.GetUpdateRevision() {
				return false
			}
		}
		return true
	}
}

// TestOrderedCreationIdentityAndClaims: OrderedReady creates 0, 1, 2
// each after its predecessor is Ready (checked at every event), every
// pod has its identity and its own claim, created before it; the
// revision is recorded.
func TestOrderedCreationIdentityAndClaims(t *testing.T) {
	c := startCluster(t, 100*time.Millisecond)
	c.create(t, newSet("ord", 3, "db:1"))
	testutil.Eventually(t, wait, "3 ready pods", c.settled(t, "ord"))
	c.check(t)
	created, _ := c.events()
	if strings.Join(created, ",") != "ord-0,ord-1,ord-2" {
		t.Fatalf("creation order %v", created)
	}
	ss := c.get(t, "ord")
	for i := range int32(3) {
		p := c.pods(t, "ord")[PodName("ord", i)]
		if p.Spec.Hostname != PodName("ord", i) || p.Spec.Subdomain != "ord" || p.Metadata.Labels[kplanev1.LabelPodIndex] != fmt.Sprint(i) {
			t.Errorf("identity of %s: %v", p.Metadata.Name, p)
		}
		cl := c.claim(t, ClaimName("data", "ord", i))
		if cl == nil {
			t.Fatalf("no claim for ordinal %d", i)
		}
		if !cl.Metadata.CreationTimestamp.AsTime().Add(-time.Second).Before(p.Metadata.CreationTimestamp.AsTime()) ||
			p.Spec.Volumes[0].GetPersistentVolumeClaim().GetClaimName() != cl.Metadata.Name {
			t.Errorf("claim %s: %v; pod volumes %v", cl.Metadata.Name, cl.Metadata, p.Spec.Volumes)
		}
	}
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "ControllerRevision", Namespace: "default", Name: ss.Status.UpdateRevision})
	if err != nil || resp.GetObject().GetControllerRevision().GetRevision() != 1 {
		t.Fatalf("revision %s: %v, %v", ss.Status.UpdateRevision, resp, err)
	}
}

// TestDeletedPodReturnsWithItsClaim: a deleted pod comes back under its
// name, only after the old one is gone, with the very same claim.
func TestDeletedPodReturnsWithItsClaim(t *testing.T) {
	c := startCluster(t, 100*time.Millisecond)
	c.create(t, newSet("ord", 3, "db:1"))
	testutil.Eventually(t, wait, "3 ready pods", c.settled(t, "ord"))
	claimUID := c.claim(t, "data-ord-1").Metadata.Uid
	old := c.pods(t, "ord")["ord-1"]
	if _, err := c.api.Delete(t.Context(), &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "ord-1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "ord-1 back and ready", func() bool {
		p := c.pods(t, "ord")["ord-1"]
		return p != nil && p.Metadata.Uid != old.Metadata.Uid && apiutil.IsPodReady(p)
	})
	testutil.Eventually(t, wait, "settled", c.settled(t, "ord"))
	c.check(t)
	if cl := c.claim(t, "data-ord-1"); cl == nil || cl.Metadata.Uid != claimUID {
		t.Fatalf("claim replaced: %v (was uid %s)", cl, claimUID)
	}
}

// TestScaleDownHighestFirstAndRetention: 4 → 1 deletes ord-3, ord-2,
// ord-1 in that order, one at a time; claims are kept (whenScaled
// Retain) and reused on scale up; with whenScaled Delete they go.
func TestScaleDownHighestFirstAndRetention(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	c.create(t, newSet("ord", 4, "db:1"))
	testutil.Eventually(t, wait, "4 ready pods", c.settled(t, "ord"))
	uid3 := c.claim(t, "data-ord-3").Metadata.Uid
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) { ss.Spec.Replicas = proto.Int32(1) })
	testutil.Eventually(t, wait, "1 pod", c.settled(t, "ord"))
	_, deleted := c.events()
	if strings.Join(deleted, ",") != "ord-3,ord-2,ord-1" {
		t.Fatalf("deletion order %v", deleted)
	}
	if cl := c.claim(t, "data-ord-3"); cl == nil || cl.Metadata.Uid != uid3 {
		t.Fatal("whenScaled Retain lost the claim")
	}
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) { ss.Spec.Replicas = proto.Int32(4) })
	testutil.Eventually(t, wait, "4 pods again", c.settled(t, "ord"))
	if cl := c.claim(t, "data-ord-3"); cl == nil || cl.Metadata.Uid != uid3 {
		t.Fatal("scale up did not reuse the claim")
	}
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) {
		ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = "Delete"
		ss.Spec.Replicas = proto.Int32(2)
	})
	testutil.Eventually(t, wait, "claims of 2 and 3 deleted", func() bool {
		return c.claim(t, "data-ord-3") == nil && c.claim(t, "data-ord-2") == nil && c.claim(t, "data-ord-1") != nil
	})
	c.check(t)
}

// TestPartitionedRollingUpdate: with partition 2 of 4, only ord-3 then
// ord-2 move to the new revision (highest first, one at a time); ord-0
// and ord-1 stay, and a deleted ord-1 comes back at the old revision.
// Partition 0 finishes the update and makes it current; rolling back the
// template reuses the first revision, renumbered.
func TestPartitionedRollingUpdate(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	c.create(t, newSet("ord", 4, "db:1"))
	testutil.Eventually(t, wait, "4 ready pods", c.settled(t, "ord"))
	rev1 := c.get(t, "ord").Status.UpdateRevision
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) {
		ss.Spec.UpdateStrategy.RollingUpdate.Partition = proto.Int32(2)
		ss.Spec.Template.Spec.Containers[0].Image = "db:2"
	})
	var rev2 string
	testutil.Eventually(t, wait, "ord-2 and ord-3 updated", func() bool {
		st := c.get(t, "ord").Status
		rev2 = st.GetUpdateRevision()
		pods := c.pods(t, "ord")
		return rev2 != rev1 && st.GetUpdatedReplicas() == 2 && st.GetReadyReplicas() == 4 && st.GetCurrentRevision() == rev1 &&
			Revision(pods["ord-3"]) == rev2 && Revision(pods["ord-2"]) == rev2
	})
	pods := c.pods(t, "ord")
	if Revision(pods["ord-0"]) != rev1 || Revision(pods["ord-1"]) != rev1 || pods["ord-0"].Spec.Containers[0].Image != "db:1" {
		t.Fatalf("below the partition changed: %v %v", pods["ord-0"].Metadata.Labels, pods["ord-1"].Metadata.Labels)
	}
	_, deleted := c.events()
	if strings.Join(deleted, ",") != "ord-3,ord-2" {
		t.Fatalf("update order %v", deleted)
	}
	if _, err := c.api.Delete(t.Context(), &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "ord-1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "ord-1 back", func() bool {
		_, deleted := c.events()
		p := c.pods(t, "ord")["ord-1"]
		return len(deleted) == 3 && p != nil && apiutil.IsPodReady(p)
	})
	if p := c.pods(t, "ord")["ord-1"]; Revision(p) != rev1 || p.Spec.Containers[0].Image != "db:1" {
		t.Fatalf("ord-1 recreated at %s (%s), want the current revision", Revision(p), p.Spec.Containers[0].Image)
	}
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) { ss.Spec.UpdateStrategy.RollingUpdate.Partition = proto.Int32(0) })
	testutil.Eventually(t, wait, "update complete", c.settled(t, "ord"))
	if st := c.get(t, "ord").Status; st.CurrentRevision != rev2 {
		t.Fatalf("current revision %s, want %s", st.CurrentRevision, rev2)
	}
	// Roll back: the template of revision 1 again.
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) { ss.Spec.Template.Spec.Containers[0].Image = "db:1" })
	testutil.Eventually(t, wait, "rolled back", func() bool {
		return c.settled(t, "ord")() && c.get(t, "ord").Status.UpdateRevision == rev1
	})
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "ControllerRevision", Namespace: "default", Name: rev1})
	if err != nil || resp.GetObject().GetControllerRevision().GetRevision() != 3 {
		t.Fatalf("rollback renumbers the reused revision to 3: %v, %v", resp, err)
	}
	c.check(t)
}

// TestParallel: Parallel creates every pod at once without waiting for
// readiness (the images never become Ready here) and scales down at once.
func TestParallel(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	ss := newSet("par", 3, "never:1")
	ss.Spec.PodManagementPolicy = kplanev1.PodManagementParallel
	c.create(t, ss)
	testutil.Eventually(t, wait, "3 pods without readiness", func() bool {
		return len(c.pods(t, "par")) == 3 && c.get(t, "par").GetStatus().GetReplicas() == 3
	})
	c.change(t, "par", func(ss *kplanev1.StatefulSet) { ss.Spec.Replicas = proto.Int32(0) })
	testutil.Eventually(t, wait, "all gone", func() bool { return len(c.pods(t, "par")) == 0 })
	c.check(t)
}

// TestAdoptsOrphanAndReleases: an orphan named for an ordinal and
// selected is adopted instead of duplicated; a pod whose labels stop
// matching is released and replaced.
func TestAdoptsOrphanAndReleases(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	orphan := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "ord-0", Namespace: "default", Labels: map[string]string{"app": "ord"}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "db:0"}}}}
	resp, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(orphan)})
	if err != nil {
		t.Fatal(err)
	}
	uid := resp.GetObject().Meta().GetUid()
	ss := newSet("ord", 1, "db:1")
	ss.Spec.UpdateStrategy = &kplanev1.StatefulSetUpdateStrategy{Type: kplanev1.UpdateStrategyOnDelete}
	c.create(t, ss)
	testutil.Eventually(t, wait, "orphan adopted and given its identity labels", func() bool {
		p := c.pods(t, "ord")["ord-0"]
		return p != nil && p.Metadata.Uid == uid && len(p.Metadata.OwnerReferences) == 1 && c.get(t, "ord").GetStatus().GetReplicas() == 1 &&
			p.Metadata.Labels[kplanev1.LabelStatefulSetPodName] == "ord-0" && p.Metadata.Labels[kplanev1.LabelPodIndex] == "0"
	})
	err = client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		g, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "ord-0"})
		if err != nil {
			return err
		}
		g.GetObject().Meta().Labels["app"] = "elsewhere"
		_, err = c.api.Update(t.Context(), &kplanev1.UpdateRequest{Object: g.GetObject()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "released", func() bool {
		g, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "ord-0"})
		return err == nil && len(g.GetObject().Meta().GetOwnerReferences()) == 0
	})
}

// TestWhenDeletedRetention: with whenDeleted Delete every claim carries a
// (non-controller) owner reference to the set, for the garbage collector;
// switching to Retain removes it again.
func TestWhenDeletedRetention(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	ss := newSet("ord", 2, "db:1")
	ss.Spec.PersistentVolumeClaimRetentionPolicy = &kplanev1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Delete", WhenScaled: "Retain"}
	c.create(t, ss)
	testutil.Eventually(t, wait, "2 pods", c.settled(t, "ord"))
	uid := c.get(t, "ord").Metadata.Uid
	owned := func(name string) bool {
		cl := c.claim(t, name)
		for _, r := range cl.GetMetadata().GetOwnerReferences() {
			if r.GetUid() == uid && r.GetKind() == "StatefulSet" && !r.GetController() {
				return true
			}
		}
		return false
	}
	if !owned("data-ord-0") || !owned("data-ord-1") {
		t.Fatal("whenDeleted Delete: claims without the set as owner")
	}
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) { ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = "Retain" })
	testutil.Eventually(t, wait, "owner references removed", func() bool { return !owned("data-ord-0") && !owned("data-ord-1") })
	c.change(t, "ord", func(ss *kplanev1.StatefulSet) { ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = "Delete" })
	testutil.Eventually(t, wait, "owner references back", func() bool { return owned("data-ord-0") && owned("data-ord-1") })
}
