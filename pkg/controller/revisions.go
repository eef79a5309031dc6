package controller

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/rollout"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ErrRevisionCollision is returned by Revisions.Sync when the name of the
// template's revision is taken by an object that is not that revision:
// the owner's collisionCount must go up, and the next sync tries the next
// name.
var ErrRevisionCollision = errors.New("revision name is taken by another object")

// Revisions keeps the ControllerRevision history of the owners of one
// kind (StatefulSets, DaemonSets): the snapshot of each template an owner
// has run, numbered, reused when a template comes back (a rollback), and
// pruned to the owner's revisionHistoryLimit.
type Revisions struct {
	API       kplanev1.ResourcesClient
	Informer  *informer.Informer // of ControllerRevision
	OwnerKind string
	// Written, when set, is consulted for revisions this controller wrote
	// that the cache does not show yet, and told about new writes.
	Written *MutationCache
}

// Owned returns the revisions owner controls.
func (h *Revisions) Owned(owner *kplanev1.Object) []*kplanev1.ControllerRevision {
	uid := owner.Meta().GetUid()
	objs, _ := h.Informer.Store().ByIndex(informer.OwnerUIDIndex, uid)
	var out []*kplanev1.ControllerRevision
	for _, o := range objs {
		if IsControlledBy(o, uid) {
			if h.Written != nil {
				o = h.Written.Newest(o)
			}
			out = append(out, o.GetControllerRevision())
		}
	}
	return out
}

// Sync returns the revision of template t for owner: an existing one
// with an equal snapshot (renumbered to be the newest when it is not, as
// Kubernetes does when a rollback brings an old template back), or a new
// one numbered after the newest. collision is the owner's
// status.collisionCount. The error wraps ErrRevisionCollision when the
// name is taken by a foreign object.
func (h *Revisions) Sync(ctx context.Context, owner *kplanev1.Object, t *kplanev1.PodTemplateSpec, collision *int32) (*kplanev1.ControllerRevision, error) {
	revs := h.Owned(owner)
	maxRev := rollout.MaxRevisionNumber(revs)
	var update *kplanev1.ControllerRevision
	for _, cr := range revs {
		if rollout.SameTemplate(cr, t) {
			update = cr
		}
	}
	if update != nil {
		if update.GetRevision() >= maxRev {
			return update, nil
		}
		got, _, err := Update(ctx, h.API, update, func(cur *kplanev1.ControllerRevision) *kplanev1.ControllerRevision {
			next := proto.Clone(cur).(*kplanev1.ControllerRevision)
			next.Revision = maxRev + 1
			return next
		})
		if err != nil {
			return nil, err
		}
		if got == nil {
			return nil, fmt.Errorf("revision %s is gone; will look again", update.GetMetadata().GetName())
		}
		h.wrote(kplanev1.MustWrap(got))
		return got, nil
	}
	cr := rollout.NewRevision(h.OwnerKind, owner.Meta(), t, maxRev+1, collision)
	resp, err := h.API.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(cr)})
	switch {
	case err == nil:
		h.wrote(resp.GetObject())
		return resp.GetObject().GetControllerRevision(), nil
	case !client.IsAlreadyExists(err):
		return nil, fmt.Errorf("create revision %s: %w", cr.Metadata.Name, err)
	}
	got, err := h.API.Get(ctx, &kplanev1.GetRequest{Kind: "ControllerRevision", Namespace: cr.Metadata.Namespace, Name: cr.Metadata.Name})
	if err != nil {
		return nil, fmt.Errorf("read revision %s: %w", cr.Metadata.Name, err)
	}
	if g := got.GetObject(); IsControlledBy(g, owner.Meta().GetUid()) && rollout.SameTemplate(g.GetControllerRevision(), t) {
		return g.GetControllerRevision(), nil // ours; the cache had not shown it yet
	}
	return nil, fmt.Errorf("%s: %w", cr.Metadata.Name, ErrRevisionCollision)
}

// Prune deletes the owner's revisions beyond limit that are not in live
// (the current and update revisions, and any a pod still runs).
func (h *Revisions) Prune(ctx context.Context, owner *kplanev1.Object, live map[string]bool, limit int32) error {
	var errs []error
	for _, cr := range rollout.StaleRevisions(h.Owned(owner), live, limit) {
		if _, _, err := DeleteIfSameUID(ctx, h.API, kplanev1.MustWrap(cr), client.DeleteOptions{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (h *Revisions) wrote(o *kplanev1.Object) {
	if h.Written != nil {
		h.Written.Wrote(o)
	}
}
