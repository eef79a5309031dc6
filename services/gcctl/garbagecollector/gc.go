package garbagecollector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// foregroundRecheck re-examines an owner waiting for its dependents to go,
// in case a dependent's deletion event is missed (the cache is the truth,
// but events are hints).
const foregroundRecheck = 2 * time.Second

// catchUpRecheck is how soon an orphaning owner is looked at again while
// the caches have not reached its deletion (bookmarks move idle caches on
// within the apiserver's bookmark interval).
const catchUpRecheck = 100 * time.Millisecond

// NewService returns gcctl: the binary's main runs it with app.Main, and
// other modules' tests run it in-process (controllertest) to have owner
// references honoured.
func NewService() app.Service { return (&collector{}).service() }

func (g *collector) service() app.Service {
	return app.Service{
		Name:          "gcctl",
		HealthAddr:    ":10259",
		LeaderElected: true,
		Workers:       4,
		Watches:       g.watches(),
		Setup:         g.setup,
	}
}

// collector is the reconciler. Its keys are "Kind/namespace/name" (or
// "Kind/name"), since it handles every kind.
type collector struct {
	api       *client.Client
	informers *informer.Factory
	log       hclog.Logger
}

// watches feeds the queue from every kind: an object with owners is
// checked for dangling owners; an object being deleted or gone wakes its
// dependents (and, when gone, the owners that may be waiting for it).
// The mappings run only after setup has filled in g.
func (g *collector) watches() []app.Watch {
	var ws []app.Watch
	for _, k := range kplanev1.Kinds() {
		kind := k.Name
		ws = append(ws, app.Watch{Kind: kind, MapToKey: func(obj *kplanev1.Object) []string { return g.keysFor(kind, obj) }})
	}
	return ws
}

func (g *collector) setup(c *app.Context) (app.Reconciler, error) {
	// The shared informers index every kind by owner uid already.
	g.api, g.informers, g.log = c.Client, c.Informers, c.Logger
	return g, nil
}

func objectKey(kind string, obj *kplanev1.Object) string { return kind + "/" + obj.Key() }

func splitKey(key string) (kind, namespace, name string, err error) {
	kind, rest, ok := strings.Cut(key, "/")
	if !ok || kplanev1.LookupKind(kind) == nil {
		return "", "", "", fmt.Errorf("malformed key %q", key)
	}
	namespace, name = kplanev1.SplitKey(rest)
	return kind, namespace, name, nil
}

// keysFor maps an event on obj (of kind) to the keys to reconcile.
func (g *collector) keysFor(kind string, obj *kplanev1.Object) []string {
	meta := obj.Meta()
	var keys []string
	if len(meta.GetOwnerReferences()) > 0 || meta.GetDeletionTimestamp() != nil {
		keys = append(keys, objectKey(kind, obj))
	}
	cur, inCache := g.informers.ForKind(kind).Store().Get(obj.Key())
	gone := !inCache || cur.Meta().GetUid() != meta.GetUid()
	if gone || meta.GetDeletionTimestamp() != nil {
		for _, d := range g.dependents(meta.GetUid()) {
			keys = append(keys, d.key)
		}
	}
	if gone {
		for _, ref := range meta.GetOwnerReferences() {
			if k := kplanev1.LookupKind(ref.GetKind()); k != nil {
				keys = append(keys, ref.GetKind()+"/"+kplanev1.MetaKey(ownerNamespace(k, meta), ref.GetName()))
			}
		}
	}
	return keys
}

type dependent struct {
	kind string
	key  string
	obj  *kplanev1.Object
}

// cachesReach reports whether every kind's cache has applied revision rv
// (by an event or a bookmark), so that every object written before rv is
// in its cache.
func (g *collector) cachesReach(rv string) bool {
	want, err := apiutil.ParseResourceVersion(rv)
	if err != nil {
		return true
	}
	for _, k := range kplanev1.Kinds() {
		got, err := apiutil.ParseResourceVersion(g.informers.ForKind(k.Name).LastSyncResourceVersion())
		if err != nil || got < want {
			return false
		}
	}
	return true
}

// dependents lists, from the caches, every object that names uid as an owner.
func (g *collector) dependents(uid string) []dependent {
	if uid == "" {
		return nil
	}
	var out []dependent
	for _, k := range kplanev1.Kinds() {
		objs, err := g.informers.ForKind(k.Name).Store().ByIndex(informer.OwnerUIDIndex, uid)
		if err != nil {
			continue // cannot happen: the factory indexes every kind by owner uid
		}
		for _, o := range objs {
			out = append(out, dependent{kind: k.Name, key: objectKey(k.Name, o), obj: o})
		}
	}
	return out
}

func ownerNamespace(owner *kplanev1.KindInfo, dependent *kplanev1.ObjectMeta) string {
	if owner.Namespaced {
		return dependent.GetNamespace()
	}
	return ""
}

// Reconcile implements app.Reconciler.
func (g *collector) Reconcile(ctx context.Context, key string) error {
	kind, namespace, name, err := splitKey(key)
	if err != nil {
		g.log.Error("dropping key", "key", key, "error", err)
		return nil
	}
	obj, ok := g.informers.ForKind(kind).Store().GetByName(namespace, name)
	if !ok {
		return nil
	}
	meta := obj.Meta()
	if meta.GetDeletionTimestamp() != nil {
		switch {
		case hasFinalizer(meta, kplanev1.FinalizerOrphanDependents):
			return g.orphanDependents(ctx, kind, obj)
		case hasFinalizer(meta, kplanev1.FinalizerForegroundDeletion):
			return g.deleteDependents(ctx, kind, obj)
		}
		return nil
	}
	if len(meta.GetOwnerReferences()) > 0 {
		return g.collectIfOrphaned(ctx, kind, obj)
	}
	return nil
}

// orphanDependents strips the owner's reference from every dependent,
// then removes the orphan finalizer, which lets the owner go.
func (g *collector) orphanDependents(ctx context.Context, kind string, owner *kplanev1.Object) error {
	// A dependent written before the owner's deletion but not yet in its
	// cache would be missed, and then collected as an object whose owner
	// is gone: wait until every cache has reached the deletion.
	if !g.cachesReach(owner.Meta().GetResourceVersion()) {
		return app.RequeueAfter(catchUpRecheck)
	}
	uid := owner.Meta().GetUid()
	for _, d := range g.dependents(uid) {
		if err := g.mutate(ctx, d.obj, dropOwnerRefs(uid)); err != nil {
			return fmt.Errorf("orphan %s: %w", d.key, err)
		}
	}
	if err := g.removeFinalizer(ctx, owner, kplanev1.FinalizerOrphanDependents); err != nil {
		return err
	}
	g.log.Info("orphaned dependents", "owner", objectKey(kind, owner))
	return nil
}

// deleteDependents deletes the owner's dependents and removes the
// foregroundDeletion finalizer once none is left.
func (g *collector) deleteDependents(ctx context.Context, kind string, owner *kplanev1.Object) error {
	deps := g.dependents(owner.Meta().GetUid())
	for _, d := range deps {
		if d.obj.Meta().GetDeletionTimestamp() != nil {
			continue
		}
		if err := g.delete(ctx, d.obj); err != nil {
			return fmt.Errorf("delete dependent %s: %w", d.key, err)
		}
	}
	if len(deps) > 0 {
		return app.RequeueAfter(foregroundRecheck)
	}
	if err := g.removeFinalizer(ctx, owner, kplanev1.FinalizerForegroundDeletion); err != nil {
		return err
	}
	g.log.Info("foreground deletion finished", "owner", objectKey(kind, owner))
	return nil
}

// collectIfOrphaned deletes obj when every owner it names is gone, and
// drops the references to gone owners when only some are.
func (g *collector) collectIfOrphaned(ctx context.Context, kind string, obj *kplanev1.Object) error {
	meta := obj.Meta()
	var gone []string
	for _, ref := range meta.GetOwnerReferences() {
		exists, err := g.ownerExists(ctx, meta, ref)
		if err != nil {
			return err
		}
		if !exists {
			gone = append(gone, ref.GetUid())
		}
	}
	switch {
	case len(gone) == 0:
		return nil
	case len(gone) == len(meta.GetOwnerReferences()):
		// Only the version judged: if an owner reference was dropped
		// meanwhile (an orphaning), that change is judged again instead.
		_, _, err := controller.DeleteIfSameUID(ctx, g.api, obj, client.DeleteOptions{
			PropagationPolicy: kplanev1.DeletePropagationBackground,
			Preconditions:     &kplanev1.Preconditions{ResourceVersion: meta.GetResourceVersion()},
		})
		if err != nil {
			return fmt.Errorf("collect %s: %w", objectKey(kind, obj), err)
		}
		g.log.Info("deleted object whose owners are gone", "object", objectKey(kind, obj))
		return nil
	default:
		return g.mutate(ctx, obj, dropOwnerRefs(gone...))
	}
}

// ownerExists checks the cache and, when the cache says no, the apiserver:
// an owner created a moment ago may not have reached the cache yet.
func (g *collector) ownerExists(ctx context.Context, dep *kplanev1.ObjectMeta, ref *kplanev1.OwnerReference) (bool, error) {
	k := kplanev1.LookupKind(ref.GetKind())
	if k == nil {
		return true, nil // a kind this apiserver does not serve: leave it be
	}
	ns := ownerNamespace(k, dep)
	if o, ok := g.informers.ForKind(k.Name).Store().GetByName(ns, ref.GetName()); ok && o.Meta().GetUid() == ref.GetUid() {
		return true, nil
	}
	resp, err := g.api.Get(ctx, &kplanev1.GetRequest{Kind: k.Name, Namespace: ns, Name: ref.GetName()})
	switch {
	case client.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get owner %s %s: %w", k.Name, kplanev1.MetaKey(ns, ref.GetName()), err)
	}
	return resp.GetObject().Meta().GetUid() == ref.GetUid(), nil
}

// delete deletes obj in the background, only if it is still the same object.
func (g *collector) delete(ctx context.Context, obj *kplanev1.Object) error {
	_, _, err := controller.DeleteIfSameUID(ctx, g.api, obj, client.DeleteOptions{PropagationPolicy: kplanev1.DeletePropagationBackground})
	return err
}

// mutate applies change to a copy of obj's metadata and updates it with
// compare-and-swap, rereading on conflicts. change reports whether it
// changed anything.
func (g *collector) mutate(ctx context.Context, obj *kplanev1.Object, change func(*kplanev1.ObjectMeta) bool) error {
	_, _, err := controller.Update(ctx, g.api, obj, func(cur *kplanev1.Object) *kplanev1.Object {
		next := proto.Clone(cur).(*kplanev1.Object)
		if !change(next.Meta()) {
			return nil
		}
		return next
	})
	return err
}

// dropOwnerRefs is a metadata change that removes the owner references
// to the given uids.
func dropOwnerRefs(uids ...string) func(*kplanev1.ObjectMeta) bool {
	return func(m *kplanev1.ObjectMeta) bool {
		n := len(m.OwnerReferences)
		m.OwnerReferences = slices.DeleteFunc(m.OwnerReferences, func(r *kplanev1.OwnerReference) bool {
			return slices.Contains(uids, r.GetUid())
		})
		return len(m.OwnerReferences) != n
	}
}

func (g *collector) removeFinalizer(ctx context.Context, obj *kplanev1.Object, finalizer string) error {
	return g.mutate(ctx, obj, func(m *kplanev1.ObjectMeta) bool {
		n := len(m.Finalizers)
		m.Finalizers = slices.DeleteFunc(m.Finalizers, func(f string) bool { return f == finalizer })
		return len(m.Finalizers) != n
	})
}

func hasFinalizer(meta *kplanev1.ObjectMeta, f string) bool {
	return slices.Contains(meta.GetFinalizers(), f)
}
