package scheduler

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// Volume binding, as Kubernetes' VolumeBinding plugin: a pod whose claims
// use a WaitForFirstConsumer class is placed first, on a node where the
// bound volumes' node affinity admits it and where each unbound claim can
// get a volume; then, instead of binding the pod, the scheduler writes the
// chosen node on the claims (volume.kubernetes.io/selected-node) and waits:
// pvctl binds or provisions there, and the claim's update brings the pod
// back, now with every claim bound, to be bound to that node.

// volumeCaches are the scheduler's informers of the storage kinds.
type volumeCaches struct {
	claims, volumes, classes *informer.Informer
}

// setupVolumes adds the storage informers; any change of a claim, volume
// or class may make a waiting pod schedulable.
func (s *Scheduler) setupVolumes(c *app.Context) {
	s.vol = &volumeCaches{
		claims:  c.Informers.ForKind("PersistentVolumeClaim"),
		volumes: c.Informers.ForKind("PersistentVolume"),
		classes: c.Informers.ForKind("StorageClass"),
	}
	h := informer.Handler{
		OnAdd:    func(*kplanev1.Object) { s.moveAll("storage changed") },
		OnUpdate: func(_, _ *kplanev1.Object) { s.moveAll("storage changed") },
	}
	s.vol.claims.AddEventHandler(h)
	s.vol.volumes.AddEventHandler(h)
	s.vol.classes.AddEventHandler(h)
}

// podVolumes resolves the pod's claims for the volume binding filter. A
// non-empty message means the pod cannot be scheduled at all yet (a
// claim missing, being deleted, or an Immediate claim not bound).
func (s *Scheduler) podVolumes(pod *kplanev1.Pod) (*core.PodVolumes, string) {
	names := volume.PodClaims(pod)
	if len(names) == 0 || s.vol == nil {
		return nil, ""
	}
	ns := pod.GetMetadata().GetNamespace()
	out := &core.PodVolumes{}
	for _, name := range names {
		o, ok := s.vol.claims.Store().GetByName(ns, name)
		if !ok {
			return nil, fmt.Sprintf("persistentvolumeclaim %q not found", name)
		}
		c := o.GetPersistentVolumeClaim()
		if c.GetMetadata().GetDeletionTimestamp() != nil {
			return nil, fmt.Sprintf("persistentvolumeclaim %q is being deleted", name)
		}
		if vn := c.GetSpec().GetVolumeName(); vn != "" {
			pv, ok := s.vol.volumes.Store().GetByName("", vn)
			if !ok {
				return nil, fmt.Sprintf("persistentvolume %q of claim %q not found", vn, name)
			}
			out.Bound = append(out.Bound, pv.GetPersistentVolume())
			continue
		}
		var class *kplanev1.StorageClass
		if cn := volume.ClaimClass(c); cn != "" {
			if co, ok := s.vol.classes.Store().GetByName("", cn); ok {
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
		for _, vo := range s.vol.volumes.Store().List() {
			if ok, _ := volume.Match(c, vo.GetPersistentVolume(), nil); ok {
				u.Candidates = append(u.Candidates, vo.GetPersistentVolume())
			}
		}
		out.Unbound = append(out.Unbound, u)
	}
	return out, ""
}

// knownNodes counts the nodes that exist (for "0/N nodes are available").
func (s *Scheduler) knownNodes() int {
	n := 0
	for _, ns := range s.cache.Summary() {
		if ns.Known {
			n++
		}
	}
	return n
}

// selectNodeForClaims writes the chosen node on the pod's unbound
// claims instead of binding the pod, forgets the assumed pod and parks it
// until a claim changes. It reports whether it took the task (the pod had
// unbound claims).
func (s *Scheduler) selectNodeForClaims(ctx context.Context, t *term, b bindTask) bool {
	v := b.info.Volumes
	if v == nil || len(v.Unbound) == 0 {
		return false
	}
	key, uid := b.obj.Key(), b.info.UID
	if s.cache.Forget(uid) {
		s.moveAll("room held for a pod waiting for its volumes is free")
	}
	s.mu.Lock()
	moves := s.moves
	s.mu.Unlock()
	for _, u := range v.Unbound {
		_, _, err := controller.Update(ctx, s.api, u.Claim, func(cur *kplanev1.PersistentVolumeClaim) *kplanev1.PersistentVolumeClaim {
			if cur.GetSpec().GetVolumeName() != "" || cur.GetMetadata().GetAnnotations()[kplanev1.AnnotationSelectedNode] != "" {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.PersistentVolumeClaim)
			if next.Metadata.Annotations == nil {
				next.Metadata.Annotations = map[string]string{}
			}
			next.Metadata.Annotations[kplanev1.AnnotationSelectedNode] = b.node
			return next
		})
		if err != nil {
			s.log.Warn("could not select a node for a claim; will retry", "pod", key, "claim", u.Claim.GetMetadata().GetName(), "error", err)
			s.retryLater(t, key, uid)
			return true
		}
	}
	s.log.Debug("node selected for the pod's claims; waiting for them to be bound", "pod", key, "node", b.node)
	s.mu.Lock()
	if p := s.pending[key]; p != nil && p.uid == uid {
		if s.moves != moves {
			t.queue.AddAfter(key, s.backoffLeftLocked(p))
		} else {
			p.unschedulable = true
		}
	}
	s.mu.Unlock()
	return true
}
