package informer

import (
	"context"
	"sync"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Handler receives an informer's notifications. Nil funcs are skipped.
// Notifications for one handler are delivered one at a time, in the order
// the informer applied them to its cache, from a goroutine of the handler's
// own: a slow handler delays only itself, never the watch or other handlers.
type Handler struct {
	// OnAdd is called for an object new to the cache (including the
	// synthetic adds of the initial list, or of the current contents when
	// the handler is added after the informer synced).
	OnAdd func(obj *kplanev1.Object)
	// OnUpdate is called when a cached object changed, and with old == new
	// on every periodic resync.
	OnUpdate func(oldObj, newObj *kplanev1.Object)
	// OnDelete is called with the deleted *kplanev1.Object, or with a
	// DeletedFinalStateUnknown when the deletion was only noticed by a
	// relist (its final state was never seen). Use ObjectOf to unwrap.
	OnDelete func(obj any)
}

// DeletedFinalStateUnknown is passed to OnDelete when an object vanished
// while the informer was not watching (e.g. history was compacted): Obj is
// the last state the cache had, which may be stale.
type DeletedFinalStateUnknown struct {
	Key string
	Obj *kplanev1.Object
}

// ObjectOf returns the object of an OnDelete argument, unwrapping a
// DeletedFinalStateUnknown tombstone.
func ObjectOf(obj any) (*kplanev1.Object, bool) {
	switch o := obj.(type) {
	case *kplanev1.Object:
		return o, o != nil
	case DeletedFinalStateUnknown:
		return o.Obj, o.Obj != nil
	case *DeletedFinalStateUnknown:
		if o == nil {
			return nil, false
		}
		return o.Obj, o.Obj != nil
	}
	return nil, false
}

type notificationType int

const (
	notifyAdd notificationType = iota
	notifyUpdate
	notifyDelete
)

type notification struct {
	typ      notificationType
	old, obj *kplanev1.Object
	deleted  any
}

// listener buffers notifications for one handler without bound, so pushing
// never blocks the informer, and delivers them from run.
type listener struct {
	h Handler

	mu      sync.Mutex
	pending []notification
	wake    chan struct{} // capacity 1: "pending is not empty"
}

func newListener(h Handler) *listener {
	return &listener{h: h, wake: make(chan struct{}, 1)}
}

func (l *listener) push(n notification) {
	l.mu.Lock()
	l.pending = append(l.pending, n)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run delivers notifications until ctx ends; undelivered ones are dropped
// then, as the informer is stopping.
func (l *listener) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		}
		// Take the whole batch so that pushes do not wait on the handler.
		l.mu.Lock()
		batch := l.pending
		l.pending = nil
		l.mu.Unlock()
		for _, n := range batch {
			if ctx.Err() != nil {
				return
			}
			l.deliver(n)
		}
	}
}

func (l *listener) deliver(n notification) {
	switch n.typ {
	case notifyAdd:
		if l.h.OnAdd != nil {
			l.h.OnAdd(n.obj)
		}
	case notifyUpdate:
		if l.h.OnUpdate != nil {
			l.h.OnUpdate(n.old, n.obj)
		}
	case notifyDelete:
		if l.h.OnDelete != nil {
			l.h.OnDelete(n.deleted)
		}
	}
}
