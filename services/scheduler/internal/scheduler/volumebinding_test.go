package scheduler

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func (f *fixture) create(m proto.Message) {
	f.t.Helper()
	if _, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(m)}); err != nil {
		f.t.Fatalf("create: %v", err)
	}
}

func (f *fixture) claim(name string) *kplanev1.PersistentVolumeClaim {
	f.t.Helper()
	resp, err := f.api.Get(f.ctx, &kplanev1.GetRequest{Kind: "PersistentVolumeClaim", Namespace: "default", Name: name})
	if err != nil {
		f.t.Fatalf("get claim %s: %v", name, err)
	}
	return resp.GetObject().GetPersistentVolumeClaim()
}

func storageClass(name, provisioner, mode string) *kplanev1.StorageClass {
	return &kplanev1.StorageClass{Metadata: &kplanev1.ObjectMeta{Name: name}, Provisioner: provisioner,
		ReclaimPolicy: kplanev1.ReclaimDelete, VolumeBindingMode: mode}
}

// persistentVolume is a 1Gi volume of class, pinned to node by hostname.
func persistentVolume(name, class, node string) *kplanev1.PersistentVolume {
	return &kplanev1.PersistentVolume{Metadata: &kplanev1.ObjectMeta{Name: name},
		Spec: &kplanev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{kplanev1.ReadWriteOnce},
			StorageClassName: class, HostPath: &kplanev1.HostPathVolumeSource{Path: "/srv/" + name}, NodeAffinity: volume.HostnameAffinity(node)}}
}

// persistentVolumeClaim asks 1Gi of class; volumeName pre-binds it.
func persistentVolumeClaim(name, class, volumeName string) *kplanev1.PersistentVolumeClaim {
	return &kplanev1.PersistentVolumeClaim{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
		Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{kplanev1.ReadWriteOnce}, StorageClassName: &class, VolumeName: volumeName,
			Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}}}
}

func usesClaim(claim string) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, &kplanev1.Volume{Name: "data",
			PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}})
	}
}

// VolumeBinding in the running scheduler, a case per rule: a bound
// volume's node affinity decides the node (or rules out every node); an
// unbound Immediate claim or a missing one makes the pod unschedulable
// before any node is looked at; an unbound WaitForFirstConsumer claim
// gets the chosen node written on it (volume.kubernetes.io/selected-node)
// while the pod waits unbound, to the only node with a matching static
// volume when its class has no provisioner; once the claim is bound
// (pvctl's part, done here by hand) the pod is bound to that node.
func TestVolumeBinding(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		f.createNode(n, "4", "8Gi", 110)
	}
	const noProvisioner = "kubernetes.io/no-provisioner"
	f.create(storageClass("manual", noProvisioner, kplanev1.VolumeBindingImmediate))
	f.create(storageClass("now", kplanev1.ProvisionerLocalPath, kplanev1.VolumeBindingImmediate))
	f.create(storageClass("late", kplanev1.ProvisionerLocalPath, kplanev1.VolumeBindingWaitForFirstConsumer))
	f.create(storageClass("late-static", noProvisioner, kplanev1.VolumeBindingWaitForFirstConsumer))
	f.create(persistentVolume("pv-n2", "manual", "n2"))
	f.create(persistentVolume("pv-nowhere", "manual", "no-such-node"))
	f.create(persistentVolume("pv-static-n3", "late-static", "n3"))
	f.create(persistentVolumeClaim("pinned", "manual", "pv-n2"))
	f.create(persistentVolumeClaim("stranded", "manual", "pv-nowhere"))
	f.create(persistentVolumeClaim("immediate", "now", ""))
	f.create(persistentVolumeClaim("wffc", "late", ""))
	f.create(persistentVolumeClaim("static", "late-static", ""))
	f.startScheduler("s1")

	reason := func(pod string) string {
		if c := podScheduledCondition(f.pod(pod)); c != nil && c.GetStatus() == kplanev1.ConditionFalse {
			return c.GetMessage()
		}
		return ""
	}
	selected := func(claim string) string {
		return f.claim(claim).GetMetadata().GetAnnotations()[kplanev1.AnnotationSelectedNode]
	}
	for _, tc := range []struct {
		name, claim string
		// node is where the pod must be bound, or for a
		// WaitForFirstConsumer claim ("*": any) the node written on it.
		node string
		wffc bool
		// why starts the PodScheduled=False message of a pod that fits
		// nowhere.
		why string
	}{
		{name: "bound volume pins the node", claim: "pinned", node: "n2"},
		{name: "bound volume admits no node", claim: "stranded", why: "0/3 nodes are available: 3 node(s) had volume node affinity conflict."},
		{name: "unbound Immediate claim", claim: "immediate", why: "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."},
		{name: "missing claim", claim: "nope", why: `0/3 nodes are available: persistentvolumeclaim "nope" not found.`},
		{name: "WaitForFirstConsumer with a provisioner", claim: "wffc", node: "*", wffc: true},
		{name: "WaitForFirstConsumer, a static volume on one node", claim: "static", node: "n3", wffc: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := "uses-" + tc.claim
			f.createPod(pod, "100m", "", usesClaim(tc.claim))
			switch {
			case tc.why != "":
				eventually(t, 30*time.Second, pod+" unschedulable: "+tc.why, func() bool { return strings.HasPrefix(reason(pod), tc.why) })
				if n := f.pod(pod).GetSpec().GetNodeName(); n != "" {
					t.Fatalf("bound to %s", n)
				}
			case !tc.wffc:
				if got := f.waitBound(pod); got != tc.node {
					t.Fatalf("bound to %s, want %s", got, tc.node)
				}
			default:
				eventually(t, 30*time.Second, "a node selected on claim "+tc.claim, func() bool { return selected(tc.claim) != "" })
				node := selected(tc.claim)
				if tc.node != "*" && node != tc.node {
					t.Fatalf("claim %s: node %s selected, want %s", tc.claim, node, tc.node)
				}
				if n := f.pod(pod).GetSpec().GetNodeName(); n != "" {
					t.Fatalf("bound to %s before its claim", n)
				}
				// pvctl's part: a volume on the selected node, bound to
				// the claim.
				pv := "pv-for-" + tc.claim
				if tc.claim == "static" {
					pv = "pv-static-n3"
				} else {
					f.create(persistentVolume(pv, "late", node))
				}
				if err := client.RetryOnConflict(f.ctx, client.DefaultRetry, func() error {
					c := f.claim(tc.claim)
					c.Spec.VolumeName = pv
					_, err := f.api.Update(f.ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(c)})
					return err
				}); err != nil {
					t.Fatalf("bind claim %s: %v", tc.claim, err)
				}
				if got := f.waitBound(pod); got != node {
					t.Fatalf("bound to %s, want the claim's node %s", got, node)
				}
			}
		})
	}
}
