package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/stack"
)

func init() {
	binaries["pvctl"] = "services/pvctl"
	binaries["scheduler"] = "services/scheduler"
	binaries["nodeagent"] = "services/nodeagent"
	binaries["ipamctl"] = "services/ipamctl"
}

// startStorageStack runs the apiserver, scheduler, ipamctl, pvctl and two
// exec node agents as processes; pvctl's storage root is shared by both
// nodes, as the compose volume is.
func startStorageStack(t *testing.T) (*epCluster, string) {
	t.Helper()
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 100+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 2, NoProxy: true,
		Controllers: []string{"scheduler", "ipamctl", "pvctl"},
		Args: map[string][]string{
			"ipamctl":   {"--cluster-cidr", cluster.String()},
			"nodeagent": {"--housekeeping-interval", "500ms"},
			"pvctl":     {"--log-level", "debug"},
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
	return &epCluster{t: t, s: s, api: dialStack(context.Background(), t, s)}, s.Options().StorageRoot()
}

func storageClass(name, policy, mode string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.StorageClass{Metadata: &kplanev1.ObjectMeta{Name: name},
		Provisioner: kplanev1.ProvisionerLocalPath, ReclaimPolicy: policy, VolumeBindingMode: mode})
}

func claimObj(name, class string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
		Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{kplanev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "64Mi"}}},
	})
}

// claimPod runs script in sh with claim mounted at /data, on node (by
// nodeSelector, so the scheduler places it) or anywhere when node is "".
func claimPod(name, claim, node, script string) *kplanev1.Object {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
		Spec: &kplanev1.PodSpec{
			RestartPolicy:                 kplanev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: proto.Int64(1),
			Containers: []*kplanev1.Container{{Name: "main", Image: "busybox", Command: []string{"sh", "-c", script},
				VolumeMounts: []*kplanev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []*kplanev1.Volume{{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}},
		},
	}
	if node != "" {
		p.Spec.NodeSelector = map[string]string{kplanev1.LabelHostname: node}
	}
	return kplanev1.MustWrap(p)
}

func (c *epCluster) pod(name string) *kplanev1.Pod {
	o, err := c.get("Pod", name)
	if err != nil {
		return nil
	}
	return o.GetPod()
}

func (c *epCluster) waitPhase(name, phase string) *kplanev1.Pod {
	c.t.Helper()
	var p *kplanev1.Pod
	c.eventually("pod "+name+" "+phase, func() string {
		p = c.pod(name)
		if got := p.GetStatus().GetPhase(); got != phase {
			return fmt.Sprintf("phase %q, status %v", got, p.GetStatus())
		}
		return ""
	})
	return p
}

func (c *epCluster) deleteObj(kind, ns, name string) {
	c.t.Helper()
	ctx, opt := call(c.t)
	if _, err := c.api.Delete(ctx, &kplanev1.DeleteRequest{Kind: kind, Namespace: ns, Name: name}, opt); err != nil {
		c.t.Fatalf("delete %s %s: %v", kind, name, err)
	}
}

func (c *epCluster) gone(kind, ns, name string) bool {
	ctx, opt := call(c.t)
	_, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: kind, Namespace: ns, Name: name}, opt)
	return err != nil && strings.Contains(err.Error(), "NotFound")
}

func (c *epCluster) boundVolume(claim string) *kplanev1.PersistentVolume {
	c.t.Helper()
	var pv *kplanev1.PersistentVolume
	c.eventually("claim "+claim+" bound", func() string {
		o, err := c.get("PersistentVolumeClaim", claim)
		if err != nil {
			return err.Error()
		}
		if o.GetPersistentVolumeClaim().GetStatus().GetPhase() != kplanev1.ClaimBound {
			return "claim " + o.GetPersistentVolumeClaim().GetStatus().GetPhase()
		}
		ctx, opt := call(c.t)
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "PersistentVolume", Name: o.GetPersistentVolumeClaim().GetSpec().GetVolumeName()}, opt)
		if err != nil {
			return err.Error()
		}
		pv = resp.GetObject().GetPersistentVolume()
		return ""
	})
	return pv
}

func TestPersistentVolumes(t *testing.T) {
	c, root := startStorageStack(t)
	c.create(storageClass("local", kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate))
	c.create(storageClass("keep", kplanev1.ReclaimRetain, kplanev1.VolumeBindingImmediate))

	t.Run("data outlives its pod and follows the claim to another node", func(t *testing.T) {
		c.t = t
		c.create(claimObj("data", "local"))
		pv := c.boundVolume("data")
		dir := pv.GetSpec().GetHostPath().GetPath()
		if filepath.Dir(dir) != root {
			t.Fatalf("volume path %s is not under the storage root %s", dir, root)
		}
		c.create(claimPod("writer", "data", "node-1", `echo "written on $KPLANE_POD_NAME" > "$KPLANE_POD_ROOT/data/msg"`))
		if p := c.waitPhase("writer", kplanev1.PodSucceeded); p.GetSpec().GetNodeName() != "node-1" {
			t.Fatalf("writer ran on %s", p.GetSpec().GetNodeName())
		}
		c.deleteObj("Pod", "default", "writer")
		c.eventually("writer gone", func() string {
			if !c.gone("Pod", "default", "writer") {
				return "still there"
			}
			return ""
		})
		c.create(claimPod("reader", "data", "node-2", `test "$(cat "$KPLANE_VOLUME_DATA/msg")" = "written on writer"`))
		if p := c.waitPhase("reader", kplanev1.PodSucceeded); p.GetSpec().GetNodeName() != "node-2" {
			t.Fatalf("reader ran on %s", p.GetSpec().GetNodeName())
		}

		// Deleting the claim while a pod uses it waits for the pod.
		c.create(claimPod("holder", "data", "", `sleep 100000`))
		c.waitPhase("holder", kplanev1.PodRunning)
		c.deleteObj("PersistentVolumeClaim", "default", "data")
		o, err := c.get("PersistentVolumeClaim", "data")
		if err != nil || o.Meta().GetDeletionTimestamp() == nil {
			t.Fatalf("claim in use: %v, %v; want it kept, marked for deletion", o, err)
		}
		// The holder keeps running and the data stays while the claim is
		// held; a pod started now is refused the claim being deleted.
		c.create(claimPod("late", "data", "", `true`))
		c.eventually("late pod refused", func() string {
			for _, cond := range c.pod("late").GetStatus().GetConditions() {
				// The scheduler refuses it (PodScheduled False); a pod
				// bound by hand would be refused by its node agent
				// (PodReadyToStartContainers False).
				if strings.Contains(cond.GetMessage(), `persistentvolumeclaim "data" is being deleted`) {
					return ""
				}
			}
			return fmt.Sprintf("late: %v", c.pod("late").GetStatus())
		})
		if _, err := os.Stat(filepath.Join(dir, "msg")); err != nil || c.gone("PersistentVolumeClaim", "default", "data") {
			t.Fatalf("claim or data gone while in use: %v", err)
		}
		c.deleteObj("Pod", "default", "late")
		c.deleteObj("Pod", "default", "holder")
		// Reclaim Delete: the volume and its directory go.
		c.eventually("claim, volume and directory gone", func() string {
			_, err := os.Stat(dir)
			switch {
			case !c.gone("PersistentVolumeClaim", "default", "data"):
				return "claim still there"
			case !c.gone("PersistentVolume", "", pv.GetMetadata().GetName()):
				return "volume still there"
			case !errors.Is(err, os.ErrNotExist):
				return fmt.Sprintf("directory: %v", err)
			}
			return ""
		})
	})

	t.Run("Retain keeps the data and releases the volume", func(t *testing.T) {
		c.t = t
		c.create(claimObj("kept", "keep"))
		pv := c.boundVolume("kept")
		c.create(claimPod("keeper", "kept", "", `echo precious > "$KPLANE_POD_ROOT/data/f"`))
		c.waitPhase("keeper", kplanev1.PodSucceeded)
		c.deleteObj("Pod", "default", "keeper")
		c.deleteObj("PersistentVolumeClaim", "default", "kept")
		c.eventually("volume Released", func() string {
			ctx, opt := call(c.t)
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "PersistentVolume", Name: pv.GetMetadata().GetName()}, opt)
			if err != nil {
				return err.Error()
			}
			if ph := resp.GetObject().GetPersistentVolume().GetStatus().GetPhase(); ph != kplanev1.VolumeReleased {
				return "phase " + ph
			}
			return ""
		})
		if b, err := os.ReadFile(filepath.Join(pv.GetSpec().GetHostPath().GetPath(), "f")); err != nil || string(b) != "precious\n" {
			t.Fatalf("retained data: %q, %v", b, err)
		}
	})

	t.Run("WaitForFirstConsumer provisions once the scheduler picked a node", func(t *testing.T) {
		c.t = t
		c.create(storageClass("late", kplanev1.ReclaimDelete, kplanev1.VolumeBindingWaitForFirstConsumer))
		c.create(claimObj("late-data", "late"))
		c.eventually("WaitForFirstConsumer event", func() string {
			ctx, opt := call(c.t)
			resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: "default"}, opt)
			if err != nil {
				return err.Error()
			}
			for _, o := range resp.GetItems() {
				if e := o.GetEvent(); e.GetReason() == "WaitForFirstConsumer" && e.GetInvolvedObject().GetName() == "late-data" {
					return ""
				}
			}
			return "no event yet"
		})
		if o, _ := c.get("PersistentVolumeClaim", "late-data"); o.GetPersistentVolumeClaim().GetSpec().GetVolumeName() != "" {
			t.Fatal("a WaitForFirstConsumer claim was bound before any pod used it")
		}
		c.create(claimPod("consumer", "late-data", "node-2", `echo hi > "$KPLANE_POD_ROOT/data/f"; sleep 100000`))
		p := c.waitPhase("consumer", kplanev1.PodRunning)
		pv := c.boundVolume("late-data")
		terms := pv.GetSpec().GetNodeAffinity().GetRequired().GetNodeSelectorTerms()
		if p.GetSpec().GetNodeName() != "node-2" || len(terms) != 1 || terms[0].GetMatchExpressions()[0].GetValues()[0] != "node-2" {
			t.Fatalf("pod on %s, volume affinity %v; want both node-2", p.GetSpec().GetNodeName(), pv.GetSpec().GetNodeAffinity())
		}
		// The volume is pinned to node-2: a pod that must run on node-1
		// cannot use it.
		c.create(claimPod("elsewhere", "late-data", "node-1", `true`))
		c.eventually("elsewhere unschedulable for the volume's node affinity", func() string {
			for _, cond := range c.pod("elsewhere").GetStatus().GetConditions() {
				if cond.GetType() == kplanev1.PodScheduled && cond.GetStatus() == kplanev1.ConditionFalse &&
					strings.Contains(cond.GetMessage(), "volume node affinity conflict") {
					return ""
				}
			}
			return fmt.Sprintf("elsewhere: %v", c.pod("elsewhere").GetStatus())
		})
		c.deleteObj("Pod", "default", "elsewhere")
		c.deleteObj("Pod", "default", "consumer")
	})

	t.Run("an Immediate claim not bound keeps its pod unscheduled", func(t *testing.T) {
		c.t = t
		// A class that does not exist: nothing provisions, the claim stays Pending.
		c.create(claimObj("never", "nobody"))
		c.create(claimPod("stuck", "never", "", `true`))
		c.eventually("stuck unschedulable", func() string {
			for _, cond := range c.pod("stuck").GetStatus().GetConditions() {
				if cond.GetType() == kplanev1.PodScheduled && strings.Contains(cond.GetMessage(), "pod has unbound immediate PersistentVolumeClaims") {
					return ""
				}
			}
			return fmt.Sprintf("stuck: %v", c.pod("stuck").GetStatus())
		})
	})

	t.Run("an emptyDir over its sizeLimit evicts the pod", func(t *testing.T) {
		c.t = t
		c.create(kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "hog"},
			Spec: &kplanev1.PodSpec{
				Containers: []*kplanev1.Container{{Name: "main", Image: "busybox",
					Command:      []string{"sh", "-c", `head -c 65536 /dev/zero > "$KPLANE_POD_ROOT/scratch/big"; sleep 100000`},
					VolumeMounts: []*kplanev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
				Volumes: []*kplanev1.Volume{{Name: "scratch", EmptyDir: &kplanev1.EmptyDirVolumeSource{SizeLimit: "16Ki"}}},
			},
		}))
		p := c.waitPhase("hog", kplanev1.PodFailed)
		if p.GetStatus().GetReason() != "Evicted" {
			t.Fatalf("hog failed with reason %q, want Evicted", p.GetStatus().GetReason())
		}
	})
}
