package watchcache

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/backend"
	"github.com/kplane/kplane/services/apiserver/internal/store"
)

// benchRunningPod is a pod as a ReplicaSet and a node agent leave it
// Running: labels and an owner reference, one container with a command,
// bound to a node, with four conditions and a running container status.
func benchRunningPod(i int, ownerUID string) *kplanev1.Object {
	started := timestamppb.New(time.Unix(1700000000, 0))
	uid := uuid.NewString()
	node := i % 1000
	hostIP := fmt.Sprintf("10.0.%d.%d", node/250, node%250+1)
	podIP := fmt.Sprintf("10.%d.%d.%d", 64+node/256, node%256, i/1000%250+2)
	cond := func(t string) *kplanev1.Condition {
		return &kplanev1.Condition{Type: t, Status: kplanev1.ConditionTrue, LastTransitionTime: started}
	}
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("web-7c9f8d6b5-%05d", i), Namespace: "default", Uid: uid,
			CreationTimestamp: started, Generation: 1,
			Labels: map[string]string{"app": "web", "pod-template-hash": "7c9f8d6b5"},
			OwnerReferences: []*kplanev1.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c9f8d6b5", Uid: ownerUID,
				Controller: true, BlockOwnerDeletion: true}}},
		Spec: &kplanev1.PodSpec{
			Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25", Command: []string{"nginx", "-g", "daemon off;"}}},
			NodeName:   fmt.Sprintf("node-%04d", node), ServiceAccountName: "default", RestartPolicy: "Always"},
		Status: &kplanev1.PodStatus{
			Phase: kplanev1.PodRunning, HostIp: hostIP, HostIps: []*kplanev1.HostIP{{Ip: hostIP}},
			PodIp: podIP, PodIps: []*kplanev1.PodIP{{Ip: podIP}}, StartTime: started,
			Conditions: []*kplanev1.Condition{cond(kplanev1.PodInitialized), cond(kplanev1.PodReady),
				cond(kplanev1.ContainersReady), cond(kplanev1.PodScheduled)},
			ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "app", Image: "nginx:1.25", ImageId: "docker.io/library/nginx@sha256:0123456789abcdef",
				Ready: true, Started: proto.Bool(true), ContainerId: "containerd://" + uid,
				State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: started}}}},
		},
	})
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkStateBytes loads WATCHCACHE_BENCH_PODS (default 20,000)
// Running pods from embedded etcd into a Pod cache and reports the live
// heap the cache holds per object, after the load and after one List of
// every object (which gives every object its wire form).
func BenchmarkStateBytes(b *testing.B) {
	n := testutil.EnvInt(b, "WATCHCACHE_BENCH_PODS", 20000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	be, err := backend.Open(ctx, backend.Config{DataDir: b.TempDir(), UnsafeNoFsync: true, Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = be.Close() }() // benchmark teardown
	owner := uuid.NewString()
	kind := kplanev1.LookupKind("Pod")
	if err := testutil.ForEach(n, 8, func(i int) error {
		obj := benchRunningPod(i, owner)
		v, err := store.Encode(obj)
		if err != nil {
			return err
		}
		_, err = be.Client.Put(ctx, store.KindPrefix(kind)+obj.Key(), string(v))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var perLoad, perListed float64
	for range b.N {
		before := liveHeap()
		c := New(Config{Kind: kind, Client: be.Client})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(runCtx)
		}()
		select {
		case <-c.Ready():
		case <-ctx.Done():
			b.Fatal("cache not ready")
		}
		loaded := liveHeap()
		snap := c.Select("", everything{})
		if len(snap.Entries) != n {
			b.Fatalf("listed %d objects, want %d", len(snap.Entries), n)
		}
		for _, e := range snap.Entries {
			if e.Encoded() == nil {
				b.Fatal("an entry has no wire form")
			}
		}
		snap = nil
		listed := liveHeap()
		perLoad = float64(loaded-before) / float64(n)
		perListed = float64(listed-before) / float64(n)
		runtime.KeepAlive(c)
		stop()
		<-done
	}
	b.ReportMetric(perLoad, "heapB/obj-loaded")
	b.ReportMetric(perListed, "heapB/obj-listed")
}

// BenchmarkRingBytes applies 10,000 Running pods, then a status update
// of each, to a Pod cache whose ring holds 10,000 events (the default),
// and reports the live heap per object: the state and a full ring, as
// the apiserver holds them during a large rollout.
func BenchmarkRingBytes(b *testing.B) {
	const n = 10000
	owner := uuid.NewString()
	pods := make([]*kplanev1.Object, n)
	for i := range pods {
		pods[i] = benchRunningPod(i, owner)
	}
	added := putEvents(b, pods, 10)
	for _, p := range pods {
		p.GetPod().Status.Message = "updated"
	}
	modified := putEvents(b, pods, 10+n)
	var perObj float64
	for range b.N {
		before := liveHeap()
		c := New(Config{Kind: kplanev1.LookupKind("Pod"), Capacity: n})
		c.loaded, c.readyClosed = true, true
		close(c.ready)
		c.apply(added)
		c.apply(modified)
		perObj = float64(liveHeap()-before) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perObj, "heapB/obj")
}
