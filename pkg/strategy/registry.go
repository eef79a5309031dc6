package strategy

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// kindMessage is what every kind message offers: its metadata.
type kindMessage interface {
	proto.Message
	GetMetadata() *kplanev1.ObjectMeta
}

// typed adapts per-kind functions on the concrete message (*Pod, ...) to
// the Strategy interface, so each kind's code never unwraps an Object and
// metadata checks are done once for all kinds.
type typed[T kindMessage] struct {
	kind       string
	namespaced bool
	// get unwraps the kind message; it returns a nil T when obj holds
	// another kind.
	get func(*kplanev1.Object) T
	// nameFn checks metadata.name (and generateName).
	nameFn validation.NameFn
	// defaults, prepare, validate and update are optional.
	defaults func(T)
	prepare  func(T)
	validate func(T) validation.ErrorList
	update   func(obj, old T) validation.ErrorList
}

// unwrap returns the kind message, or ok=false for an Object of another
// kind (or an empty one).
func (s *typed[T]) unwrap(obj *kplanev1.Object) (T, bool) {
	m := s.get(obj)
	return m, m.ProtoReflect().IsValid()
}

func (s *typed[T]) Default(obj *kplanev1.Object) {
	m, ok := s.unwrap(obj)
	if ok && s.defaults != nil {
		s.defaults(m)
	}
}

// PrepareForCreate implements CreatePreparer.
func (s *typed[T]) PrepareForCreate(obj *kplanev1.Object) {
	m, ok := s.unwrap(obj)
	if ok && s.prepare != nil {
		s.prepare(m)
	}
}

func (s *typed[T]) Validate(obj *kplanev1.Object) validation.ErrorList {
	m, ok := s.unwrap(obj)
	if !ok {
		return s.wrongKind(obj)
	}
	errs := validation.ValidateObjectMeta(m.GetMetadata(), s.namespaced, s.nameFn, "metadata")
	if s.validate != nil {
		errs.AddAll(s.validate(m))
	}
	return errs
}

func (s *typed[T]) ValidateUpdate(obj, old *kplanev1.Object) validation.ErrorList {
	m, ok := s.unwrap(obj)
	if !ok {
		return s.wrongKind(obj)
	}
	o, ok := s.unwrap(old)
	if !ok {
		return s.wrongKind(old)
	}
	errs := validation.ValidateObjectMetaUpdate(m.GetMetadata(), o.GetMetadata(), "metadata")
	if s.update != nil {
		errs.AddAll(s.update(m, o))
	}
	return errs
}

func (s *typed[T]) wrongKind(obj *kplanev1.Object) validation.ErrorList {
	var errs validation.ErrorList
	got := obj.KindName()
	if got == "" {
		got = "an empty object"
	}
	errs.Add("kind", "%s", fmt.Sprintf("expected a %s, got %s", s.kind, got))
	return errs
}

// strategies holds one Strategy per kind, keyed by kind name.
var strategies = map[string]Strategy{}

// kindStrategy is what register stores: a Strategy (with any lifecycle
// hooks of its kind) built on typed.
type kindStrategy interface {
	Strategy
	bind() string
}

// bind completes s from the kind table and returns its kind name.
func (s *typed[T]) bind() string {
	info := kplanev1.LookupKind(s.kind)
	if info == nil {
		panic("strategy: " + kplanev1.UnknownKindError(s.kind))
	}
	s.namespaced = info.Namespaced
	return s.kind
}

func register(s kindStrategy) {
	kind := s.bind()
	if _, ok := s.(NamespaceHolder); ok {
		if namespaceKind != "" {
			panic("strategy: both " + namespaceKind + " and " + kind + " hold namespaces")
		}
		namespaceKind = kind
	}
	strategies[kind] = s
}

// For returns the strategy of a kind ("Pod", "ReplicaSet", ...), or nil
// for a kind the API does not serve.
func For(kind string) Strategy {
	return strategies[kind]
}

func init() {
	register(namespaceStrategy{&typed[*kplanev1.Namespace]{kind: "Namespace", get: (*kplanev1.Object).GetNamespace,
		nameFn: validation.IsDNS1123Label, prepare: prepareNamespace, validate: validateNamespace}})
	register(&typed[*kplanev1.Node]{kind: "Node", get: (*kplanev1.Object).GetNode,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultNode, validate: validateNode, update: validateNodeUpdate})
	register(podStrategy{&typed[*kplanev1.Pod]{kind: "Pod", get: (*kplanev1.Object).GetPod,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultPod, prepare: preparePod, validate: validatePod, update: validatePodUpdate}})
	register(scalable[*kplanev1.ReplicaSet]{&typed[*kplanev1.ReplicaSet]{kind: "ReplicaSet", get: (*kplanev1.Object).GetReplicaSet,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultReplicaSet, validate: validateReplicaSet, update: validateReplicaSetUpdate}, replicaSetScale})
	register(scalable[*kplanev1.ReplicationController]{&typed[*kplanev1.ReplicationController]{kind: "ReplicationController", get: (*kplanev1.Object).GetReplicationController,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultReplicationController, validate: validateReplicationController}, replicationControllerScale})
	register(scalable[*kplanev1.Deployment]{&typed[*kplanev1.Deployment]{kind: "Deployment", get: (*kplanev1.Object).GetDeployment,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultDeployment, validate: validateDeployment, update: validateDeploymentUpdate}, deploymentScale})
	register(&typed[*kplanev1.ControllerRevision]{kind: "ControllerRevision", get: (*kplanev1.Object).GetControllerRevision,
		nameFn: validation.IsDNS1123Subdomain, validate: validateControllerRevision, update: validateControllerRevisionUpdate})
	register(scalable[*kplanev1.StatefulSet]{&typed[*kplanev1.StatefulSet]{kind: "StatefulSet", get: (*kplanev1.Object).GetStatefulSet,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultStatefulSet, validate: validateStatefulSet, update: validateStatefulSetUpdate}, statefulSetScale})
	register(&typed[*kplanev1.DaemonSet]{kind: "DaemonSet", get: (*kplanev1.Object).GetDaemonSet,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultDaemonSet, validate: validateDaemonSet, update: validateDaemonSetUpdate})
	register(serviceStrategy{&typed[*kplanev1.Service]{kind: "Service", get: (*kplanev1.Object).GetService,
		nameFn: validation.IsDNS1035Label, defaults: defaultService, validate: validateService, update: validateServiceUpdate}})
	register(&typed[*kplanev1.Endpoints]{kind: "Endpoints", get: (*kplanev1.Object).GetEndpoints,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultEndpoints, validate: validateEndpoints})
	register(&typed[*kplanev1.Job]{kind: "Job", get: (*kplanev1.Object).GetJob,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultJob, validate: validateJob, update: validateJobUpdate})
	register(&typed[*kplanev1.PersistentVolume]{kind: "PersistentVolume", get: (*kplanev1.Object).GetPersistentVolume,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultPersistentVolume, prepare: preparePersistentVolume, validate: validatePersistentVolume, update: validatePersistentVolumeUpdate})
	register(&typed[*kplanev1.PersistentVolumeClaim]{kind: "PersistentVolumeClaim", get: (*kplanev1.Object).GetPersistentVolumeClaim,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultPersistentVolumeClaim, prepare: preparePersistentVolumeClaim, validate: validatePersistentVolumeClaim, update: validatePersistentVolumeClaimUpdate})
	register(&typed[*kplanev1.StorageClass]{kind: "StorageClass", get: (*kplanev1.Object).GetStorageClass,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultStorageClass, validate: validateStorageClass, update: validateStorageClassUpdate})
	register(&typed[*kplanev1.ServiceAccount]{kind: "ServiceAccount", get: (*kplanev1.Object).GetServiceAccount,
		nameFn: validation.IsDNS1123Subdomain, validate: validateServiceAccount})
	register(&typed[*kplanev1.Secret]{kind: "Secret", get: (*kplanev1.Object).GetSecret,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultSecret, validate: validateSecret, update: validateSecretUpdate})
	register(&typed[*kplanev1.Lease]{kind: "Lease", get: (*kplanev1.Object).GetLease,
		nameFn: validation.IsDNS1123Subdomain, validate: validateLease})
	register(&typed[*kplanev1.CronJob]{kind: "CronJob", get: (*kplanev1.Object).GetCronJob,
		nameFn: cronJobName, defaults: defaultCronJob, validate: validateCronJob})
	register(&typed[*kplanev1.PriorityClass]{kind: "PriorityClass", get: (*kplanev1.Object).GetPriorityClass,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultPriorityClass, validate: validatePriorityClass, update: validatePriorityClassUpdate})
	register(&typed[*kplanev1.PodDisruptionBudget]{kind: "PodDisruptionBudget", get: (*kplanev1.Object).GetPodDisruptionBudget,
		nameFn: validation.IsDNS1123Subdomain, validate: validatePodDisruptionBudget})
	register(&typed[*kplanev1.Role]{kind: "Role", get: (*kplanev1.Object).GetRole,
		nameFn: rbacName, validate: validateRole})
	register(&typed[*kplanev1.ClusterRole]{kind: "ClusterRole", get: (*kplanev1.Object).GetClusterRole,
		nameFn: rbacName, validate: validateClusterRole})
	register(&typed[*kplanev1.RoleBinding]{kind: "RoleBinding", get: (*kplanev1.Object).GetRoleBinding,
		nameFn: rbacName, defaults: defaultRoleBinding, validate: validateRoleBinding, update: validateRoleBindingUpdate})
	register(&typed[*kplanev1.ClusterRoleBinding]{kind: "ClusterRoleBinding", get: (*kplanev1.Object).GetClusterRoleBinding,
		nameFn: rbacName, defaults: defaultClusterRoleBinding, validate: validateClusterRoleBinding, update: validateClusterRoleBindingUpdate})
	register(eventStrategy{&typed[*kplanev1.Event]{kind: "Event", get: (*kplanev1.Object).GetEvent,
		nameFn: validation.IsDNS1123Subdomain, defaults: defaultEvent, validate: validateEvent}})
}
