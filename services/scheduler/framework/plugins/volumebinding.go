package plugins

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// VolumeBinding is Kubernetes' VolumeBinding plugin: PreFilter resolves
// the pod's claims (a missing, deleting or unbound Immediate claim makes
// the pod unschedulable everywhere), Filter admits a node where the bound
// volumes' node affinity allows it and each unbound WaitForFirstConsumer
// claim can get a volume, and PreBind writes the chosen node on those
// claims (volume.kubernetes.io/selected-node) and holds the pod (Pending):
// pvctl binds or provisions there, and the claim's update brings the pod
// back, every claim bound, to be bound to that node.
type VolumeBinding struct {
	h                        framework.Handle
	claims, volumes, classes *informer.Informer
}

// NewVolumeBinding returns the plugin on h's informers.
func NewVolumeBinding(h framework.Handle) *VolumeBinding {
	v := &VolumeBinding{h: h}
	if h != nil {
		v.claims = h.Informer("PersistentVolumeClaim")
		v.volumes = h.Informer("PersistentVolume")
		v.classes = h.Informer("StorageClass")
	}
	return v
}

// Name implements framework.Plugin.
func (*VolumeBinding) Name() string { return VolumeBindingName }

// PreFilter implements framework.PreFilterPlugin. It records the claims
// on pod.Volumes; a pod without claims skips the Filter.
func (v *VolumeBinding) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	names := volume.PodClaims(pod.Pod)
	if len(names) == 0 || v.claims == nil {
		return framework.NewStatus(framework.Skip)
	}
	vols, why := v.resolve(pod.Pod, names)
	if why != "" {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, why)
	}
	pod.Volumes = vols
	return nil
}

func (v *VolumeBinding) resolve(pod *kplanev1.Pod, names []string) (*core.PodVolumes, string) {
	ns := pod.GetMetadata().GetNamespace()
	out := &core.PodVolumes{}
	for _, name := range names {
		o, ok := v.claims.Store().GetByName(ns, name)
		if !ok {
			return nil, fmt.Sprintf("persistentvolumeclaim %q not found", name)
		}
		c := o.GetPersistentVolumeClaim()
		if c.GetMetadata().GetDeletionTimestamp() != nil {
			return nil, fmt.Sprintf("persistentvolumeclaim %q is being deleted", name)
		}
		if vn := c.GetSpec().GetVolumeName(); vn != "" {
			pv, ok := v.volumes.Store().GetByName("", vn)
			if !ok {
				return nil, fmt.Sprintf("persistentvolume %q of claim %q not found", vn, name)
			}
			out.Bound = append(out.Bound, pv.GetPersistentVolume())
			continue
		}
		var class *kplanev1.StorageClass
		if cn := volume.ClaimClass(c); cn != "" {
			if co, ok := v.classes.Store().GetByName("", cn); ok {
				class = co.GetStorageClass()
			}
		}
		if class.GetVolumeBindingMode() != kplanev1.VolumeBindingWaitForFirstConsumer {
			return nil, core.ReasonUnboundImmediate
		}
		u := core.UnboundClaim{
			Claim:        c,
			CanProvision: class.GetProvisioner() == kplanev1.ProvisionerLocalPath,
			SelectedNode: c.GetMetadata().GetAnnotations()[kplanev1.AnnotationSelectedNode],
		}
		for _, vo := range v.volumes.Store().List() {
			if ok, _ := volume.Match(c, vo.GetPersistentVolume(), nil); ok {
				u.Candidates = append(u.Candidates, vo.GetPersistentVolume())
			}
		}
		out.Unbound = append(out.Unbound, u)
	}
	return out, ""
}

// Filter implements framework.FilterPlugin.
func (*VolumeBinding) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	return status(core.FilterVolumes(pod, node))
}

// PreBind implements framework.PreBindPlugin: with unbound claims it
// writes the node on them and returns Pending.
func (v *VolumeBinding) PreBind(ctx context.Context, _ *framework.CycleState, pod *framework.PodInfo, nodeName string) *framework.Status {
	vols := pod.Volumes
	if vols == nil || len(vols.Unbound) == 0 {
		return nil
	}
	for _, u := range vols.Unbound {
		_, _, err := controller.Update(ctx, v.h.Client(), u.Claim, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
			if cur.GetSpec().GetVolumeName() != "" || cur.GetMetadata().GetAnnotations()[kplanev1.AnnotationSelectedNode] != "" {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
			if next.Metadata.Annotations == nil {
				next.Metadata.Annotations = map[string]string{}
			}
			next.Metadata.Annotations[kplanev1.AnnotationSelectedNode] = nodeName
			return next
		})
		if err != nil {
			return framework.AsStatus(fmt.Errorf("select node %s for claim %s: %w", nodeName, u.Claim.GetMetadata().GetName(), err))
		}
	}
	return framework.NewStatus(framework.Pending, "waiting for the pod's volumes to be bound")
}

// DefaultBinder binds a pod by writing spec.nodeName with a conditional
// Update on the resourceVersion the decision was made on, so a pod
// changed meanwhile is not bound blindly (a Conflict: decide again).
type DefaultBinder struct{ h framework.Handle }

// Name implements framework.Plugin.
func (DefaultBinder) Name() string { return DefaultBinderName }

// Bind implements framework.BindPlugin.
func (b DefaultBinder) Bind(ctx context.Context, _ *framework.CycleState, pod *framework.PodInfo, nodeName string) *framework.Status {
	p := proto.Clone(pod.Pod).(*kplanev1.Pod)
	p.Spec.NodeName = nodeName
	if _, err := b.h.Client().Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(p)}); err != nil {
		return framework.AsStatus(err)
	}
	return nil
}
