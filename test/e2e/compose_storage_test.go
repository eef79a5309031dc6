package e2e

import (
	"context"
	"strings"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// checkStorage: a local-path claim's data, written by a pod on node-1,
// is read by a pod on node-2, through the storage volume that pvctl and
// every node agent container mount.
func (c *composeStack) checkStorage(kpctl func(args ...string) string) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := "compose-local"
	for _, o := range []*kplanev1.Object{
		kplanev1.MustWrap(&kplanev1.StorageClass{Metadata: &kplanev1.ObjectMeta{Name: class}, Provisioner: kplanev1.ProvisionerLocalPath,
			ReclaimPolicy: kplanev1.ReclaimDelete, VolumeBindingMode: kplanev1.VolumeBindingImmediate}),
		kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "shared"},
			Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{kplanev1.ReadWriteOnce}, StorageClassName: &class,
				Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "16Mi"}}},
		}),
	} {
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: o}); err != nil {
			t.Fatalf("create %s: %v", o.Key(), err)
		}
	}
	run := func(name, node, script string) (string, string) {
		pod := kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &kplanev1.PodSpec{NodeName: node, RestartPolicy: "Never",
				Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", script},
					VolumeMounts: []*kplanev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes: []*kplanev1.Volume{{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "shared"}}}},
		})
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: pod}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		var phase string
		c.eventually(name+" on "+node+" finished", 3*time.Minute, func() bool {
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
			phase = resp.GetObject().GetPod().GetStatus().GetPhase()
			return err == nil && (phase == "Succeeded" || phase == "Failed")
		})
		return phase, kpctl("logs", name)
	}
	if phase, log := run("storage-writer", "node-1", `echo "from node-1" > "$KPLANE_POD_ROOT/data/msg" && cat "$KPLANE_POD_ROOT/data/msg"`); phase != "Succeeded" {
		t.Fatalf("writer on node-1: %s\n%s", phase, log)
	}
	phase, log := run("storage-reader", "node-2", `cat "$KPLANE_VOLUME_DATA/msg"`)
	if phase != "Succeeded" || !strings.Contains(log, "from node-1") {
		t.Fatalf("reader on node-2: %s, log %q; want the data node-1 wrote", phase, log)
	}
	if out := kpctl("get", "pv,pvc"); !strings.Contains(out, "default/shared") || !strings.Contains(out, "Bound") {
		t.Errorf("kpctl get pv,pvc:\n%s", out)
	}
}
