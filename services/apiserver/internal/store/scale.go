package store

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"
	"github.com/kplane/kplane/pkg/validation"
)

// scalerOf returns the kind and its scale subresource; InvalidArgument for
// a kind without spec.replicas.
func scalerOf(kind string) (*kplanev1.KindInfo, strategy.Scaler, error) {
	k, err := LookupKind(kind)
	if err != nil {
		return nil, nil, err
	}
	sc, ok := strategy.For(k.Name).(strategy.Scaler)
	if !ok {
		return nil, nil, invalid("kind %s has no scale subresource", k.Name)
	}
	return k, sc, nil
}

func scaleOf(k *kplanev1.KindInfo, sc strategy.Scaler, obj *kplanev1.Object) (*kplanev1.Scale, error) {
	out, err := sc.Scale(obj)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s scale: %v", k.Name, err)
	}
	return out, nil
}

// GetScale reads the scale subresource of one object.
func (s *Store) GetScale(ctx context.Context, kind, namespace, name string) (*kplanev1.Scale, error) {
	k, sc, err := scalerOf(kind)
	if err != nil {
		return nil, err
	}
	if err := checkScope(k, namespace, name); err != nil {
		return nil, err
	}
	obj, _, err := s.get(ctx, k, namespace, name)
	if err != nil {
		return nil, err
	}
	return scaleOf(k, sc, obj)
}

// UpdateScale sets spec.replicas of the object in.metadata names, through
// the same Update path as any spec change (defaults, validation,
// generation). A set in.metadata.resourceVersion (or uid) is a
// precondition on the object; without one a concurrent write is retried
// on the fresh object, as an unconditional Update is.
func (s *Store) UpdateScale(ctx context.Context, kind string, in *kplanev1.Scale) (*kplanev1.Scale, error) {
	k, sc, err := scalerOf(kind)
	if err != nil {
		return nil, err
	}
	if in == nil {
		return nil, invalid("scale: required")
	}
	meta := in.GetMetadata()
	ns, name := meta.GetNamespace(), meta.GetName()
	if !k.Namespaced {
		ns = ""
	}
	if err := checkScope(k, ns, name); err != nil {
		return nil, err
	}
	// Field violations ride along so REST answers 422 Invalid naming
	// spec.replicas, as for any other object.
	var errs validation.ErrorList
	if in.GetSpec() == nil {
		errs.Required("spec.replicas", "")
	} else if n := in.GetSpec().GetReplicas(); n < 0 {
		errs.Invalid("spec.replicas", n, "must be greater than or equal to 0")
	}
	if len(errs) > 0 {
		return nil, invalidObject("Scale", name, errs)
	}
	wantRev, err := ParseRevision(meta.GetResourceVersion())
	if err != nil {
		return nil, invalid("metadata.%v", err)
	}
	for attempt := 0; ; attempt++ {
		cur, curRev, err := s.get(ctx, k, ns, name)
		if err != nil {
			return nil, err
		}
		if wantRev != 0 && wantRev != curRev {
			return nil, conflict(k.Name, name, fmt.Sprintf("the object has been modified (resourceVersion %d, stored %d)", wantRev, curRev))
		}
		if meta.GetUid() != "" && meta.GetUid() != cur.Meta().Uid {
			return nil, conflict(k.Name, name, fmt.Sprintf("uid %s does not match the stored object's %s", meta.GetUid(), cur.Meta().Uid))
		}
		next := proto.Clone(cur).(*kplanev1.Object)
		sc.SetReplicas(next, in.GetSpec().GetReplicas())
		next.Meta().ResourceVersion = FormatRevision(curRev)
		out, err := s.Update(ctx, next)
		if status.Code(err) == codes.Aborted && wantRev == 0 && attempt < maxUpdateRetries {
			continue // another writer came between our read and write: reapply
		}
		if err != nil {
			return nil, err
		}
		return scaleOf(k, sc, out)
	}
}
