package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Priority admission, as Kubernetes' Priority admission plugin: a pod's
// priorityClassName (or, when it names none, the globalDefault class) is
// resolved on create into spec.priority and spec.preemptionPolicy, so the
// scheduler reads numbers and never looks classes up. A PriorityClass
// may be the global default only when no other class is.

// priorityClass is a resolved class.
type priorityClass struct {
	name   string
	value  int32
	policy string
}

// systemClasses are built in, as in Kubernetes; they are not objects.
var systemClasses = map[string]priorityClass{
	kplanev1.SystemClusterCritical: {kplanev1.SystemClusterCritical, kplanev1.SystemClusterCriticalPriority, kplanev1.PreemptLowerPriority},
	kplanev1.SystemNodeCritical:    {kplanev1.SystemNodeCritical, kplanev1.SystemNodeCriticalPriority, kplanev1.PreemptLowerPriority},
}

func forbidden(kind, name, format string, args ...any) error {
	return status.Errorf(codes.PermissionDenied, "%s %q is forbidden: "+format, append([]any{kind, name}, args...)...)
}

// podPriorityClasses reads every PriorityClass for pod admission: from
// Options.PriorityClasses once its cache shows this store's latest class
// write, else from etcd. A class created a moment ago through another
// apiserver may be missed, as with Kubernetes' informer-backed admission.
func (s *Store) podPriorityClasses(ctx context.Context) ([]*kplanev1.PriorityClass, error) {
	if s.opts.PriorityClasses != nil {
		if classes, ok := s.opts.PriorityClasses(s.pcWritten.Load()); ok {
			return classes, nil
		}
	}
	return s.priorityClasses(ctx)
}

// priorityClasses reads every PriorityClass from etcd (a serializable
// read).
func (s *Store) priorityClasses(ctx context.Context) ([]*kplanev1.PriorityClass, error) {
	k := kplanev1.LookupKind("PriorityClass")
	resp, err := s.cli.Get(ctx, ListPrefix(k, ""), clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		return nil, backendError(ctx, "list priority classes", err)
	}
	out := make([]*kplanev1.PriorityClass, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		obj, err := Decode(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "priority class %s: %v", kv.Key, err)
		}
		out = append(out, obj.GetPriorityClass())
	}
	return out, nil
}

// admitPodPriority sets the pod's priority and preemptionPolicy from its
// class. A class that does not exist, or a priority or policy written in
// the pod that differs from the class's, is refused.
func (s *Store) admitPodPriority(ctx context.Context, pod *kplanev1.Pod, name string) error {
	spec := pod.GetSpec()
	if spec == nil {
		return nil
	}
	var pc priorityClass
	if cn := spec.GetPriorityClassName(); cn != "" {
		if sc, ok := systemClasses[cn]; ok {
			pc = sc
		} else {
			k := kplanev1.LookupKind("PriorityClass")
			obj, _, err := s.get(ctx, k, "", cn)
			if status.Code(err) == codes.NotFound {
				return forbidden("pods", name, "no PriorityClass with name %s was found", cn)
			}
			if err != nil {
				return err
			}
			c := obj.GetPriorityClass()
			pc = priorityClass{c.GetMetadata().GetName(), c.GetValue(), c.GetPreemptionPolicy()}
		}
	} else {
		classes, err := s.podPriorityClasses(ctx)
		if err != nil {
			return err
		}
		pc = priorityClass{policy: kplanev1.PreemptLowerPriority}
		for _, c := range classes {
			if c.GetGlobalDefault() {
				pc = priorityClass{c.GetMetadata().GetName(), c.GetValue(), c.GetPreemptionPolicy()}
				break
			}
		}
	}
	if pc.policy == "" {
		pc.policy = kplanev1.PreemptLowerPriority
	}
	if spec.Priority != 0 && spec.Priority != pc.value {
		return forbidden("pods", name, "the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", spec.Priority, pc.value)
	}
	if spec.PreemptionPolicy != nil && spec.GetPreemptionPolicy() != pc.policy {
		return forbidden("pods", name, "the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", spec.GetPreemptionPolicy(), pc.policy)
	}
	spec.PriorityClassName = pc.name
	spec.Priority = pc.value
	spec.PreemptionPolicy = &pc.policy
	return nil
}

// admitGlobalDefault refuses a second globalDefault class.
func (s *Store) admitGlobalDefault(ctx context.Context, pc *kplanev1.PriorityClass) error {
	if !pc.GetGlobalDefault() {
		return nil
	}
	classes, err := s.priorityClasses(ctx)
	if err != nil {
		return err
	}
	for _, c := range classes {
		if c.GetGlobalDefault() && c.GetMetadata().GetName() != pc.GetMetadata().GetName() {
			return forbidden("priorityclasses", pc.GetMetadata().GetName(), "PriorityClass %s is already marked as default. Only one default can exist", c.GetMetadata().GetName())
		}
	}
	return nil
}

// admit runs the admission of kinds that need to read other objects,
// after defaulting and validation.
func (s *Store) admit(ctx context.Context, obj *kplanev1.Object, name string, create bool) error {
	switch {
	case obj.GetPod() != nil && create:
		return s.admitPodPriority(ctx, obj.GetPod(), name)
	case obj.GetPriorityClass() != nil:
		return s.admitGlobalDefault(ctx, obj.GetPriorityClass())
	}
	return nil
}
