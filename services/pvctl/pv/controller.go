// Package pv is the PersistentVolume controller: it binds
// PersistentVolumeClaims to PersistentVolumes, provisions local-path
// volumes, reclaims released volumes, manages the protection finalizers
// and expands bound volumes, as Kubernetes' persistent volume, PVC
// protection and PV protection controllers do together.
//
// Binding writes the volume's spec.claimRef first, then the claim's
// spec.volumeName, then the volume's and the claim's status. Each step
// is decided afresh on the current object, so a crash between two writes
// is finished by the next reconcile: a volume whose claimRef names a
// claim with no volumeName is that claim's pre-bound match. Two claims
// racing for one volume meet at the volume's compare-and-swap write: the
// loser rereads it, sees another claim's reference and looks again.
package pv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	kindPV    = "PersistentVolume"
	kindPVC   = "PersistentVolumeClaim"
	kindClass = "StorageClass"
	kindPod   = "Pod"
	kindNode  = "Node"

	// podClaimIndex indexes pods by "namespace/claimName" of each claim
	// their volumes use.
	podClaimIndex = "claims"
	// volumeClaimIndex indexes volumes by the "namespace/name" of their claimRef.
	volumeClaimIndex = "claimRef"

	// raceAttempts bounds how many volumes one reconcile tries when other
	// claims keep taking the one it picked.
	raceAttempts = 5

	// DefaultStorageRoot is the default of --storage-root.
	DefaultStorageRoot = "/var/lib/kplane/storage"
)

// Event reasons, as Kubernetes' volume controllers spell them.
const (
	reasonFailedBinding          = "FailedBinding"
	reasonWaitForFirstConsumer   = "WaitForFirstConsumer"
	reasonProvisioningSucceeded  = "ProvisioningSucceeded"
	reasonProvisioningFailed     = "ProvisioningFailed"
	reasonExternalProvisioning   = "ExternalProvisioning"
	reasonClaimLost              = "ClaimLost"
	reasonVolumeFailedDelete     = "VolumeFailedDelete"
	reasonVolumeResizeSuccessful = "VolumeResizeSuccessful"
	reasonVolumeResizeFailed     = "VolumeResizeFailed"
	reasonVolumeDeleted          = "VolumeDeleted"
)

// faultAfterClaimRef, when set (by tests only), runs right after a
// volume's claimRef is written and before the claim's volumeName is: the
// crash point between the two binding writes.
var faultAfterClaimRef func()

type pvController struct {
	storageRoot string

	api      *client.Client
	log      hclog.Logger
	ctx      *app.Context
	recorder *record.Recorder
	claims   *informer.Informer
	volumes  *informer.Informer
	classes  *informer.Informer
	pods     *informer.Informer
	nodes    *informer.Informer
	// written remembers this controller's volume and claim writes until
	// the caches show them, so a reconcile never binds from a stale view
	// of what it just bound.
	written *controller.MutationCache

	provisioned atomic.Int64
	bound       atomic.Int64
	deleted     atomic.Int64
}

// NewService returns pvctl: the binary's main runs it with app.Main.
func NewService() app.Service { return (&pvController{}).service() }

// service describes the binary. RequireCatchUp: a new leader must not
// judge a volume released (and delete its data) from a claim cache older
// than the volume's binding.
func (r *pvController) service() app.Service {
	return app.Service{
		Name:           "pvctl",
		HealthAddr:     ":10263",
		LeaderElected:  true,
		RequireCatchUp: true,
		Workers:        5,
		Watches: []app.Watch{
			{Kind: kindPVC, MapToKey: r.claimKeys},
			{Kind: kindPV, MapToKey: volumeKeys},
			{Kind: kindClass, MapToKey: r.classClaims},
			{Kind: kindPod, MapToKey: podClaimKeys},
		},
		AddFlags: func(fs *flag.FlagSet) {
			fs.StringVar(&r.storageRoot, "storage-root", DefaultStorageRoot,
				"directory under which the kplane.io/local-path provisioner makes one directory per volume; node agents must see it at the same path")
		},
		CheckFlags: func() error {
			if !filepath.IsAbs(r.storageRoot) {
				return fmt.Errorf("--storage-root must be an absolute path, not %q", r.storageRoot)
			}
			return nil
		},
		Setup: r.setup,
	}
}

func (r *pvController) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	r.recorder = record.New(c.Client, "persistentvolume-controller", c.Identity, c.Logger)
	r.written = controller.NewMutationCache()
	r.claims = c.Informers.ForKind(kindPVC)
	r.volumes = c.Informers.ForKind(kindPV)
	r.classes = c.Informers.ForKind(kindClass)
	r.pods = c.Informers.ForKind(kindPod)
	r.nodes = c.Informers.ForKind(kindNode)
	if err := r.pods.AddIndexers(informer.Indexers{podClaimIndex: podClaimKeysIndex}); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	if err := r.volumes.AddIndexers(informer.Indexers{volumeClaimIndex: func(o *kplanev1.Object) []string {
		if ref := o.GetPersistentVolume().GetSpec().GetClaimRef(); ref != nil {
			return []string{kplanev1.MetaKey(ref.GetNamespace(), ref.GetName())}
		}
		return nil
	}}); err != nil {
		return nil, fmt.Errorf("volume index: %w", err)
	}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_pvctl_volumes_provisioned_total", Help: "local-path volumes provisioned.", Value: &r.provisioned},
		app.Counter{Name: "kplane_pvctl_claims_bound_total", Help: "claims this process bound to a volume.", Value: &r.bound},
		app.Counter{Name: "kplane_pvctl_volumes_deleted_total", Help: "volumes reclaimed with the Delete policy.", Value: &r.deleted},
	); err != nil {
		return nil, err
	}
	return r, nil
}

// Keys: "PersistentVolumeClaim/<ns>/<name>" and "PersistentVolume/<name>".
func claimKey(ns, name string) string { return kindPVC + "/" + ns + "/" + name }
func volumeKey(name string) string    { return kindPV + "/" + name }

// volumeKeys wakes a volume and the claim its claimRef names.
func volumeKeys(o *kplanev1.Object) []string {
	keys := []string{volumeKey(o.Meta().GetName())}
	if ref := o.GetPersistentVolume().GetSpec().GetClaimRef(); ref != nil {
		keys = append(keys, claimKey(ref.GetNamespace(), ref.GetName()))
	}
	return keys
}

// claimKeys wakes a claim and the volumes that reference it (released
// when it goes) or that it names.
func (r *pvController) claimKeys(o *kplanev1.Object) []string {
	ns, name := o.Meta().GetNamespace(), o.Meta().GetName()
	keys := []string{claimKey(ns, name)}
	if v := o.GetPersistentVolumeClaim().GetSpec().GetVolumeName(); v != "" {
		keys = append(keys, volumeKey(v))
	}
	if r.volumes != nil {
		names, _ := r.volumes.Store().IndexKeys(volumeClaimIndex, kplanev1.MetaKey(ns, name))
		for _, k := range names {
			_, n := kplanev1.SplitKey(k)
			keys = append(keys, volumeKey(n))
		}
	}
	return keys
}

// podClaimKeys wakes the claims a pod uses (their protection finalizer
// waits for the pod; a WaitForFirstConsumer claim for its scheduling).
func podClaimKeys(o *kplanev1.Object) []string {
	var keys []string
	for _, name := range volume.PodClaims(o.GetPod()) {
		keys = append(keys, claimKey(o.Meta().GetNamespace(), name))
	}
	return keys
}

func podClaimKeysIndex(o *kplanev1.Object) []string {
	var keys []string
	for _, name := range volume.PodClaims(o.GetPod()) {
		keys = append(keys, kplanev1.MetaKey(o.Meta().GetNamespace(), name))
	}
	return keys
}

// classClaims wakes the claims still waiting when a class appears or
// changes (it may be the default, or the one they name).
func (r *pvController) classClaims(_ *kplanev1.Object) []string {
	if r.claims == nil {
		return nil
	}
	var keys []string
	for _, o := range r.claims.Store().List() {
		if o.GetPersistentVolumeClaim().GetSpec().GetVolumeName() == "" {
			keys = append(keys, claimKey(o.Meta().GetNamespace(), o.Meta().GetName()))
		}
	}
	return keys
}

// Reconcile implements app.Reconciler.
func (r *pvController) Reconcile(ctx context.Context, key string) error {
	kind, rest, _ := strings.Cut(key, "/")
	switch kind {
	case kindPVC:
		ns, name := kplanev1.SplitKey(rest)
		return r.syncClaim(ctx, ns, name)
	case kindPV:
		return r.syncVolume(ctx, rest)
	}
	return fmt.Errorf("malformed key %q", key)
}

func (r *pvController) cachedClaim(ns, name string) (*kplanev1.PersistentVolumeClaim, bool) {
	o, ok := r.claims.Store().GetByName(ns, name)
	if !ok {
		return nil, false
	}
	return r.written.Newest(o).GetPersistentVolumeClaim(), true
}

func (r *pvController) cachedVolume(name string) (*kplanev1.PersistentVolume, bool) {
	o, ok := r.volumes.Store().GetByName("", name)
	if !ok {
		return nil, false
	}
	return r.written.Newest(o).GetPersistentVolume(), true
}

func (r *pvController) allVolumes() []*kplanev1.PersistentVolume {
	objs := r.volumes.Store().List()
	out := make([]*kplanev1.PersistentVolume, 0, len(objs))
	for _, o := range objs {
		out = append(out, r.written.Newest(o).GetPersistentVolume())
	}
	return out
}

func (r *pvController) class(name string) *kplanev1.StorageClass {
	if name == "" {
		return nil
	}
	o, ok := r.classes.Store().GetByName("", name)
	if !ok {
		return nil
	}
	return o.GetStorageClass()
}

// defaultClass is the class marked default; with several, the newest
// (then the first by name), as Kubernetes picks.
func (r *pvController) defaultClass() *kplanev1.StorageClass {
	var best *kplanev1.StorageClass
	for _, o := range r.classes.Store().List() {
		sc := o.GetStorageClass()
		if sc.GetMetadata().GetAnnotations()[kplanev1.AnnotationDefaultStorageClass] != "true" {
			continue
		}
		if best == nil || sc.GetMetadata().GetCreationTimestamp().AsTime().After(best.GetMetadata().GetCreationTimestamp().AsTime()) {
			best = sc
		}
	}
	return best
}

func wrap(m proto.Message) *kplanev1.Object { return kplanev1.MustWrap(m) }

// ---- claims

func (r *pvController) syncClaim(ctx context.Context, ns, name string) error {
	c, ok := r.cachedClaim(ns, name)
	if !ok {
		return nil // the volume's reconcile releases what it held
	}
	if c.GetMetadata().GetDeletionTimestamp() != nil {
		return r.releaseClaimProtection(ctx, c)
	}
	c, err := r.updateClaim(ctx, c, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
		if slices.Contains(cur.GetMetadata().GetFinalizers(), kplanev1.FinalizerPVCProtection) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
		next.Metadata.Finalizers = append(next.Metadata.Finalizers, kplanev1.FinalizerPVCProtection)
		return next
	})
	if err != nil || c == nil {
		return err
	}
	if c.GetSpec().StorageClassName == nil {
		if def := r.defaultClass(); def != nil {
			name := def.GetMetadata().GetName()
			if c, err = r.updateClaim(ctx, c, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
				if cur.GetSpec().StorageClassName != nil {
					return nil
				}
				next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
				next.Spec.StorageClassName = &name
				return next
			}); err != nil || c == nil {
				return err
			}
		}
	}
	if c.GetSpec().GetVolumeName() == "" {
		return r.bindUnbound(ctx, c)
	}
	return r.syncBoundClaim(ctx, c)
}

// updateClaim writes a claim's spec or metadata through the CAS helper and
// remembers the write; nil, nil means the claim is gone or replaced.
func (r *pvController) updateClaim(ctx context.Context, c *kplanev1.PersistentVolumeClaim,
	mutate controller.Mutation[*kplanev1.PersistentVolumeClaim]) (*kplanev1.PersistentVolumeClaim, error) {
	got, wrote, err := controller.Update(ctx, r.api, c, mutate)
	if err != nil {
		return nil, err
	}
	if wrote {
		r.written.Wrote(wrap(got))
	}
	if isNilClaim(got) {
		return nil, nil
	}
	return got, nil
}

func (r *pvController) updateVolume(ctx context.Context, pv *kplanev1.PersistentVolume,
	mutate controller.Mutation[*kplanev1.PersistentVolume]) (*kplanev1.PersistentVolume, error) {
	got, wrote, err := controller.Update(ctx, r.api, pv, mutate)
	if err != nil {
		return nil, err
	}
	if wrote {
		r.written.Wrote(wrap(got))
	}
	if isNilVolume(got) {
		return nil, nil
	}
	return got, nil
}

func isNilClaim(c *kplanev1.PersistentVolumeClaim) bool { return c == nil || c.GetMetadata() == nil }
func isNilVolume(v *kplanev1.PersistentVolume) bool     { return v == nil || v.GetMetadata() == nil }

// bindUnbound finds (or provisions) a volume for a claim with no
// volumeName and binds them.
func (r *pvController) bindUnbound(ctx context.Context, c *kplanev1.PersistentVolumeClaim) error {
	obj := wrap(c)
	class := r.class(volume.ClaimClass(c))
	if name := volume.ClaimClass(c); name != "" && class == nil {
		// Static volumes of a class nobody defined still bind; only
		// provisioning needs the class.
		if pv := volume.BestMatch(c, r.allVolumes(), nil); pv != nil {
			return r.bind(ctx, c, pv)
		}
		r.recorder.Eventf(ctx, obj, record.Warning, reasonProvisioningFailed, "storageclass.storage.k8s.io %q not found", name)
		return nil
	}
	var node *kplanev1.Node
	selected := ""
	if class.GetVolumeBindingMode() == kplanev1.VolumeBindingWaitForFirstConsumer {
		selected = c.GetMetadata().GetAnnotations()[kplanev1.AnnotationSelectedNode]
		if selected == "" {
			// A volume pre-bound to the claim binds at once, as in Kubernetes.
			if pv := volume.BestMatch(c, r.allVolumes(), nil); pv != nil && pv.GetSpec().GetClaimRef() != nil {
				return r.bind(ctx, c, pv)
			}
			r.recorder.Eventf(ctx, obj, record.Normal, reasonWaitForFirstConsumer, "waiting for first consumer to be created before binding")
			return nil
		}
		o, ok := r.nodes.Store().GetByName("", selected)
		if !ok {
			return fmt.Errorf("claim %s/%s: selected node %q is not in the cache", c.GetMetadata().GetNamespace(), c.GetMetadata().GetName(), selected)
		}
		node = o.GetNode()
	}
	taken := map[string]bool{}
	for range raceAttempts {
		pvs := slices.DeleteFunc(r.allVolumes(), func(v *kplanev1.PersistentVolume) bool { return taken[v.GetMetadata().GetName()] })
		pv := volume.BestMatch(c, pvs, node)
		if pv == nil {
			break
		}
		err := r.bind(ctx, c, pv)
		if !errors.Is(err, errLostRace) {
			return err
		}
		taken[pv.GetMetadata().GetName()] = true
	}
	if len(taken) == raceAttempts {
		return fmt.Errorf("claim %s/%s: %d volumes in a row were taken by other claims", c.GetMetadata().GetNamespace(), c.GetMetadata().GetName(), raceAttempts)
	}
	switch {
	case class.GetProvisioner() == kplanev1.ProvisionerLocalPath:
		pv, err := r.provision(ctx, c, class, selected)
		if err != nil {
			r.recorder.Eventf(ctx, obj, record.Warning, reasonProvisioningFailed, "%v", err)
			return err
		}
		return r.bind(ctx, c, pv)
	case class != nil:
		r.recorder.Eventf(ctx, obj, record.Normal, reasonExternalProvisioning,
			"waiting for a volume to be created by the external provisioner %q", class.GetProvisioner())
	case volume.ClaimClass(c) == "":
		r.recorder.Eventf(ctx, obj, record.Normal, reasonFailedBinding, "no persistent volumes available for this claim and no storage class is set")
	}
	return nil
}

// syncBoundClaim finishes or checks the binding of a claim that names its
// volume (bound by pvctl, or pre-bound by a user).
func (r *pvController) syncBoundClaim(ctx context.Context, c *kplanev1.PersistentVolumeClaim) error {
	obj := wrap(c)
	name := c.GetSpec().GetVolumeName()
	pv, ok := r.cachedVolume(name)
	if !ok {
		// Check the apiserver before declaring the claim lost: the cache
		// may not have seen a volume that was just provisioned.
		got, err := client.PersistentVolumes(r.api).Get(ctx, "", name)
		switch {
		case client.IsNotFound(err):
			if c.GetStatus().GetPhase() == kplanev1.ClaimBound {
				r.recorder.Eventf(ctx, obj, record.Warning, reasonClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
				return r.setClaimStatus(ctx, c, kplanev1.ClaimLost, nil)
			}
			return nil // pre-bound to a volume that does not exist yet
		case err != nil:
			return fmt.Errorf("get volume %s: %w", name, err)
		}
		pv = got
	}
	switch {
	case pv.GetSpec().GetClaimRef() == nil:
		if ok, why := volume.Match(c, pv, nil); !ok {
			r.recorder.Eventf(ctx, obj, record.Warning, reasonFailedBinding, "volume %q does not fit the claim: %s", name, why)
			return nil
		}
		return r.bind(ctx, c, pv)
	case volume.ClaimRefers(pv, c):
		return r.bind(ctx, c, pv)
	}
	if c.GetStatus().GetPhase() == kplanev1.ClaimBound {
		r.recorder.Eventf(ctx, obj, record.Warning, reasonClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
		return r.setClaimStatus(ctx, c, kplanev1.ClaimLost, nil)
	}
	r.recorder.Eventf(ctx, obj, record.Warning, reasonFailedBinding, "volume %q already bound to a different claim", name)
	return nil
}

// bind binds claim and volume, each write idempotent: the volume's
// claimRef, the claim's volumeName, the volume's phase, the claim's
// status; then grows the volume when the claim asks for more.
func (r *pvController) bind(ctx context.Context, c *kplanev1.PersistentVolumeClaim, pv *kplanev1.PersistentVolume) error {
	cname, vname := c.GetMetadata().GetNamespace()+"/"+c.GetMetadata().GetName(), pv.GetMetadata().GetName()
	pv, err := r.updateVolume(ctx, pv, func(cur *kplanev1.PersistentVolume) *kplanev1.PersistentVolume {
		ref := cur.GetSpec().GetClaimRef()
		if ref != nil && (!volume.ClaimRefers(cur, c) || ref.GetUid() == c.GetMetadata().GetUid()) {
			return nil // taken by another claim, or already ours
		}
		if cur.GetMetadata().GetDeletionTimestamp() != nil {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolume)
		next.Spec.ClaimRef = &kplanev1.ObjectReference{
			Kind: kindPVC, ApiVersion: kplanev1.APIVersion(kindPVC), Namespace: c.GetMetadata().GetNamespace(),
			Name: c.GetMetadata().GetName(), Uid: c.GetMetadata().GetUid(), ResourceVersion: c.GetMetadata().GetResourceVersion(),
		}
		if ref == nil {
			setAnnotation(next.Metadata, kplanev1.AnnotationBoundByController, "yes")
		}
		return next
	})
	if err != nil {
		return err
	}
	if pv == nil {
		return fmt.Errorf("bind %s: volume %s is gone", cname, vname)
	}
	if ref := pv.GetSpec().GetClaimRef(); ref.GetUid() != c.GetMetadata().GetUid() || !volume.ClaimRefers(pv, c) {
		// Another claim won the race for this volume: look again.
		return fmt.Errorf("bind %s: volume %s was bound to %s/%s meanwhile: %w", cname, vname, ref.GetNamespace(), ref.GetName(), errLostRace)
	}
	if faultAfterClaimRef != nil {
		faultAfterClaimRef()
	}
	c, err = r.updateClaim(ctx, c, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
		if cur.GetSpec().GetVolumeName() != "" {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
		next.Spec.VolumeName = vname
		setAnnotation(next.Metadata, kplanev1.AnnotationBoundByController, "yes")
		return next
	})
	if err != nil || c == nil {
		return err // a claim gone meanwhile leaves a volume its reconcile releases
	}
	if c.GetSpec().GetVolumeName() != vname {
		// The claim got another volume; ours is undone by its reconcile.
		r.ctx.Enqueue(volumeKey(vname))
		return nil
	}
	if pv, err = r.setVolumePhase(ctx, pv, kplanev1.VolumeBound, ""); err != nil || pv == nil {
		return err
	}
	if pv, err = r.expand(ctx, c, pv); err != nil || pv == nil {
		return err
	}
	if c.GetStatus().GetPhase() != kplanev1.ClaimBound {
		r.bound.Add(1)
		r.log.Info("claim bound", "claim", cname, "volume", vname)
	}
	return r.setClaimStatus(ctx, c, kplanev1.ClaimBound, pv)
}

// expand grows a bound volume to its claim's request when the class
// allows expansion. A local-path volume is a directory with no size of its
// own, so growing it is writing the new capacity: there is no resize step.
func (r *pvController) expand(ctx context.Context, c *kplanev1.PersistentVolumeClaim, pv *kplanev1.PersistentVolume) (*kplanev1.PersistentVolume, error) {
	req, err := volume.Request(c)
	if err != nil {
		return pv, nil //nolint:nilerr // validation keeps requests parseable; nothing to grow to
	}
	capacity, err := volume.Capacity(pv)
	if err != nil || capacity.Cmp(req) >= 0 {
		return pv, nil //nolint:nilerr // as above
	}
	obj := wrap(c)
	class := r.class(volume.ClaimClass(c))
	if !class.GetAllowVolumeExpansion() {
		if c.GetStatus().GetPhase() == kplanev1.ClaimBound {
			r.recorder.Eventf(ctx, obj, record.Warning, reasonVolumeResizeFailed,
				"storage class %q does not allow volume expansion: the claim keeps %s", volume.ClaimClass(c), pv.GetSpec().GetCapacity()[kplanev1.ResourceStorage])
		}
		return pv, nil
	}
	want := c.GetSpec().GetResources().GetRequests()[kplanev1.ResourceStorage]
	pv, err = r.updateVolume(ctx, pv, func(cur *kplanev1.PersistentVolume) *kplanev1.PersistentVolume {
		if q, err := volume.Capacity(cur); err == nil && q.Cmp(req) >= 0 {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolume)
		next.Spec.Capacity[kplanev1.ResourceStorage] = want
		return next
	})
	if err == nil && pv != nil {
		r.recorder.Eventf(ctx, obj, record.Normal, reasonVolumeResizeSuccessful, "volume %s expanded to %s", pv.GetMetadata().GetName(), want)
	}
	return pv, err
}

func setAnnotation(m *kplanev1.ObjectMeta, k, v string) {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[k] = v
}

// setClaimStatus writes the claim's phase and, when bound, the volume's
// capacity and access modes.
func (r *pvController) setClaimStatus(ctx context.Context, c *kplanev1.PersistentVolumeClaim, phase string, pv *kplanev1.PersistentVolume) error {
	want := &kplanev1.PersistentVolumeClaimStatus{Phase: phase, Conditions: c.GetStatus().GetConditions()}
	if pv != nil {
		want.Capacity = pv.GetSpec().GetCapacity()
		want.AccessModes = pv.GetSpec().GetAccessModes()
	}
	got, wrote, err := controller.UpdateStatus(ctx, r.api, c, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
		w := proto.Clone(want).(*kplanev1.PersistentVolumeClaimStatus)
		w.Conditions = cur.GetStatus().GetConditions()
		if pv == nil {
			w.Capacity, w.AccessModes = cur.GetStatus().GetCapacity(), cur.GetStatus().GetAccessModes()
		}
		if proto.Equal(w, cur.GetStatus()) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
		next.Status = w
		return next
	})
	if wrote {
		r.written.Wrote(wrap(got))
	}
	return err
}

func (r *pvController) setVolumePhase(ctx context.Context, pv *kplanev1.PersistentVolume, phase, message string) (*kplanev1.PersistentVolume, error) {
	got, wrote, err := controller.UpdateStatus(ctx, r.api, pv, func(cur *kplanev1.PersistentVolume) *kplanev1.PersistentVolume {
		if cur.GetStatus().GetPhase() == phase && cur.GetStatus().GetMessage() == message {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolume)
		next.Status = &kplanev1.PersistentVolumeStatus{Phase: phase, Message: message}
		return next
	})
	if err != nil {
		return nil, err
	}
	if wrote {
		r.written.Wrote(wrap(got))
	}
	if isNilVolume(got) {
		return nil, nil
	}
	return got, nil
}

// releaseClaimProtection removes the pvc-protection finalizer of a claim
// being deleted once no pod that may still run uses it. The pod cache
// may lag behind a pod just created, so "unused" is confirmed with a live
// list, as Kubernetes' PVC protection controller does.
func (r *pvController) releaseClaimProtection(ctx context.Context, c *kplanev1.PersistentVolumeClaim) error {
	if !slices.Contains(c.GetMetadata().GetFinalizers(), kplanev1.FinalizerPVCProtection) {
		return nil
	}
	ns, name := c.GetMetadata().GetNamespace(), c.GetMetadata().GetName()
	cached, err := r.pods.Store().ByIndex(podClaimIndex, kplanev1.MetaKey(ns, name))
	if err != nil {
		return fmt.Errorf("pods of claim %s/%s: %w", ns, name, err)
	}
	if inUse(cached, name) {
		return nil // a pod event requeues the claim
	}
	live, _, err := client.Pods(r.api).List(ctx, ns, client.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods of %s: %w", ns, err)
	}
	objs := make([]*kplanev1.Object, 0, len(live))
	for _, p := range live {
		objs = append(objs, wrap(p))
	}
	if inUse(objs, name) {
		return nil
	}
	_, err = r.updateClaim(ctx, c, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
		if !slices.Contains(cur.GetMetadata().GetFinalizers(), kplanev1.FinalizerPVCProtection) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
		next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == kplanev1.FinalizerPVCProtection })
		return next
	})
	return err
}

// inUse reports whether one of pods that is not terminated uses claim.
func inUse(pods []*kplanev1.Object, claim string) bool {
	for _, o := range pods {
		p := o.GetPod()
		if apiutil.IsPodTerminal(p) {
			continue
		}
		if slices.Contains(volume.PodClaims(p), claim) {
			return true
		}
	}
	return false
}

// ---- provisioning

// provision makes a local-path volume for claim: a directory under the
// storage root and a PersistentVolume pre-bound to the claim. Its name
// comes from the claim's uid, so a retry after a crash finds the volume
// it made rather than making a second. With WaitForFirstConsumer, node is
// where the first consumer was scheduled and the volume is pinned there.
func (r *pvController) provision(ctx context.Context, c *kplanev1.PersistentVolumeClaim, class *kplanev1.StorageClass, node string) (*kplanev1.PersistentVolume, error) {
	name := "pvc-" + c.GetMetadata().GetUid()
	dir := filepath.Join(r.storageRoot, name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("provision volume for claim %s/%s: %w", c.GetMetadata().GetNamespace(), c.GetMetadata().GetName(), err)
	}
	// 0777: the directory is the pods' to write, whatever user they run as.
	if err := os.Chmod(dir, 0o777); err != nil { //nolint:gosec // a volume is shared storage, as local-path provisioners make it
		return nil, fmt.Errorf("provision volume for claim %s/%s: %w", c.GetMetadata().GetNamespace(), c.GetMetadata().GetName(), err)
	}
	pv := &kplanev1.PersistentVolume{
		Metadata: &kplanev1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kplanev1.AnnotationProvisionedBy: kplanev1.ProvisionerLocalPath},
			Finalizers:  []string{kplanev1.FinalizerPVProtection},
		},
		Spec: &kplanev1.PersistentVolumeSpec{
			Capacity:                      map[string]string{kplanev1.ResourceStorage: c.GetSpec().GetResources().GetRequests()[kplanev1.ResourceStorage]},
			AccessModes:                   c.GetSpec().GetAccessModes(),
			PersistentVolumeReclaimPolicy: class.GetReclaimPolicy(),
			StorageClassName:              class.GetMetadata().GetName(),
			VolumeMode:                    c.GetSpec().GetVolumeMode(),
			HostPath:                      &kplanev1.HostPathVolumeSource{Path: dir, Type: "DirectoryOrCreate"},
			MountOptions:                  class.GetMountOptions(),
			ClaimRef: &kplanev1.ObjectReference{
				Kind: kindPVC, ApiVersion: kplanev1.APIVersion(kindPVC), Namespace: c.GetMetadata().GetNamespace(),
				Name: c.GetMetadata().GetName(), Uid: c.GetMetadata().GetUid(),
			},
		},
	}
	if node != "" {
		pv.Spec.NodeAffinity = volume.HostnameAffinity(node)
	}
	created, err := client.PersistentVolumes(r.api).Create(ctx, pv)
	switch {
	case client.IsAlreadyExists(err):
		got, err := client.PersistentVolumes(r.api).Get(ctx, "", name)
		if err != nil {
			return nil, fmt.Errorf("get provisioned volume %s: %w", name, err)
		}
		return got, nil
	case err != nil:
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	r.written.Wrote(wrap(created))
	r.provisioned.Add(1)
	r.log.Info("volume provisioned", "volume", name, "claim", c.GetMetadata().GetNamespace()+"/"+c.GetMetadata().GetName(), "path", dir, "node", node)
	r.recorder.Eventf(ctx, wrap(c), record.Normal, reasonProvisioningSucceeded, "Successfully provisioned volume %s", name)
	return created, nil
}

// ---- volumes

func (r *pvController) syncVolume(ctx context.Context, name string) error {
	pv, ok := r.cachedVolume(name)
	if !ok {
		return nil
	}
	if pv.GetMetadata().GetDeletionTimestamp() != nil {
		return r.releaseVolumeProtection(ctx, pv)
	}
	pv, err := r.updateVolume(ctx, pv, func(cur *kplanev1.PersistentVolume) *kplanev1.PersistentVolume {
		if slices.Contains(cur.GetMetadata().GetFinalizers(), kplanev1.FinalizerPVProtection) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolume)
		next.Metadata.Finalizers = append(next.Metadata.Finalizers, kplanev1.FinalizerPVProtection)
		return next
	})
	if err != nil || pv == nil {
		return err
	}
	ref := pv.GetSpec().GetClaimRef()
	if ref == nil {
		_, err := r.setVolumePhase(ctx, pv, kplanev1.VolumeAvailable, "")
		return err
	}
	c, err := r.claimOf(ctx, ref)
	if err != nil {
		return err
	}
	switch {
	case c == nil && ref.GetUid() == "":
		// Pre-bound by a user to a claim that does not exist yet.
		_, err := r.setVolumePhase(ctx, pv, kplanev1.VolumeAvailable, "")
		return err
	case c == nil:
		return r.reclaim(ctx, pv)
	case ref.GetUid() == "" || c.GetSpec().GetVolumeName() == "":
		// Binding in progress (or cut short by a crash): the claim's
		// reconcile finishes it.
		r.ctx.Enqueue(claimKey(c.GetMetadata().GetNamespace(), c.GetMetadata().GetName()))
		if pv.GetStatus().GetPhase() == kplanev1.VolumePending || pv.GetStatus().GetPhase() == "" {
			_, err := r.setVolumePhase(ctx, pv, kplanev1.VolumeAvailable, "")
			return err
		}
		return nil
	case c.GetSpec().GetVolumeName() == name:
		_, err := r.setVolumePhase(ctx, pv, kplanev1.VolumeBound, "")
		return err
	}
	// The claim is bound to another volume. Undo our binding only when
	// this controller made it; a user's pre-binding stays.
	if pv.GetMetadata().GetAnnotations()[kplanev1.AnnotationBoundByController] != "yes" {
		return nil
	}
	r.log.Info("unbinding volume whose claim is bound elsewhere", "volume", name, "claim", ref.GetNamespace()+"/"+ref.GetName())
	pv, err = r.updateVolume(ctx, pv, func(cur *kplanev1.PersistentVolume) *kplanev1.PersistentVolume {
		if !proto.Equal(cur.GetSpec().GetClaimRef(), ref) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolume)
		next.Spec.ClaimRef = nil
		delete(next.Metadata.Annotations, kplanev1.AnnotationBoundByController)
		return next
	})
	if err != nil || pv == nil {
		return err
	}
	_, err = r.setVolumePhase(ctx, pv, kplanev1.VolumeAvailable, "")
	return err
}

// claimOf is the claim a claimRef names, or nil when it no longer exists
// (gone, or replaced by a namesake with another uid). The cache saying
// "gone" is confirmed with the apiserver: a wrong "gone" would release
// the volume and, with Delete, remove its data.
func (r *pvController) claimOf(ctx context.Context, ref *kplanev1.ObjectReference) (*kplanev1.PersistentVolumeClaim, error) {
	c, ok := r.cachedClaim(ref.GetNamespace(), ref.GetName())
	if !ok || (ref.GetUid() != "" && c.GetMetadata().GetUid() != ref.GetUid()) {
		got, err := client.PersistentVolumeClaims(r.api).Get(ctx, ref.GetNamespace(), ref.GetName())
		switch {
		case client.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("get claim %s/%s: %w", ref.GetNamespace(), ref.GetName(), err)
		}
		c = got
	}
	if ref.GetUid() != "" && c.GetMetadata().GetUid() != ref.GetUid() {
		return nil, nil
	}
	return c, nil
}

// reclaim acts on a volume whose claim is gone: Released, then the
// reclaim policy. Retain keeps the volume and its data; Delete removes a
// local-path volume's directory and the volume.
func (r *pvController) reclaim(ctx context.Context, pv *kplanev1.PersistentVolume) error {
	name := pv.GetMetadata().GetName()
	ph := pv.GetStatus().GetPhase()
	if ph == kplanev1.VolumeFailed {
		return nil
	}
	if ph != kplanev1.VolumeReleased {
		var err error
		if pv, err = r.setVolumePhase(ctx, pv, kplanev1.VolumeReleased, ""); err != nil || pv == nil {
			return err
		}
		r.log.Info("volume released", "volume", name, "policy", pv.GetSpec().GetPersistentVolumeReclaimPolicy())
	}
	switch pv.GetSpec().GetPersistentVolumeReclaimPolicy() {
	case kplanev1.ReclaimRetain:
		return nil
	case kplanev1.ReclaimDelete:
		return r.deleteVolume(ctx, pv)
	}
	msg := "Recycle is not supported: the volume is kept; delete it by hand"
	r.recorder.Eventf(ctx, wrap(pv), record.Warning, "VolumeFailedRecycle", "%s", msg)
	_, err := r.setVolumePhase(ctx, pv, kplanev1.VolumeFailed, msg)
	return err
}

func (r *pvController) deleteVolume(ctx context.Context, pv *kplanev1.PersistentVolume) error {
	name := pv.GetMetadata().GetName()
	dir, err := r.localPathDir(pv)
	if err != nil {
		r.recorder.Eventf(ctx, wrap(pv), record.Warning, reasonVolumeFailedDelete, "%v", err)
		_, err := r.setVolumePhase(ctx, pv, kplanev1.VolumeFailed, err.Error())
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		r.recorder.Eventf(ctx, wrap(pv), record.Warning, reasonVolumeFailedDelete, "remove %s: %v", dir, err)
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	_, deleted, err := controller.DeleteIfSameUID(ctx, r.api, wrap(pv), client.DeleteOptions{})
	if err != nil {
		return err
	}
	if deleted {
		r.deleted.Add(1)
		r.log.Info("volume deleted", "volume", name, "path", dir)
		r.recorder.Eventf(ctx, wrap(pv), record.Normal, reasonVolumeDeleted, "volume %s and its directory %s deleted", name, dir)
	}
	return nil
}

// errLostRace says another claim was bound to the volume first.
var errLostRace = errors.New("lost the race for the volume")

// errNoDeleter says a volume with the Delete policy is not one pvctl made.
var errNoDeleter = errors.New("no deleter for this volume: only kplane.io/local-path volumes under --storage-root are deleted")

// localPathDir is the directory of a volume this provisioner made, checked
// to lie directly under the storage root (a volume edited to point
// elsewhere is never removed).
func (r *pvController) localPathDir(pv *kplanev1.PersistentVolume) (string, error) {
	if pv.GetMetadata().GetAnnotations()[kplanev1.AnnotationProvisionedBy] != kplanev1.ProvisionerLocalPath {
		return "", errNoDeleter
	}
	dir := filepath.Clean(pv.GetSpec().GetHostPath().GetPath())
	if filepath.Dir(dir) != filepath.Clean(r.storageRoot) || filepath.Base(dir) != pv.GetMetadata().GetName() {
		return "", fmt.Errorf("%w (path %q)", errNoDeleter, dir)
	}
	return dir, nil
}

// releaseVolumeProtection removes the pv-protection finalizer of a volume
// being deleted once no claim is bound to it.
func (r *pvController) releaseVolumeProtection(ctx context.Context, pv *kplanev1.PersistentVolume) error {
	if !slices.Contains(pv.GetMetadata().GetFinalizers(), kplanev1.FinalizerPVProtection) {
		return nil
	}
	if ref := pv.GetSpec().GetClaimRef(); ref != nil && pv.GetStatus().GetPhase() == kplanev1.VolumeBound {
		c, err := r.claimOf(ctx, ref)
		if err != nil {
			return err
		}
		if c != nil && c.GetSpec().GetVolumeName() == pv.GetMetadata().GetName() {
			return nil // the claim's deletion requeues the volume
		}
	}
	_, err := r.updateVolume(ctx, pv, func(cur *kplanev1.PersistentVolume) *kplanev1.PersistentVolume {
		if !slices.Contains(cur.GetMetadata().GetFinalizers(), kplanev1.FinalizerPVProtection) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.PersistentVolume)
		next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == kplanev1.FinalizerPVProtection })
		return next
	})
	return err
}
