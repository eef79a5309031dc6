package pv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// childEnv makes the test binary run pvctl with the crash hook armed
// (TestCrashBetweenBindingWrites): it SIGKILLs itself right after the
// first binding write.
const childEnv = "PVCTL_TEST_CRASH_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		faultAfterClaimRef = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		err := app.Run(context.Background(), NewService(), strings.Fields(args))
		fmt.Fprintln(os.Stderr, "pvctl child exited:", err)
		os.Exit(3)
	}
	goleak.VerifyTestMain(m)
}

const wait = 30 * time.Second

func start(t *testing.T) (kplanev1.ResourcesClient, string) {
	t.Helper()
	root := t.TempDir()
	api, _ := controllertest.Start(t, NewService(), "--storage-root", root)
	return api, root
}

func mkPV(name, size, class string) *kplanev1.PersistentVolume {
	return &kplanev1.PersistentVolume{
		Metadata: &kplanev1.ObjectMeta{Name: name},
		Spec: &kplanev1.PersistentVolumeSpec{
			Capacity:         map[string]string{"storage": size},
			AccessModes:      []string{kplanev1.ReadWriteOnce},
			StorageClassName: class,
			HostPath:         &kplanev1.HostPathVolumeSource{Path: "/srv/" + name},
		},
	}
}

func mkClaim(name, size string, class *string) *kplanev1.PersistentVolumeClaim {
	return &kplanev1.PersistentVolumeClaim{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
		Spec: &kplanev1.PersistentVolumeClaimSpec{
			AccessModes:      []string{kplanev1.ReadWriteOnce},
			Resources:        &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": size}},
			StorageClassName: class,
		},
	}
}

func mkClass(name, policy, mode string, def bool) *kplanev1.StorageClass {
	sc := &kplanev1.StorageClass{Metadata: &kplanev1.ObjectMeta{Name: name}, Provisioner: kplanev1.ProvisionerLocalPath,
		ReclaimPolicy: policy, VolumeBindingMode: mode}
	if def {
		sc.Metadata.Annotations = map[string]string{kplanev1.AnnotationDefaultStorageClass: "true"}
	}
	return sc
}

func ptr[T any](v T) *T { return &v }

func create[T proto.Message](t *testing.T, api kplanev1.ResourcesClient, m T) T {
	t.Helper()
	resp, err := api.Create(context.Background(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(m)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return resp.GetObject().Message().(T)
}

func getClaim(t *testing.T, api kplanev1.ResourcesClient, name string) *kplanev1.PersistentVolumeClaim {
	t.Helper()
	resp, err := api.Get(context.Background(), &kplanev1.GetRequest{Kind: kindPVC, Namespace: "default", Name: name})
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get claim %s: %v", name, err)
	}
	return resp.GetObject().GetPersistentVolumeClaim()
}

func getPV(t *testing.T, api kplanev1.ResourcesClient, name string) *kplanev1.PersistentVolume {
	t.Helper()
	resp, err := api.Get(context.Background(), &kplanev1.GetRequest{Kind: kindPV, Name: name})
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get volume %s: %v", name, err)
	}
	return resp.GetObject().GetPersistentVolume()
}

func listPVs(t *testing.T, api kplanev1.ResourcesClient) []*kplanev1.PersistentVolume {
	t.Helper()
	resp, err := api.List(context.Background(), &kplanev1.ListRequest{Kind: kindPV})
	if err != nil {
		t.Fatalf("list volumes: %v", err)
	}
	var out []*kplanev1.PersistentVolume
	for _, o := range resp.GetItems() {
		out = append(out, o.GetPersistentVolume())
	}
	return out
}

func listClaims(t *testing.T, api kplanev1.ResourcesClient) []*kplanev1.PersistentVolumeClaim {
	t.Helper()
	resp, err := api.List(context.Background(), &kplanev1.ListRequest{Kind: kindPVC, Namespace: "default"})
	if err != nil {
		t.Fatalf("list claims: %v", err)
	}
	var out []*kplanev1.PersistentVolumeClaim
	for _, o := range resp.GetItems() {
		out = append(out, o.GetPersistentVolumeClaim())
	}
	return out
}

// waitBound waits until claim is Bound with both sides of the binding
// written, and returns its volume.
func waitBound(t *testing.T, api kplanev1.ResourcesClient, claim string) *kplanev1.PersistentVolume {
	t.Helper()
	var pv *kplanev1.PersistentVolume
	testutil.Eventually(t, wait, "claim "+claim+" bound", func() bool {
		c := getClaim(t, api, claim)
		if c.GetStatus().GetPhase() != kplanev1.ClaimBound || c.GetSpec().GetVolumeName() == "" {
			return false
		}
		pv = getPV(t, api, c.GetSpec().GetVolumeName())
		return pv.GetStatus().GetPhase() == kplanev1.VolumeBound && pv.GetSpec().GetClaimRef().GetUid() == c.GetMetadata().GetUid()
	})
	return pv
}

func deleteObj(t *testing.T, api kplanev1.ResourcesClient, kind, ns, name string) {
	t.Helper()
	if _, err := api.Delete(context.Background(), &kplanev1.DeleteRequest{Kind: kind, Namespace: ns, Name: name}); err != nil {
		t.Fatalf("delete %s %s: %v", kind, name, err)
	}
}

func TestStaticBindingPicksSmallestFit(t *testing.T) {
	api, _ := start(t)
	create(t, api, mkPV("big", "10Gi", "manual"))
	create(t, api, mkPV("small", "512Mi", "manual"))
	create(t, api, mkPV("fits", "2Gi", "manual"))
	create(t, api, mkPV("other-class", "1Gi", "fast"))
	c := create(t, api, mkClaim("data", "1Gi", ptr("manual")))

	pv := waitBound(t, api, "data")
	if pv.GetMetadata().GetName() != "fits" {
		t.Fatalf("bound to %s, want fits (the smallest that covers 1Gi in class manual)", pv.GetMetadata().GetName())
	}
	got := getClaim(t, api, "data")
	if got.GetStatus().GetCapacity()["storage"] != "2Gi" || strings.Join(got.GetStatus().GetAccessModes(), ",") != kplanev1.ReadWriteOnce {
		t.Errorf("claim status = %v, want the volume's capacity 2Gi and access modes", got.GetStatus())
	}
	if got.GetMetadata().GetFinalizers()[0] != kplanev1.FinalizerPVCProtection {
		t.Errorf("claim finalizers = %v", got.GetMetadata().GetFinalizers())
	}
	if pv.GetSpec().GetClaimRef().GetName() != c.GetMetadata().GetName() || pv.GetMetadata().GetAnnotations()[kplanev1.AnnotationBoundByController] != "yes" {
		t.Errorf("volume = %v", pv)
	}
	testutil.Eventually(t, wait, "the other volumes Available with pv-protection", func() bool {
		for _, v := range listPVs(t, api) {
			if v.GetMetadata().GetName() == "fits" {
				continue
			}
			if v.GetStatus().GetPhase() != kplanev1.VolumeAvailable || len(v.GetMetadata().GetFinalizers()) != 1 ||
				v.GetMetadata().GetFinalizers()[0] != kplanev1.FinalizerPVProtection {
				return false
			}
		}
		return true
	})

	// A claim that fits no volume and names a class with no provisioner
	// object stays Pending.
	create(t, api, mkClaim("huge", "100Gi", ptr("manual")))
	testutil.Eventually(t, wait, "huge gets its finalizer", func() bool {
		return len(getClaim(t, api, "huge").GetMetadata().GetFinalizers()) == 1
	})
	if c := getClaim(t, api, "huge"); c.GetSpec().GetVolumeName() != "" || c.GetStatus().GetPhase() != kplanev1.ClaimPending {
		t.Errorf("huge = %v, want Pending and unbound", c)
	}
}

func TestPreBound(t *testing.T) {
	api, _ := start(t)
	// A volume pre-bound to a claim by name is kept for it, though a
	// smaller one fits too.
	v := mkPV("reserved", "5Gi", "manual")
	v.Spec.ClaimRef = &kplanev1.ObjectReference{Namespace: "default", Name: "mine"}
	create(t, api, v)
	create(t, api, mkPV("small", "1Gi", "manual"))
	create(t, api, mkClaim("other", "1Gi", ptr("manual")))
	if pv := waitBound(t, api, "other"); pv.GetMetadata().GetName() != "small" {
		t.Fatalf("other bound to %s, want small (reserved is pre-bound to mine)", pv.GetMetadata().GetName())
	}
	create(t, api, mkClaim("mine", "1Gi", ptr("manual")))
	if pv := waitBound(t, api, "mine"); pv.GetMetadata().GetName() != "reserved" {
		t.Fatalf("mine bound to %s", pv.GetMetadata().GetName())
	}
	// A claim naming its volume gets that one.
	create(t, api, mkPV("named", "3Gi", "manual"))
	create(t, api, mkPV("smaller", "1Gi", "manual"))
	c := mkClaim("wants-named", "1Gi", ptr("manual"))
	c.Spec.VolumeName = "named"
	create(t, api, c)
	if pv := waitBound(t, api, "wants-named"); pv.GetMetadata().GetName() != "named" {
		t.Fatalf("wants-named bound to %s", pv.GetMetadata().GetName())
	}
}

// 50 claims race for 10 volumes: exactly 10 are bound, each volume to
// one claim, and both sides of every binding agree.
func TestFiftyClaimsRaceForTenVolumes(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	root := t.TempDir()
	// Two replicas would never both lead; five workers in one replica
	// race each other, which is the race the CAS write has to settle.
	controllertest.Run(t, srv.Addr(), NewService(), "--storage-root", root, "--workers", "8")
	for i := range 10 {
		create(t, api, mkPV(fmt.Sprintf("pv-%02d", i), "1Gi", "manual"))
	}
	for i := range 50 {
		create(t, api, mkClaim(fmt.Sprintf("claim-%02d", i), "1Gi", ptr("manual")))
	}
	testutil.Eventually(t, wait, "10 claims bound", func() bool {
		n := 0
		for _, c := range listClaims(t, api) {
			if c.GetStatus().GetPhase() == kplanev1.ClaimBound {
				n++
			}
		}
		return n == 10
	})
	claims := map[string]*kplanev1.PersistentVolumeClaim{}
	for _, c := range listClaims(t, api) {
		claims[c.GetMetadata().GetName()] = c
	}
	owner := map[string]string{}
	for _, v := range listPVs(t, api) {
		ref := v.GetSpec().GetClaimRef()
		if ref == nil {
			t.Fatalf("volume %s unbound with 40 claims pending", v.GetMetadata().GetName())
		}
		c := claims[ref.GetName()]
		if c.GetMetadata().GetUid() != ref.GetUid() || c.GetSpec().GetVolumeName() != v.GetMetadata().GetName() {
			t.Errorf("volume %s -> claim %s, but the claim names volume %q", v.GetMetadata().GetName(), ref.GetName(), c.GetSpec().GetVolumeName())
		}
		if prev, ok := owner[ref.GetName()]; ok {
			t.Errorf("claim %s holds volumes %s and %s", ref.GetName(), prev, v.GetMetadata().GetName())
		}
		owner[ref.GetName()] = v.GetMetadata().GetName()
	}
	bound := 0
	for name, c := range claims {
		if vn := c.GetSpec().GetVolumeName(); vn != "" {
			bound++
			if owner[name] != vn {
				t.Errorf("claim %s names volume %s, whose claimRef is elsewhere", name, vn)
			}
		}
	}
	if bound != 10 {
		t.Errorf("%d claims name a volume, want 10", bound)
	}
}

func TestProvisionAndDelete(t *testing.T) {
	api, root := start(t)
	create(t, api, mkClass("local", kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate, true))
	c := create(t, api, mkClaim("data", "1Gi", nil))
	pv := waitBound(t, api, "data")
	if got := getClaim(t, api, "data").GetSpec().GetStorageClassName(); got != "local" {
		t.Errorf("claim class = %q, want the default class local", got)
	}
	dir := filepath.Join(root, "pvc-"+c.GetMetadata().GetUid())
	if pv.GetMetadata().GetName() != "pvc-"+c.GetMetadata().GetUid() || pv.GetSpec().GetHostPath().GetPath() != dir ||
		pv.GetSpec().GetPersistentVolumeReclaimPolicy() != kplanev1.ReclaimDelete || pv.GetSpec().GetNodeAffinity() != nil ||
		pv.GetMetadata().GetAnnotations()[kplanev1.AnnotationProvisionedBy] != kplanev1.ProvisionerLocalPath {
		t.Fatalf("provisioned volume = %v", pv)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatalf("the volume's directory is not writable: %v", err)
	}
	deleteObj(t, api, kindPVC, "default", "data")
	testutil.Eventually(t, wait, "volume and directory deleted", func() bool {
		_, err := os.Stat(dir)
		return getPV(t, api, pv.GetMetadata().GetName()) == nil && errors.Is(err, os.ErrNotExist) && getClaim(t, api, "data") == nil
	})
}

func TestRetainKeepsDataAndReleases(t *testing.T) {
	api, root := start(t)
	create(t, api, mkClass("keep", kplanev1.ReclaimRetain, kplanev1.VolumeBindingImmediate, false))
	c := create(t, api, mkClaim("data", "1Gi", ptr("keep")))
	pv := waitBound(t, api, "data")
	dir := filepath.Join(root, "pvc-"+c.GetMetadata().GetUid())
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	deleteObj(t, api, kindPVC, "default", "data")
	testutil.Eventually(t, wait, "volume Released", func() bool {
		return getPV(t, api, pv.GetMetadata().GetName()).GetStatus().GetPhase() == kplanev1.VolumeReleased
	})
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "kept" {
		t.Fatalf("data after Retain: %q, %v", b, err)
	}
	// A new claim of the same name does not get the released volume.
	create(t, api, mkClaim("data", "1Gi", ptr("keep")))
	if got := waitBound(t, api, "data"); got.GetMetadata().GetName() == pv.GetMetadata().GetName() {
		t.Fatal("a Released volume was bound to a new claim")
	}
	// Deleting the released volume by hand works: pv-protection lets go.
	deleteObj(t, api, kindPV, "", pv.GetMetadata().GetName())
	testutil.Eventually(t, wait, "released volume deleted", func() bool { return getPV(t, api, pv.GetMetadata().GetName()) == nil })
}

func TestClaimInUseWaitsForPod(t *testing.T) {
	api, _ := start(t)
	create(t, api, mkClass("local", kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate, false))
	create(t, api, mkClaim("data", "1Gi", ptr("local")))
	pv := waitBound(t, api, "data")
	pod := create(t, api, &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "user"},
		Spec: &kplanev1.PodSpec{
			Containers: []*kplanev1.Container{{Name: "c", Image: "x", VolumeMounts: []*kplanev1.VolumeMount{{Name: "d", MountPath: "/data"}}}},
			Volumes:    []*kplanev1.Volume{{Name: "d", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		},
	})
	// The bound volume may not go either while its claim holds it.
	deleteObj(t, api, kindPV, "", pv.GetMetadata().GetName())
	deleteObj(t, api, kindPVC, "default", "data")
	// Nothing to wait on for "still there": check after the controller has
	// demonstrably handled the claim since the delete (its deletion
	// timestamp is set synchronously; a pass of the controller over the
	// volume shows as the volume still Bound while it is marked deleted).
	testutil.Eventually(t, wait, "deletion recorded", func() bool {
		return getClaim(t, api, "data").GetMetadata().GetDeletionTimestamp() != nil
	})
	if c := getClaim(t, api, "data"); c == nil || getPV(t, api, pv.GetMetadata().GetName()) == nil {
		t.Fatal("claim or volume removed while a pod uses it")
	}
	// The pod finishes: the claim goes, then the volume.
	pod.Status = &kplanev1.PodStatus{Phase: kplanev1.PodSucceeded}
	if _, err := api.UpdateStatus(context.Background(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(pod)}); err != nil {
		t.Fatalf("pod status: %v", err)
	}
	testutil.Eventually(t, wait, "claim and volume gone", func() bool {
		return getClaim(t, api, "data") == nil && getPV(t, api, pv.GetMetadata().GetName()) == nil
	})
}

func TestExpansion(t *testing.T) {
	api, _ := start(t)
	sc := mkClass("grow", kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate, false)
	sc.AllowVolumeExpansion = ptr(true)
	create(t, api, sc)
	create(t, api, mkClass("fixed", kplanev1.ReclaimDelete, kplanev1.VolumeBindingImmediate, false))
	create(t, api, mkClaim("data", "1Gi", ptr("grow")))
	create(t, api, mkClaim("fixed", "1Gi", ptr("fixed")))
	waitBound(t, api, "data")
	fixedPV := waitBound(t, api, "fixed")
	for _, name := range []string{"data", "fixed"} {
		c := getClaim(t, api, name)
		_, _, err := controller.Update(context.Background(), api, c, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
			next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
			next.Spec.Resources.Requests["storage"] = "3Gi"
			return next
		})
		if err != nil {
			t.Fatalf("grow %s: %v", name, err)
		}
	}
	testutil.Eventually(t, wait, "volume and claim status grown", func() bool {
		c := getClaim(t, api, "data")
		return c.GetStatus().GetCapacity()["storage"] == "3Gi" && getPV(t, api, c.GetSpec().GetVolumeName()).GetSpec().GetCapacity()["storage"] == "3Gi"
	})
	testutil.Eventually(t, wait, "VolumeResizeFailed event for the fixed class", func() bool {
		resp, err := api.List(context.Background(), &kplanev1.ListRequest{Kind: "Event", Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range resp.GetItems() {
			if e := o.GetEvent(); e.GetReason() == reasonVolumeResizeFailed && e.GetInvolvedObject().GetName() == "fixed" {
				return true
			}
		}
		return false
	})
	if got := getPV(t, api, fixedPV.GetMetadata().GetName()).GetSpec().GetCapacity()["storage"]; got != "1Gi" {
		t.Errorf("volume of a class without expansion grew to %s", got)
	}
}

func TestWaitForFirstConsumer(t *testing.T) {
	api, _ := start(t)
	create(t, api, mkClass("late", kplanev1.ReclaimDelete, kplanev1.VolumeBindingWaitForFirstConsumer, false))
	create(t, api, &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n1", Labels: map[string]string{kplanev1.LabelHostname: "n1"}}})
	create(t, api, mkClaim("data", "1Gi", ptr("late")))
	testutil.Eventually(t, wait, "WaitForFirstConsumer event", func() bool {
		resp, err := api.List(context.Background(), &kplanev1.ListRequest{Kind: "Event", Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range resp.GetItems() {
			if o.GetEvent().GetReason() == reasonWaitForFirstConsumer {
				return true
			}
		}
		return false
	})
	if n := len(listPVs(t, api)); n != 0 {
		t.Fatalf("%d volumes provisioned before a consumer was scheduled", n)
	}
	// The scheduler's part: it picks n1 for the claim's first consumer.
	c := getClaim(t, api, "data")
	c.Metadata.Annotations = map[string]string{kplanev1.AnnotationSelectedNode: "n1"}
	if _, err := api.Update(context.Background(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(c)}); err != nil {
		t.Fatal(err)
	}
	pv := waitBound(t, api, "data")
	terms := pv.GetSpec().GetNodeAffinity().GetRequired().GetNodeSelectorTerms()
	if len(terms) != 1 || terms[0].GetMatchExpressions()[0].GetValues()[0] != "n1" {
		t.Errorf("node affinity = %v, want the selected node n1", pv.GetSpec().GetNodeAffinity())
	}
}

// pvctl is SIGKILLed between the two binding writes (the volume's
// claimRef is written, the claim's volumeName is not); after a restart
// the pair is bound consistently.
func TestCrashBetweenBindingWrites(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	root := t.TempDir()
	create(t, api, mkPV("only", "1Gi", "manual"))
	create(t, api, mkPV("spare", "5Gi", "manual"))
	claim := create(t, api, mkClaim("data", "1Gi", ptr("manual")))

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=--apiserver "+srv.Addr()+" --health-addr= --leader-elect=false --log-level warn --storage-root "+root)
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child pvctl: %v, want killed by SIGKILL at the fault point; output:\n%s", err, out)
	}
	pv := getPV(t, api, "only")
	if pv.GetSpec().GetClaimRef().GetUid() != claim.GetMetadata().GetUid() || getClaim(t, api, "data").GetSpec().GetVolumeName() != "" {
		t.Fatalf("after the crash: volume claimRef %v, claim volumeName %q; want the first write only",
			pv.GetSpec().GetClaimRef(), getClaim(t, api, "data").GetSpec().GetVolumeName())
	}

	controllertest.Run(t, srv.Addr(), NewService(), "--storage-root", root)
	if got := waitBound(t, api, "data"); got.GetMetadata().GetName() != "only" {
		t.Fatalf("after restart the claim is bound to %s, want only (the volume whose claimRef names it)", got.GetMetadata().GetName())
	}
	if ref := getPV(t, api, "spare").GetSpec().GetClaimRef(); ref != nil {
		t.Errorf("spare volume was also bound to %v", ref)
	}
}

func TestStorageRootFlag(t *testing.T) {
	err := app.Run(context.Background(), NewService(), []string{"--storage-root", "relative/dir", "--health-addr", ""})
	if err == nil || !strings.Contains(err.Error(), "--storage-root must be an absolute path") {
		t.Fatalf("relative --storage-root: %v", err)
	}
}
