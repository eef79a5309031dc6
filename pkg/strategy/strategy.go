// Package strategy holds what differs between kinds: defaults, validation
// and what an update may change. The apiserver's generic store calls it
// before every write; kpctl calls it before the first write of an apply.
// Adding a kind means adding its proto message and one Strategy here;
// a kind with special lifecycle rules (expiry, graceful deletion,
// namespace rules) implements the hooks in lifecycle.go.
package strategy

import (
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// Strategy is the per-kind part of the generic store. All methods work on
// the kind message (*kplanev1.Pod, ...) inside an Object and never touch
// server-owned metadata (uid, resourceVersion, generation, timestamps).
type Strategy interface {
	// Default fills unset fields with their Kubernetes defaults. It is
	// called on create and on update, before validation.
	Default(obj *kplanev1.Object)
	// Validate checks a whole object (metadata included) as it would be
	// stored.
	Validate(obj *kplanev1.Object) validation.ErrorList
	// ValidateUpdate checks what an update may change relative to old,
	// e.g. immutable fields. Validate has already passed for obj.
	ValidateUpdate(obj, old *kplanev1.Object) validation.ErrorList
}

// CreatePreparer is implemented by strategies that fill server-owned
// fields when an object is created, before Default: the initial status
// (a Pod starts Pending with its QoS class, a Namespace Active, volumes and
// claims Pending). Kept apart from Default because Default also runs on
// updates and in clients, where status is not theirs to set. Every
// strategy returned by For implements it.
type CreatePreparer interface {
	PrepareForCreate(obj *kplanev1.Object)
}
