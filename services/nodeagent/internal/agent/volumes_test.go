package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The test plays pvctl: it binds the claim by writing the claim and the
// volume itself.
func TestPodVolumes(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	storage := t.TempDir()
	pvDir := filepath.Join(storage, "pv-1")
	if err := os.MkdirAll(pvDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pvDir, "greeting"), []byte("hello from the claim"), 0o644); err != nil {
		t.Fatal(err)
	}
	class := "manual"
	claim, err := client.PersistentVolumeClaims(e.api).Create(e.ctx, &kplanev1.PersistentVolumeClaim{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "data"},
		Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{kplanev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Secrets(e.api).Create(e.ctx, &kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "creds"},
		Data:     map[string][]byte{"password": []byte("s3cret")},
	}); err != nil {
		t.Fatal(err)
	}
	hostDir := filepath.Join(t.TempDir(), "made-by-agent")
	script := `set -e
cat "$KPLANE_POD_ROOT/data/greeting" > "$KPLANE_POD_ROOT/scratch/copy"
cat "$KPLANE_VOLUME_CREDS/password" >> "$KPLANE_POD_ROOT/scratch/copy"
echo written > "$KPLANE_POD_ROOT/out/by-pod"
echo "$KPLANE_VOLUME_SCRATCH" > "$KPLANE_VOLUME_HOST_DIR/scratch-path"
stat -c %a "$KPLANE_POD_ROOT/etc/creds/password" >> "$KPLANE_VOLUME_HOST_DIR/scratch-path"
cat "$KPLANE_POD_ROOT/scratch/copy"
sleep 100000`
	pod := e.createPod("user", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Volumes = []*kplanev1.Volume{
			{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}},
			{Name: "scratch", EmptyDir: &kplanev1.EmptyDirVolumeSource{}},
			{Name: "creds", Secret: &kplanev1.SecretVolumeSource{SecretName: "creds"}},
			{Name: "host-dir", HostPath: &kplanev1.HostPathVolumeSource{Path: hostDir, Type: "DirectoryOrCreate"}},
		}
		p.Spec.Containers[0].VolumeMounts = []*kplanev1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: "data", MountPath: "/out", SubPath: "out"},
			{Name: "scratch", MountPath: "/scratch"},
			{Name: "creds", MountPath: "/etc/creds", ReadOnly: true},
			{Name: "host-dir", MountPath: "/host"},
		}
	}, "sh", "-c", script)

	// The claim is not bound: the pod waits, and says why.
	e.waitCreated(pod, "waits for its claim", func(p *kplanev1.Pod) bool {
		for _, c := range p.GetStatus().GetConditions() {
			if c.GetType() == ConditionPodReadyToStartContainers && c.GetStatus() == kplanev1.ConditionFalse &&
				strings.Contains(c.GetMessage(), `persistentvolumeclaim "data" is not bound`) {
				return true
			}
		}
		return false
	})
	if got := e.waitPod("user", "pending", phase(kplanev1.PodPending)); len(got.GetStatus().GetContainerStatuses()) != 0 &&
		got.GetStatus().GetContainerStatuses()[0].GetState().GetRunning() != nil {
		t.Fatal("a container started before its claim was bound")
	}
	events, _, err := client.Events(e.api).List(e.ctx, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range events {
		found = found || (ev.GetReason() == ReasonFailedMount && ev.GetInvolvedObject().GetName() == "user")
	}
	if !found {
		t.Error("no FailedMount event for the waiting pod")
	}

	// Bind it: the pod starts at once (the claim's update wakes it).
	pv, err := client.PersistentVolumes(e.api).Create(e.ctx, &kplanev1.PersistentVolume{
		Metadata: &kplanev1.ObjectMeta{Name: "pv-1"},
		Spec: &kplanev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{kplanev1.ReadWriteOnce},
			StorageClassName: class, HostPath: &kplanev1.HostPathVolumeSource{Path: pvDir},
			ClaimRef: &kplanev1.ObjectReference{Namespace: "default", Name: "data", Uid: claim.GetMetadata().GetUid()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	claim.Spec.VolumeName = pv.GetMetadata().GetName()
	if claim, err = client.PersistentVolumeClaims(e.api).Update(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = &kplanev1.PersistentVolumeClaimStatus{Phase: kplanev1.ClaimBound}
	if _, err := client.PersistentVolumeClaims(e.api).UpdateStatus(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	running := e.waitCreated(pod, "Running", phase(kplanev1.PodRunning))
	waitFor(t, e.ctx, "the pod's writes", func() bool {
		b, err := os.ReadFile(filepath.Join(pvDir, "out", "by-pod"))
		return err == nil && string(b) == "written\n"
	})
	waitFor(t, e.ctx, "the hostPath file", func() bool {
		b, err := os.ReadFile(filepath.Join(hostDir, "scratch-path"))
		return err == nil && strings.HasSuffix(string(b), "400\n")
	})
	b, _ := os.ReadFile(filepath.Join(hostDir, "scratch-path"))
	scratch := strings.SplitN(string(b), "\n", 2)[0]
	want := filepath.Join(e.root, podsDir, running.GetMetadata().GetUid(), volumesDir, "scratch")
	if scratch != want {
		t.Errorf("KPLANE_VOLUME_SCRATCH = %q, want %q", scratch, want)
	}
	copied, err := os.ReadFile(filepath.Join(scratch, "copy"))
	if err != nil || string(copied) != "hello from the claims3cret" {
		t.Errorf("emptyDir copy = %q, %v", copied, err)
	}
	if c := condition(running.GetStatus(), ConditionPodReadyToStartContainers); c.GetStatus() != kplanev1.ConditionTrue {
		t.Errorf("PodReadyToStartContainers = %v, want True once started", c)
	}

	// Deleting the pod removes its emptyDir and secret files; the claim's
	// data stays.
	if _, err := client.Pods(e.api).Delete(e.ctx, "default", "user", client.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("user")
	waitFor(t, e.ctx, "pod dir removed", func() bool {
		_, err := os.Stat(filepath.Join(e.root, podsDir, running.GetMetadata().GetUid()))
		return os.IsNotExist(err)
	})
	if _, err := os.Stat(filepath.Join(pvDir, "greeting")); err != nil {
		t.Errorf("claim data after the pod's deletion: %v", err)
	}
}

func TestEmptyDirSizeLimitEvicts(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	pod := e.createPod("hog", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Volumes = []*kplanev1.Volume{{Name: "scratch", EmptyDir: &kplanev1.EmptyDirVolumeSource{SizeLimit: "1Ki"}}}
		p.Spec.Containers[0].VolumeMounts = []*kplanev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	}, "sh", "-c", `head -c 4096 /dev/zero > "$KPLANE_POD_ROOT/scratch/big"; sleep 100000`)
	got := e.waitCreated(pod, "evicted", func(p *kplanev1.Pod) bool {
		return p.GetStatus().GetPhase() == kplanev1.PodFailed && p.GetStatus().GetReason() == ReasonEvicted
	})
	if !strings.Contains(got.GetStatus().GetMessage(), `Usage of EmptyDir volume "scratch" exceeds the limit "1Ki"`) {
		t.Errorf("eviction message = %q", got.GetStatus().GetMessage())
	}
	waitFor(t, e.ctx, "container killed", func() bool { return shimCount(e.root, got.GetMetadata().GetUid()) == 0 })
	// It stays Failed/Evicted through later syncs.
	e.waitCreated(pod, "terminated container reported", func(p *kplanev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetState().GetTerminated() != nil
	})
	if p := e.waitPod("hog", "still evicted", phase(kplanev1.PodFailed)); p.GetStatus().GetReason() != ReasonEvicted {
		t.Errorf("reason after later syncs = %q", p.GetStatus().GetReason())
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"data": "DATA", "my-vol": "MY_VOL", "a.b-c": "A_B_C"} {
		if got := envName(in); got != want {
			t.Errorf("envName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckNesting(t *testing.T) {
	c := &kplanev1.Container{Name: "c", VolumeMounts: []*kplanev1.VolumeMount{{MountPath: "/data"}, {MountPath: "/data2"}, {MountPath: "/data/"}}}
	if err := checkNesting(c); err != nil {
		t.Errorf("siblings: %v", err)
	}
	c.VolumeMounts = append(c.VolumeMounts, &kplanev1.VolumeMount{MountPath: "/data/out"})
	if err := checkNesting(c); err == nil || !strings.Contains(err.Error(), "mountPath /data/out is inside mountPath /data") {
		t.Errorf("nested: %v", err)
	}
}
