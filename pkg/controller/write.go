package controller

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Mutation computes the object to write from the current one: it returns
// a modified copy (it must not modify cur, which may be the informer
// cache's), or nil when cur needs nothing. It runs again on the object
// reread after a conflict, so deciding on the fresh object is what keeps a
// second replica or a restarted process from writing anything twice.
type Mutation[T proto.Message] func(cur T) T

// Update writes obj's spec and metadata with a compare-and-swap
// read-modify-write: mutate(obj) is written conditional on obj's
// resourceVersion; on a conflict (Aborted) the object is reread from the
// apiserver and mutate runs again, up to client.DefaultRetry's attempts.
//
// It returns the newest object it knows (the written one, or the reread
// one when mutate said there was nothing to do) and whether it wrote. When
// the object is gone, or was replaced by a namesake with another uid (not
// the object the caller decided about), it stops and returns the zero T,
// false and no error.
func Update[T proto.Message](ctx context.Context, api kplanev1.ResourcesClient, obj T, mutate Mutation[T]) (T, bool, error) {
	return cas(ctx, api, obj, mutate, func(ctx context.Context, o *kplanev1.Object) (*kplanev1.Object, error) {
		resp, err := api.Update(ctx, &kplanev1.UpdateRequest{Object: o})
		return resp.GetObject(), err
	})
}

// UpdateStatus is Update for the status subresource.
func UpdateStatus[T proto.Message](ctx context.Context, api kplanev1.ResourcesClient, obj T, mutate Mutation[T]) (T, bool, error) {
	return cas(ctx, api, obj, mutate, func(ctx context.Context, o *kplanev1.Object) (*kplanev1.Object, error) {
		resp, err := api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: o})
		return resp.GetObject(), err
	})
}

func cas[T proto.Message](ctx context.Context, api kplanev1.ResourcesClient, obj T, mutate Mutation[T],
	write func(context.Context, *kplanev1.Object) (*kplanev1.Object, error)) (T, bool, error) {
	var zero T
	start, err := wrap(obj)
	if err != nil {
		return zero, false, err
	}
	uid := start.Meta().GetUid()
	cur, wrote, gone := obj, false, false
	err = client.RetryOnConflict(ctx, client.DefaultRetry, func() error {
		next := mutate(cur)
		if isNil(next) {
			return nil
		}
		o, err := wrap(next)
		if err != nil {
			return err
		}
		out, err := write(ctx, o)
		switch {
		case err == nil:
			written, ok := as[T](out)
			if !ok {
				return fmt.Errorf("write %s %s: server returned a %q", start.KindName(), start.Key(), out.KindName())
			}
			cur, wrote = written, true
			return nil
		case client.IsNotFound(err):
			gone = true
			return nil
		case !client.IsConflict(err):
			return err
		}
		// Our copy was stale: reread and decide again.
		resp, gerr := api.Get(ctx, &kplanev1.GetRequest{Kind: start.KindName(), Namespace: start.Meta().GetNamespace(), Name: start.Meta().GetName()})
		switch {
		case client.IsNotFound(gerr):
			gone = true
			return nil
		case gerr != nil:
			return fmt.Errorf("reread after conflict: %w", gerr)
		case resp.GetObject().Meta().GetUid() != uid:
			gone = true // replaced by a namesake: its own reconcile follows
			return nil
		}
		fresh, ok := as[T](resp.GetObject())
		if !ok {
			return fmt.Errorf("reread %s %s: server returned a %q", start.KindName(), start.Key(), resp.GetObject().KindName())
		}
		cur = fresh
		return err
	})
	if gone {
		return zero, false, nil
	}
	if err != nil {
		return zero, false, fmt.Errorf("update %s %s: %w", start.KindName(), start.Key(), err)
	}
	return cur, wrote, nil
}

// DeleteIfSameUID deletes obj only if the object of that name is still the
// one with obj's uid (a uid precondition), so a namesake created meanwhile
// is never hit. A resourceVersion in opts.Preconditions narrows it to that
// very version (for a decision that a later change may undo). NotFound
// (gone already) and a failed precondition (replaced or changed) count as
// done: it returns deleted=false and no error. On success it returns the object as
// the server returned it (deleted, or marked for deletion).
func DeleteIfSameUID(ctx context.Context, api kplanev1.ResourcesClient, obj *kplanev1.Object, opts client.DeleteOptions) (*kplanev1.Object, bool, error) {
	meta := obj.Meta()
	resp, err := api.Delete(ctx, &kplanev1.DeleteRequest{
		Kind: obj.KindName(), Namespace: meta.GetNamespace(), Name: meta.GetName(),
		Preconditions:      &kplanev1.Preconditions{Uid: meta.GetUid(), ResourceVersion: opts.Preconditions.GetResourceVersion()},
		PropagationPolicy:  opts.PropagationPolicy,
		GracePeriodSeconds: opts.GracePeriodSeconds,
	})
	switch {
	case err == nil:
		return resp.GetObject(), true, nil
	case client.IsNotFound(err), client.IsConflict(err):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("delete %s %s: %w", obj.KindName(), obj.Key(), err)
}

func wrap(m proto.Message) (*kplanev1.Object, error) {
	if o, ok := m.(*kplanev1.Object); ok {
		return o, nil
	}
	return kplanev1.Wrap(m)
}

// as returns o as T: o itself when T is *kplanev1.Object, else its kind message.
func as[T proto.Message](o *kplanev1.Object) (T, bool) {
	if t, ok := any(o).(T); ok {
		return t, true
	}
	t, ok := o.Message().(T)
	return t, ok
}

func isNil[T proto.Message](v T) bool {
	return any(v) == nil || !v.ProtoReflect().IsValid()
}
