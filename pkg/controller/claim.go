package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Claim settles which of candidates the owner controls, as Kubernetes'
// ControllerRefManager does: an object it controls stays its own while
// match accepts it (or while it is being deleted), and is released (its
// owner reference removed) otherwise; an orphan that match accepts is
// adopted (ref appended), after the owner is re-read from the apiserver
// once, because a cached owner may already be deleted or replaced by a
// namesake and adopting for it would hand the object to the garbage
// collector. Objects controlled by someone else are left alone. Every
// write is a compare-and-swap that decides again on the fresh object.
//
// It returns the objects the owner controls afterwards; an error means
// some adoption or release is unsettled, and the caller should retry
// rather than act on a guess.
func Claim(ctx context.Context, api kplanev1.ResourcesClient, owner *kplanev1.Object, ref *kplanev1.OwnerReference,
	candidates []*kplanev1.Object, match func(*kplanev1.Object) bool) ([]*kplanev1.Object, error) {
	uid := owner.Meta().GetUid()
	var owned, orphans, release []*kplanev1.Object
	for _, o := range candidates {
		switch {
		case IsControlledBy(o, uid):
			if match(o) || o.Meta().GetDeletionTimestamp() != nil {
				owned = append(owned, o)
			} else {
				release = append(release, o)
			}
		case ControllerRef(o.Meta()) == nil && o.Meta().GetDeletionTimestamp() == nil && match(o):
			orphans = append(orphans, o)
		}
	}
	if len(orphans) > 0 {
		m := owner.Meta()
		resp, err := api.Get(ctx, &kplanev1.GetRequest{Kind: owner.KindName(), Namespace: m.GetNamespace(), Name: m.GetName()})
		if err != nil {
			return owned, fmt.Errorf("recheck %s %s before adopting: %w", owner.KindName(), owner.Key(), err)
		}
		if fresh := resp.GetObject().Meta(); fresh.GetUid() != uid || fresh.GetDeletionTimestamp() != nil {
			return owned, fmt.Errorf("%s %s changed before adopting; will look again", owner.KindName(), owner.Key())
		}
	}
	var errs []error
	for _, o := range orphans {
		got, _, err := Update(ctx, api, o, func(cur *kplanev1.Object) *kplanev1.Object {
			if ControllerRef(cur.Meta()) != nil || !match(cur) {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.Object)
			next.Meta().OwnerReferences = append(next.Meta().OwnerReferences, proto.Clone(ref).(*kplanev1.OwnerReference))
			return next
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("adopt %s %s: %w", o.KindName(), o.Key(), err))
			continue
		}
		if got != nil && IsControlledBy(got, uid) {
			owned = append(owned, got)
		}
	}
	for _, o := range release {
		_, _, err := Update(ctx, api, o, func(cur *kplanev1.Object) *kplanev1.Object {
			if match(cur) || !IsControlledBy(cur, uid) {
				return nil
			}
			next := proto.Clone(cur).(*kplanev1.Object)
			next.Meta().OwnerReferences = slices.DeleteFunc(next.Meta().OwnerReferences, func(r *kplanev1.OwnerReference) bool {
				return r.GetUid() == uid
			})
			return next
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("release %s %s: %w", o.KindName(), o.Key(), err))
		}
	}
	return owned, errors.Join(errs...)
}
