package main

import (
	"context"
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The storage part of the workload: claims racing for a smaller pool of
// static volumes while pvctl (and the apiserver) are killed. The volumes
// are cluster-scoped, so their names carry the namespace.
const (
	chaosVolumes = 6
	chaosClaims  = 9
	chaosClass   = "chaos-static"
)

func chaosVolumeName(ns string, i int) string { return fmt.Sprintf("%s-pv-%d", ns, i) }

// setupStorage creates the volumes and the claims, retrying until the
// cluster answers (nothing has been killed yet).
func (w *workload) setupStorage(ctx context.Context) error {
	ignoreExists := func(err error) error {
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	}
	for i := range chaosVolumes {
		pv := kplanev1.MustWrap(&kplanev1.PersistentVolume{
			Metadata: &kplanev1.ObjectMeta{Name: chaosVolumeName(w.ns, i), Labels: map[string]string{labelChaos: w.ns}},
			Spec: &kplanev1.PersistentVolumeSpec{
				Capacity: map[string]string{kplanev1.ResourceStorage: "1Gi"}, AccessModes: []string{kplanev1.ReadWriteOnce},
				StorageClassName: chaosClass, PersistentVolumeReclaimPolicy: kplanev1.ReclaimRetain,
				HostPath: &kplanev1.HostPathVolumeSource{Path: "/tmp/" + chaosVolumeName(w.ns, i)},
			},
		})
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := w.api.Create(ctx, &kplanev1.CreateRequest{Object: pv})
			return ignoreExists(err)
		}); err != nil {
			return fmt.Errorf("create volume %d: %w", i, err)
		}
	}
	class := chaosClass
	for i := range chaosClaims {
		c := kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{
			Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("chaos-claim-%d", i), Namespace: w.ns, Labels: map[string]string{labelChaos: "true"}},
			Spec: &kplanev1.PersistentVolumeClaimSpec{
				AccessModes:      []string{kplanev1.ReadWriteOnce},
				Resources:        &kplanev1.ResourceRequirements{Requests: map[string]string{kplanev1.ResourceStorage: "1Gi"}},
				StorageClassName: &class,
			},
		})
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := w.api.Create(ctx, &kplanev1.CreateRequest{Object: c})
			return ignoreExists(err)
		}); err != nil {
			return fmt.Errorf("create claim %d: %w", i, err)
		}
	}
	return nil
}

// checkStorage: no volume is bound to two claims, no claim to a missing
// volume, both sides of every binding agree, and every volume of the pool
// is bound (there are more claims than volumes).
func checkStorage(volumes []*kplanev1.PersistentVolume, claims []*kplanev1.PersistentVolumeClaim) []string {
	var out []string
	pvs := map[string]*kplanev1.PersistentVolume{}
	for _, v := range volumes {
		pvs[v.GetMetadata().GetName()] = v
	}
	holders := map[string][]string{}
	for _, c := range claims {
		name := c.GetSpec().GetVolumeName()
		if name == "" {
			continue
		}
		holders[name] = append(holders[name], c.GetMetadata().GetName())
		v, ok := pvs[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("claim %s is bound to volume %s, which does not exist", c.GetMetadata().GetName(), name))
		case v.GetSpec().GetClaimRef().GetUid() != c.GetMetadata().GetUid():
			out = append(out, fmt.Sprintf("claim %s names volume %s, whose claimRef is %v", c.GetMetadata().GetName(), name, v.GetSpec().GetClaimRef()))
		case c.GetStatus().GetPhase() != kplanev1.ClaimBound || v.GetStatus().GetPhase() != kplanev1.VolumeBound:
			out = append(out, fmt.Sprintf("claim %s (%s) and volume %s (%s) are not both Bound",
				c.GetMetadata().GetName(), c.GetStatus().GetPhase(), name, v.GetStatus().GetPhase()))
		}
	}
	for name, cs := range holders {
		if len(cs) > 1 {
			sort.Strings(cs)
			out = append(out, fmt.Sprintf("volume %s is bound to %d claims: %v", name, len(cs), cs))
		}
	}
	for _, v := range volumes {
		if len(holders[v.GetMetadata().GetName()]) == 0 {
			out = append(out, fmt.Sprintf("volume %s is not bound, with claims still pending", v.GetMetadata().GetName()))
		}
	}
	return out
}

// takeStorage lists the workload's volumes and claims.
func takeStorage(ctx context.Context, api kplanev1.ResourcesClient, ns string, s *snapshot) error {
	items, err := list(ctx, api, "PersistentVolume", "")
	if err != nil {
		return err
	}
	for _, o := range items {
		if o.Meta().GetLabels()[labelChaos] == ns {
			s.volumes = append(s.volumes, o.GetPersistentVolume())
		}
	}
	if items, err = list(ctx, api, "PersistentVolumeClaim", ns); err != nil {
		return err
	}
	for _, o := range items {
		s.claims = append(s.claims, o.GetPersistentVolumeClaim())
	}
	return nil
}

// cleanupStorage deletes the workload's claims and volumes.
func cleanupStorage(ctx context.Context, api kplanev1.ResourcesClient, ns string) {
	if items, err := list(ctx, api, "PersistentVolumeClaim", ns); err == nil {
		for _, o := range items {
			_, _ = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "PersistentVolumeClaim", Namespace: ns, Name: o.Meta().GetName()})
		}
	}
	for i := range chaosVolumes {
		_, _ = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "PersistentVolume", Name: chaosVolumeName(ns, i)})
	}
}
