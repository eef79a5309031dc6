package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func clientset(t *testing.T, srv *testserver.Server) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func int32p(v int32) *int32 { return &v }

func goRS(name string, replicas int32) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: int32p(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
}

// TestClientGoTyped: client-go's typed clientset creates, reads, lists,
// updates (with a conflict on a stale resourceVersion), patches and
// deletes, and sees Kubernetes' error kinds.
func TestClientGoTyped(t *testing.T) {
	srv := testserver.Start(t)
	cs := clientset(t, srv)
	ctx := t.Context()
	rss := cs.AppsV1().ReplicaSets("default")

	created, err := rss.Create(ctx, goRS("web", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.Generation != 1 {
		t.Errorf("created: %+v", created.ObjectMeta)
	}
	if _, err := rss.Create(ctx, goRS("web", 2), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}
	if _, err := rss.Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get missing: %v, want NotFound", err)
	}
	bad := goRS("bad", -1)
	if _, err := rss.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("invalid create: %v, want Invalid", err)
	}
	got, err := rss.Get(ctx, "web", metav1.GetOptions{})
	if err != nil || *got.Spec.Replicas != 2 || got.Spec.Template.Spec.Containers[0].Image != "nginx" {
		t.Fatalf("get: %v %+v", err, got)
	}
	got.Spec.Replicas = int32p(3)
	updated, err := rss.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil || *updated.Spec.Replicas != 3 {
		t.Fatalf("update: %v", err)
	}
	if _, err := rss.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale update: %v, want Conflict", err)
	}
	patched, err := rss.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
	if err != nil || *patched.Spec.Replicas != 4 {
		t.Fatalf("patch: %v", err)
	}
	list, err := rss.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(list.Items) != 1 || list.ResourceVersion == "" {
		t.Fatalf("list: %v %+v", err, list)
	}
	if err := rss.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rss.Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}

// TestClientGoInformer: a SharedInformerFactory's handler sees a create,
// an update and a delete made after it synced, each once.
func TestClientGoInformer(t *testing.T) {
	srv := testserver.Start(t)
	cs := clientset(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rss := cs.AppsV1().ReplicaSets("default")
	if _, err := rss.Create(ctx, goRS("before", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []string
	changed := make(chan struct{}, 16)
	record := func(s string) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
		changed <- struct{}{}
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Apps().V1().ReplicaSets().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { record("add " + o.(*appsv1.ReplicaSet).Name) },
		UpdateFunc: func(_, o any) {
			record("update " + o.(*appsv1.ReplicaSet).Name + " " + string(rune('0'+*o.(*appsv1.ReplicaSet).Spec.Replicas)))
		},
		DeleteFunc: func(o any) { record("delete " + o.(*appsv1.ReplicaSet).Name) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	defer func() {
		cancel() // Shutdown waits for the informers, which stop on ctx
		f.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if _, err := rss.Create(ctx, goRS("web", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rss.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rss.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"add before", "add web", "update web 2", "delete web"}
	deadline := time.After(20 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("informer saw %v, want %v", seen, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("informer saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("informer saw %v, want %v", seen, want)
		}
	}
}

// TestClientGoLeaderElection: client-go's leader election with a
// LeaseLock in coordination.k8s.io/v1 elects exactly one of two
// candidates, and the other takes over once the leader releases.
func TestClientGoLeaderElection(t *testing.T) {
	srv := testserver.Start(t)
	cs := clientset(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type candidate struct {
		cancel  context.CancelFunc
		leading chan struct{}
		done    chan struct{}
	}
	var mu sync.Mutex
	leaders := 0
	start := func(id string) *candidate {
		c := &candidate{leading: make(chan struct{}), done: make(chan struct{})}
		cctx, ccancel := context.WithCancel(ctx)
		c.cancel = ccancel
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: "clientgo-test", Namespace: "kplane-system"},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					mu.Lock()
					leaders++
					mu.Unlock()
					close(c.leading)
				},
				OnStoppedLeading: func() {
					mu.Lock()
					leaders--
					mu.Unlock()
				},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(c.done)
			le.Run(cctx)
		}()
		return c
	}
	a, b := start("a"), start("b")
	var first, second *candidate
	select {
	case <-a.leading:
		first, second = a, b
	case <-b.leading:
		first, second = b, a
	case <-time.After(30 * time.Second):
		t.Fatal("no candidate was elected")
	}
	mu.Lock()
	if leaders != 1 {
		t.Errorf("%d leaders, want 1", leaders)
	}
	mu.Unlock()
	lease, err := cs.CoordinationV1().Leases("kplane-system").Get(ctx, "clientgo-test", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("lease: %v %+v", err, lease)
	}
	first.cancel()
	<-first.done
	select {
	case <-second.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("the second candidate did not take over after the leader released")
	}
	second.cancel()
	<-second.done
}
