package strategy

import (
	"fmt"
	"maps"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/labels"
)

// Scaler is implemented by the strategies of kinds that have the scale
// subresource (spec.replicas): ReplicaSet, ReplicationController and
// Deployment. The store serves GetScale and UpdateScale through it and
// never tests a kind's name.
type Scaler interface {
	// Scale reads the object's scale: the autoscaling/v1 shape, with the
	// object's metadata, spec.replicas, status.replicas and the pod
	// selector in label-query form.
	Scale(obj *kplanev1.Object) (*kplanev1.Scale, error)
	// SetReplicas sets spec.replicas of obj (a kind message of the
	// strategy's kind); validation runs afterwards as for any update.
	SetReplicas(obj *kplanev1.Object, replicas int32)
}

// scaleFuncs reads and writes the replicas of one kind.
type scaleFuncs[T kindMessage] struct {
	// read returns spec.replicas, status.replicas and the selector.
	read func(T) (spec, status int32, sel *kplanev1.LabelSelector)
	// readSet is read for kinds with an equality selector (a map).
	readSet func(T) (spec, status int32, sel map[string]string)
	write   func(T, int32)
}

// scalable is a typed strategy with the scale subresource.
type scalable[T kindMessage] struct {
	*typed[T]
	scale scaleFuncs[T]
}

func (s scalable[T]) Scale(obj *kplanev1.Object) (*kplanev1.Scale, error) {
	m, ok := s.unwrap(obj)
	if !ok {
		return nil, s.wrongKind(obj).Err()
	}
	var spec, st int32
	var selector string
	if s.scale.readSet != nil {
		var set map[string]string
		spec, st, set = s.scale.readSet(m)
		selector = labels.SelectorFromSet(set).String()
	} else {
		var ls *kplanev1.LabelSelector
		spec, st, ls = s.scale.read(m)
		sel, err := labels.FromLabelSelector(ls)
		if err != nil {
			return nil, fmt.Errorf("%s %q: spec.selector: %w", s.kind, m.GetMetadata().GetName(), err)
		}
		selector = sel.String()
	}
	meta := m.GetMetadata()
	return &kplanev1.Scale{
		Metadata: &kplanev1.ObjectMeta{
			Name: meta.GetName(), Namespace: meta.GetNamespace(), Uid: meta.GetUid(),
			ResourceVersion: meta.GetResourceVersion(), CreationTimestamp: meta.GetCreationTimestamp(),
			Labels: maps.Clone(meta.GetLabels()),
		},
		Spec:   &kplanev1.ScaleSpec{Replicas: spec},
		Status: &kplanev1.ScaleStatus{Replicas: st, Selector: selector},
	}, nil
}

func (s scalable[T]) SetReplicas(obj *kplanev1.Object, replicas int32) {
	if m, ok := s.unwrap(obj); ok {
		s.scale.write(m, replicas)
	}
}

var replicaSetScale = scaleFuncs[*kplanev1.ReplicaSet]{
	read: func(rs *kplanev1.ReplicaSet) (int32, int32, *kplanev1.LabelSelector) {
		return rs.GetSpec().GetReplicas(), rs.GetStatus().GetReplicas(), rs.GetSpec().GetSelector()
	},
	write: func(rs *kplanev1.ReplicaSet, n int32) {
		if rs.Spec == nil {
			rs.Spec = &kplanev1.ReplicaSetSpec{}
		}
		rs.Spec.Replicas = &n
	},
}

var replicationControllerScale = scaleFuncs[*kplanev1.ReplicationController]{
	readSet: func(rc *kplanev1.ReplicationController) (int32, int32, map[string]string) {
		return rc.GetSpec().GetReplicas(), rc.GetStatus().GetReplicas(), rc.GetSpec().GetSelector()
	},
	write: func(rc *kplanev1.ReplicationController, n int32) {
		if rc.Spec == nil {
			rc.Spec = &kplanev1.ReplicationControllerSpec{}
		}
		rc.Spec.Replicas = &n
	},
}
