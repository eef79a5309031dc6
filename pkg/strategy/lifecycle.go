package strategy

import (
	"fmt"
	"net/netip"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Lifecycle hooks are optional interfaces a kind's strategy implements
// when the generic store must treat its objects specially, as Kubernetes
// configures its generic registry per kind (TTLFunc, the graceful-delete
// strategy, BeforeDelete, the namespace lifecycle). The store asks the
// strategy for them and never tests a kind's name, so a new kind with
// special rules is still a proto message plus its strategy.

// Config holds the apiserver settings that lifecycle hooks read.
type Config struct {
	// EventTTL is how long an Event lives after its last write
	// (--event-ttl); DefaultEventTTL when zero.
	EventTTL time.Duration
	// ServiceClusterIPRange is where Services' cluster IPs come from
	// (--service-cluster-ip-range); DefaultServiceClusterIPRange when
	// invalid (unset).
	ServiceClusterIPRange netip.Prefix
	// ServiceNodePortRange is where node ports come from
	// (--service-node-port-range); DefaultServiceNodePortRange when empty.
	ServiceNodePortRange PortRange
}

// DefaultEventTTL is Kubernetes' default --event-ttl.
const DefaultEventTTL = time.Hour

// Expirer is implemented by kinds whose objects expire on their own
// (Event). The store writes them with an etcd lease of the TTL.
type Expirer interface {
	// TTL is how long obj lives after a write that is not followed by
	// another; zero means until it is deleted.
	TTL(obj *kplanev1.Object, cfg Config) time.Duration
}

// GracefulDeleter is implemented by kinds whose objects stop something
// before they go (Pod: its containers, on its node). A deletion with a
// positive grace period only marks the object (deletionTimestamp = now +
// grace, deletionGracePeriodSeconds = grace; a later, shorter grace
// shortens it); the object stays until a deletion with grace 0 confirms,
// or, with finalizers, until they are gone after that.
type GracefulDeleter interface {
	// GracePeriod is the number of seconds a deletion gives obj;
	// requested is the caller's gracePeriodSeconds (nil when unset).
	// Zero deletes at once.
	GracePeriod(obj *kplanev1.Object, requested *int64) int64
}

// DeleteGuard is implemented by kinds some of whose objects may not be
// deleted (the system namespaces). The store calls BeforeDelete with the
// stored object before any other deletion step and answers
// FailedPrecondition with the error's text.
type DeleteGuard interface {
	BeforeDelete(obj *kplanev1.Object) error
}

// NamespaceHolder is implemented by the strategy of the one kind whose
// objects are namespaces (Namespace). The store then creates a namespaced
// object only in an existing namespace, and deletes a namespace only while
// it holds no object, except objects of DeletedWithNamespace kinds, which
// go with it. Both checks are part of the write's etcd transaction.
type NamespaceHolder interface {
	HoldsNamespacedObjects()
}

// DeletedWithNamespace is implemented by namespaced kinds whose objects do
// not keep their namespace from being deleted and are deleted with it
// (Event: a record of what happened, not something a user would lose).
type DeletedWithNamespace interface {
	DeletedWithNamespace()
}

// namespaceKind is the kind whose strategy is the NamespaceHolder.
var namespaceKind string

// NamespaceKind returns the name of the kind whose objects are namespaces.
func NamespaceKind() string { return namespaceKind }

// PropagationFinalizer returns the finalizer that a deletion with the
// given propagationPolicy adds so the garbage collector finishes it
// ("" for Background or an unset policy), or an error naming the
// supported values.
func PropagationFinalizer(policy string) (string, error) {
	switch policy {
	case "", kplanev1.DeletePropagationBackground:
		return "", nil
	case kplanev1.DeletePropagationForeground:
		return kplanev1.FinalizerForegroundDeletion, nil
	case kplanev1.DeletePropagationOrphan:
		return kplanev1.FinalizerOrphanDependents, nil
	}
	return "", fmt.Errorf("propagationPolicy: unsupported value %q: supported values: %q, %q, %q",
		policy, kplanev1.DeletePropagationBackground, kplanev1.DeletePropagationForeground, kplanev1.DeletePropagationOrphan)
}

// ---- Pod: graceful deletion

// podStrategy adds graceful deletion: a pod running on a node is left to
// its node agent, which stops the containers and then deletes the pod
// with a zero grace period.
type podStrategy struct{ *typed[*kplanev1.Pod] }

// GracePeriod implements GracefulDeleter: the request's period, else the
// pod's terminationGracePeriodSeconds; zero for a pod that runs nowhere
// (unbound, or finished).
func (podStrategy) GracePeriod(obj *kplanev1.Object, requested *int64) int64 {
	pod := obj.GetPod()
	if pod.GetSpec().GetNodeName() == "" {
		return 0
	}
	switch pod.GetStatus().GetPhase() {
	case kplanev1.PodSucceeded, kplanev1.PodFailed:
		return 0
	}
	if requested != nil {
		return *requested
	}
	if g := pod.GetSpec().TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return defaultTerminationGracePeriod
}

// ---- Namespace: holds namespaced objects; system namespaces stay

type namespaceStrategy struct{ *typed[*kplanev1.Namespace] }

// HoldsNamespacedObjects implements NamespaceHolder.
func (namespaceStrategy) HoldsNamespacedObjects() {}

// BeforeDelete implements DeleteGuard: the system namespaces exist from
// the first start and cannot be deleted.
func (namespaceStrategy) BeforeDelete(obj *kplanev1.Object) error {
	name := obj.Meta().GetName()
	if IsSystemNamespace(name) {
		return fmt.Errorf("namespace %q is a system namespace and cannot be deleted", name)
	}
	return nil
}

// ---- Event: expires, goes with its namespace

type eventStrategy struct{ *typed[*kplanev1.Event] }

// TTL implements Expirer with the apiserver's --event-ttl.
func (eventStrategy) TTL(_ *kplanev1.Object, cfg Config) time.Duration {
	if cfg.EventTTL > 0 {
		return cfg.EventTTL
	}
	return DefaultEventTTL
}

// DeletedWithNamespace implements DeletedWithNamespace.
func (eventStrategy) DeletedWithNamespace() {}
