package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/stack"
)

func init() {
	binaries["statefulsetctl"] = "services/statefulsetctl"
	binaries["gcctl"] = "services/gcctl"
}

// startStatefulStack runs the apiserver, scheduler, ipamctl, pvctl,
// gcctl, statefulsetctl and two exec node agents as processes, sharing
// pvctl's storage root.
func startStatefulStack(t *testing.T) *epCluster {
	t.Helper()
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 150+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 2, NoProxy: true,
		Controllers: []string{"scheduler", "ipamctl", "pvctl", "gcctl", "statefulsetctl"},
		Args: map[string][]string{
			"ipamctl":   {"--cluster-cidr", cluster.String()},
			"nodeagent": {"--housekeeping-interval", "500ms"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			t.Errorf("stop stack: %v", err)
		}
		if t.Failed() {
			t.Logf("logs in %s", s.Options().LogDir)
		}
	})
	return &epCluster{t: t, s: s, api: dialStack(context.Background(), t, s)}
}

// stsWatch records the pod events of the stack's namespace and checks,
// at each, the StatefulSet rules: no two pod objects share an identity,
// and under OrderedReady (sets named "ord*") pod k is created only while
// k-1 exists and is Ready.
type stsWatch struct {
	mu         sync.Mutex
	live       map[string]*kplanev1.Pod
	created    []string
	deleted    []string
	violations []string
}

func watchStatefulPods(c *epCluster) *stsWatch {
	c.t.Helper()
	w := &stsWatch{live: map[string]*kplanev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			if p := ev.GetObject().GetPod(); p != nil {
				w.observe(ev.GetType(), p)
			}
		}
	}()
	c.t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *stsWatch) observe(typ kplanev1.EventType, pod *kplanev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	name := pod.GetMetadata().GetName()
	switch typ {
	case kplanev1.EventType_EVENT_TYPE_ADDED:
		id := pod.GetMetadata().GetLabels()[kplanev1.LabelStatefulSetPodName]
		for n, p := range w.live {
			if id != "" && p.GetMetadata().GetLabels()[kplanev1.LabelStatefulSetPodName] == id {
				w.violations = append(w.violations, fmt.Sprintf("%s created while %s holds identity %s", name, n, id))
			}
		}
		if i := strings.LastIndexByte(name, '-'); strings.HasPrefix(name, "ord") && i > 0 {
			var k int
			if _, err := fmt.Sscanf(name[i+1:], "%d", &k); err == nil && k > 0 {
				prev := w.live[fmt.Sprintf("%s-%d", name[:i], k-1)]
				if prev == nil || !apiutil.IsPodReady(prev) || prev.GetMetadata().GetDeletionTimestamp() != nil {
					w.violations = append(w.violations, fmt.Sprintf("%s created before %s-%d was Ready", name, name[:i], k-1))
				}
			}
		}
		w.live[name] = pod
		w.created = append(w.created, name)
	case kplanev1.EventType_EVENT_TYPE_MODIFIED:
		w.live[name] = pod
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		delete(w.live, name)
		w.deleted = append(w.deleted, name)
	}
}

func (w *stsWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
}

func (w *stsWatch) events() (created, deleted []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.created...), append([]string(nil), w.deleted...)
}

// e2eStatefulSet runs busybox pods that, on first start of their identity,
// write "<pod name> <time> <pid>" to their claim's id file, and then sleep.
func e2eStatefulSet(name string, replicas int32, class string) *kplanev1.StatefulSet {
	l := map[string]string{"app": name}
	return &kplanev1.StatefulSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.StatefulSetSpec{
			Replicas: proto.Int32(replicas), ServiceName: name,
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l}, Spec: &kplanev1.PodSpec{
				TerminationGracePeriodSeconds: proto.Int64(1),
				Containers: []*kplanev1.Container{{Name: "db", Image: "busybox", Command: []string{"sh", "-c",
					`test -f "$KPLANE_VOLUME_DATA/id" || echo "$KPLANE_POD_NAME $(date +%s) $$" > "$KPLANE_VOLUME_DATA/id"; exec sleep 100000`},
					VolumeMounts: []*kplanev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
			VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Metadata: &kplanev1.ObjectMeta{Name: "data"},
				Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{kplanev1.ReadWriteOnce}, StorageClassName: &class,
					Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "16Mi"}}}}},
		},
	}
}

func (c *epCluster) statefulSet(name string) *kplanev1.StatefulSet {
	o, err := c.get("StatefulSet", name)
	if err != nil {
		return nil
	}
	return o.GetStatefulSet()
}

// stsSettled: replicas Ready pods at the update revision, and the status
// says so.
func (c *epCluster) stsSettled(name string) func() string {
	return func() string {
		ss := c.statefulSet(name)
		st := ss.GetStatus()
		n := ss.GetSpec().GetReplicas()
		if st.GetReadyReplicas() != n || st.GetUpdatedReplicas() != n || st.GetReplicas() != n || st.GetCurrentRevision() != st.GetUpdateRevision() ||
			st.GetObservedGeneration() != ss.GetMetadata().GetGeneration() {
			return fmt.Sprintf("status %v", st)
		}
		for i := range n {
			p := c.pod(fmt.Sprintf("%s-%d", name, i))
			if p == nil || !apiutil.IsPodReady(p) || p.GetMetadata().GetLabels()[kplanev1.LabelControllerRevisionHash] != st.GetUpdateRevision() {
				return fmt.Sprintf("pod %s-%d: %v", name, i, p.GetStatus())
			}
		}
		return ""
	}
}

// idFile reads what ordinal's pod wrote into its claim's volume.
func (c *epCluster) idFile(claim string) string {
	c.t.Helper()
	dir := c.boundVolume(claim).GetSpec().GetHostPath().GetPath()
	b, err := os.ReadFile(filepath.Join(dir, "id"))
	if err != nil {
		c.t.Fatalf("read %s's data: %v", claim, err)
	}
	return strings.TrimSpace(string(b))
}

func (c *epCluster) changeStatefulSet(name string, mutate func(*kplanev1.StatefulSet)) {
	c.t.Helper()
	c.update("StatefulSet", name, func(o *kplanev1.Object) { mutate(o.GetStatefulSet()) })
}

// TestStatefulSet runs one StatefulSet through its life with real
// processes: ordered creation (checked at every pod event), a deleted pod
// back under its name with the same claim and the data it wrote, scale
// down highest ordinal first, a partitioned rolling update, and a
// Parallel set created without waiting for readiness.
func TestStatefulSet(t *testing.T) {
	c := startStatefulStack(t)
	w := watchStatefulPods(c)
	c.create(storageClass("local", kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate))
	c.create(kplanev1.MustWrap(e2eStatefulSet("ord", 3, "local")))
	c.eventually("3 ordered pods Ready", c.stsSettled("ord"))
	created, _ := w.events()
	if strings.Join(created, ",") != "ord-0,ord-1,ord-2" {
		t.Fatalf("creation order %v", created)
	}

	t.Run("deleted pod returns with its claim and data", func(t *testing.T) {
		c.t = t
		first := c.idFile("data-ord-1")
		old := c.pod("ord-1")
		if !strings.HasPrefix(first, "ord-1 ") {
			t.Fatalf("ord-1 wrote %q, want its name first", first)
		}
		claim, _ := c.get("PersistentVolumeClaim", "data-ord-1")
		c.deleteObj("Pod", "default", "ord-1")
		c.eventually("ord-1 back", func() string {
			p := c.pod("ord-1")
			if p == nil || p.GetMetadata().GetUid() == old.GetMetadata().GetUid() || !apiutil.IsPodReady(p) {
				return fmt.Sprintf("%v", p.GetStatus())
			}
			return ""
		})
		again, _ := c.get("PersistentVolumeClaim", "data-ord-1")
		if again.Meta().GetUid() != claim.Meta().GetUid() {
			t.Fatal("the claim was replaced")
		}
		if got := c.idFile("data-ord-1"); got != first {
			t.Fatalf("data after recreation %q, want %q", got, first)
		}
	})

	t.Run("scale down deletes the highest ordinals first", func(t *testing.T) {
		c.t = t
		_, before := w.events()
		c.changeStatefulSet("ord", func(ss *kplanev1.StatefulSet) { ss.Spec.Replicas = proto.Int32(1) })
		c.eventually("1 pod", c.stsSettled("ord"))
		_, after := w.events()
		if got := strings.Join(after[len(before):], ","); got != "ord-2,ord-1" {
			t.Fatalf("deletion order %s", got)
		}
		c.changeStatefulSet("ord", func(ss *kplanev1.StatefulSet) { ss.Spec.Replicas = proto.Int32(3) })
		c.eventually("3 pods again", c.stsSettled("ord"))
		if got := c.idFile("data-ord-2"); !strings.HasPrefix(got, "ord-2 ") {
			t.Fatalf("ord-2's claim (retained) holds %q", got)
		}
	})

	t.Run("partitioned rolling update", func(t *testing.T) {
		c.t = t
		rev1 := c.statefulSet("ord").GetStatus().GetUpdateRevision()
		c.changeStatefulSet("ord", func(ss *kplanev1.StatefulSet) {
			ss.Spec.UpdateStrategy.RollingUpdate.Partition = proto.Int32(2)
			ss.Spec.Template.Metadata.Annotations = map[string]string{"version": "2"}
		})
		c.eventually("ord-2 updated, 0 and 1 not", func() string {
			st := c.statefulSet("ord").GetStatus()
			p2 := c.pod("ord-2")
			if st.GetUpdateRevision() == rev1 || st.GetUpdatedReplicas() != 1 || st.GetReadyReplicas() != 3 || p2 == nil ||
				p2.GetMetadata().GetLabels()[kplanev1.LabelControllerRevisionHash] != st.GetUpdateRevision() {
				return fmt.Sprintf("status %v", st)
			}
			return ""
		})
		for _, n := range []string{"ord-0", "ord-1"} {
			if got := c.pod(n).GetMetadata().GetLabels()[kplanev1.LabelControllerRevisionHash]; got != rev1 {
				t.Fatalf("%s at %s, below the partition", n, got)
			}
		}
		c.changeStatefulSet("ord", func(ss *kplanev1.StatefulSet) { ss.Spec.UpdateStrategy.RollingUpdate.Partition = proto.Int32(0) })
		c.eventually("update complete", c.stsSettled("ord"))
	})

	t.Run("Parallel", func(t *testing.T) {
		c.t = t
		ss := e2eStatefulSet("par", 3, "local")
		ss.Spec.PodManagementPolicy = kplanev1.PodManagementParallel
		// Never Ready: nothing listens on the probed port.
		ss.Spec.Template.Spec.Containers[0].ReadinessProbe = &kplanev1.Probe{PeriodSeconds: 1,
			TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(9)}}
		c.create(kplanev1.MustWrap(ss))
		c.eventually("3 pods without readiness", func() string {
			st := c.statefulSet("par").GetStatus()
			if st.GetReplicas() != 3 || st.GetReadyReplicas() != 0 {
				return fmt.Sprintf("status %v", st)
			}
			return ""
		})
	})
	w.check(t)
}
