package informer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A transform reaches every object: listed ones, added and updated ones
// from the watch and the final state a deletion hands to handlers; what
// it clears is gone from the cache, the rest (resourceVersions included)
// is as the apiserver has it.
func TestTransform(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	pods := client.Pods(c)
	if _, err := pods.Create(ctx, pod("listed", map[string]string{"app": "a"})); err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(c, informer.Options{Selection: informer.Selection{Kind: "Pod"}, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	strip := func(o *kplanev1.Object) *kplanev1.Object {
		o.Meta().Labels = nil
		return o
	}
	if err := inf.SetTransform(strip); err != nil {
		t.Fatal(err)
	}
	if err := inf.SetTransform(strip); err == nil {
		t.Fatal("a second SetTransform succeeded; want an error (one informer, one view)")
	}
	var mu sync.Mutex
	var labelled []string // keys of objects handlers got with labels
	deleted := map[string]bool{}
	see := func(o *kplanev1.Object) {
		mu.Lock()
		defer mu.Unlock()
		if len(o.Meta().GetLabels()) > 0 {
			labelled = append(labelled, o.Key())
		}
	}
	inf.AddEventHandler(informer.Handler{
		OnAdd:    see,
		OnUpdate: func(_, o *kplanev1.Object) { see(o) },
		OnDelete: func(obj any) {
			o, _ := informer.ObjectOf(obj)
			see(o)
			mu.Lock()
			deleted[o.Key()] = true
			mu.Unlock()
		},
	})
	runInformer(t, inf)
	if err := inf.SetTransform(strip); err == nil {
		t.Fatal("SetTransform after Run succeeded; want an error")
	}
	added, err := pods.Create(ctx, pod("added", map[string]string{"app": "b"}))
	if err != nil {
		t.Fatal(err)
	}
	added.Spec.ActiveDeadlineSeconds = new(int64)
	*added.Spec.ActiveDeadlineSeconds = 60
	if _, err := pods.Update(ctx, added); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Delete(ctx, "default", "listed", client.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the update and the deletion to reach the cache", func() bool {
		o, ok := inf.Store().Get("default/added")
		mu.Lock()
		defer mu.Unlock()
		return ok && o.GetPod().GetSpec().GetActiveDeadlineSeconds() == 60 && deleted["default/listed"]
	})
	want, err := listView(t, c, "Pod")
	if err != nil {
		t.Fatal(err)
	}
	if got := cacheView(inf); !equalViews(got, want) {
		t.Errorf("cache %v, want the apiserver's resourceVersions %v", got, want)
	}
	for _, o := range inf.Store().List() {
		if len(o.Meta().GetLabels()) > 0 {
			t.Errorf("cached %s has labels %v; the transform cleared them", o.Key(), o.Meta().GetLabels())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(labelled) > 0 {
		t.Errorf("handlers got %v with labels; the transform cleared them", labelled)
	}
}

// A transform that returns nil leaves the object as received.
func TestTransformNilKeepsObject(t *testing.T) {
	_, c := startServer(t)
	if _, err := client.Pods(c).Create(context.Background(), pod("p", map[string]string{"app": "a"})); err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(c, informer.Options{Selection: informer.Selection{Kind: "Pod"}, Backoff: fastBackoff,
		Transform: func(*kplanev1.Object) *kplanev1.Object { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	if o, ok := inf.Store().Get("default/p"); !ok || o.Meta().GetLabels()["app"] != "a" {
		t.Fatalf("cached %v (found %v), want the pod as the apiserver has it", o, ok)
	}
}

// ForKindTrimmed trims in a factory of its own (one loop, one binary)
// and leaves objects whole through a Scoped view, whose informers other
// loops of the process share; a second trim of the same informer fails.
func TestForKindTrimmed(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := client.Pods(c).Create(ctx, pod("p", map[string]string{"app": "a"})); err != nil {
		t.Fatal(err)
	}
	strip := func(o *kplanev1.Object) *kplanev1.Object {
		o.Meta().Labels = nil
		return o
	}
	labelsOf := func(f *informer.Factory, inf *informer.Informer) map[string]string {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		t.Cleanup(func() { cancel(); f.Wait() })
		f.Start(rctx)
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		defer scancel()
		if !f.WaitForCacheSync(sctx) {
			t.Fatal("the informer did not sync")
		}
		o, ok := inf.Store().Get("default/p")
		if !ok {
			t.Fatal("pod p is not cached")
		}
		return o.Meta().GetLabels()
	}

	own, err := informer.NewFactory(c, informer.FactoryOptions{Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := own.ForKindTrimmed("Pod", strip)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.ForKindTrimmed("Pod", strip); err == nil {
		t.Fatal("a second trim of one informer succeeded; want an error")
	}
	if l := labelsOf(own, inf); len(l) != 0 {
		t.Errorf("a factory of its own cached labels %v; want them trimmed", l)
	}

	shared, err := informer.NewFactory(c, informer.FactoryOptions{Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	view := shared.Scoped()
	vinf, err := view.ForKindTrimmed("Pod", strip)
	if err != nil {
		t.Fatal(err)
	}
	if l := labelsOf(shared, vinf); l["app"] != "a" {
		t.Errorf("a Scoped view cached labels %v; want the pod whole (app=a)", l)
	}
}
