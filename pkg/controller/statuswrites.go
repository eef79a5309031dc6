package controller

import (
	"sync"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// StatusWrites lets a controller skip the wake its own status write of
// an object causes, without losing a status it must correct. It remembers,
// by object uid, the resourceVersion of the controller's last status write:
//
//   - Changed, as app.Watch.Changed, wakes on every update except that
//     very write (and status-only updates that match it): another writer's
//     status (a former leader's, say) still wakes the object;
//   - Behind tells a reconcile that its cached object is older than that
//     write. Its cached status may then be the one before the write, so
//     "the cache already shows what I computed" proves nothing: compare
//     with a fresh read. Otherwise a write skipped on the strength of a
//     stale cache leaves the apiserver with the other status, and no event
//     would wake the controller to correct it.
//
// The zero value is ready to use.
type StatusWrites struct {
	mu sync.Mutex
	rv map[string]int64 // by uid
}

// Record notes written, the object a status write returned.
func (w *StatusWrites) Record(written *kplanev1.Object) {
	rv, err := apiutil.ParseResourceVersion(written.Meta().GetResourceVersion())
	if err != nil {
		return // not a revision: Behind cannot compare with it either
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rv == nil {
		w.rv = map[string]int64{}
	}
	w.rv[written.Meta().GetUid()] = rv
}

// Behind reports whether cached is older than the last status write
// recorded for it (or its resourceVersion cannot be compared).
func (w *StatusWrites) Behind(cached *kplanev1.Object) bool {
	w.mu.Lock()
	written, ok := w.rv[cached.Meta().GetUid()]
	w.mu.Unlock()
	if !ok {
		return false
	}
	rv, err := apiutil.ParseResourceVersion(cached.Meta().GetResourceVersion())
	return err != nil || rv < written
}

// Changed reports whether an update should wake the object's controller:
// a change of spec or metadata (SpecOrMetadataChanged), or any update that
// is not the controller's own last status write.
func (w *StatusWrites) Changed(oldObj, newObj *kplanev1.Object) bool {
	if SpecOrMetadataChanged(oldObj, newObj) {
		return true
	}
	rv, err := apiutil.ParseResourceVersion(newObj.Meta().GetResourceVersion())
	w.mu.Lock()
	written, ok := w.rv[newObj.Meta().GetUid()]
	w.mu.Unlock()
	return err != nil || !ok || rv != written
}

// Forget drops what is recorded for the object with uid (deleted).
func (w *StatusWrites) Forget(uid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, uid)
}
