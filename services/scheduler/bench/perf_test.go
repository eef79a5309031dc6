package bench_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/scheduler/internal/scheduler"
)

// perfNodes is the size of the scheduler_perf-like cluster: Node objects
// only (8 cpu, 32Gi, 110 pods, 10 zones), no node agent, since only the
// decisions and bindings are measured.
const perfNodes = 1000

// BenchmarkSchedulerPerf measures kube-scheduler's scheduler_perf shapes
// on 1,000 nodes: the pods exist before the scheduler starts, and the
// rate is pods bound per second from its start to the last binding.
//
//   - plain: 2,000 pods of 100m;
//   - anti-affinity: 1,000 pods, each with required anti-affinity to the
//     others by hostname (one per node);
//   - spread: 2,000 pods with a DoNotSchedule zone spread (maxSkew 1);
//   - preemption: 1,000 low-priority pods fill every node; 1,000
//     high-priority pods, each needing a whole node, preempt them (the
//     benchmark plays the node agents and removes deleted victims);
//   - replicaset: 2,000 pods of a ReplicaSet (so the system default
//     spread by hostname and zone applies, with the set's selector) on
//     top of SCHEDULER_PERF_PLACED (default 20,000; 0 allowed) pods of
//     the same set already bound round-robin: what bench-scale's
//     scheduler does once pods have accumulated.
func BenchmarkSchedulerPerf(b *testing.B) {
	for _, shape := range []string{"plain", "anti-affinity", "spread", "preemption", "replicaset"}[:shapes()] {
		b.Run(shape, func(b *testing.B) {
			for range b.N {
				runShape(b, shape)
			}
		})
	}
}

func perfPod(name string, cpu string, mods ...func(*kplanev1.Pod)) *kplanev1.Pod {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "perf"}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "registry.example/web:1",
			Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu, "memory": "64Mi"}}}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// parallel runs fn(i) for i in [0, n) on 32 goroutines.
func parallel(b *testing.B, n int, fn func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Fatalf("%d calls failed, first: %v", failed.Load(), firstErr.Load())
	}
}

func runShape(b *testing.B, shape string) {
	b.StopTimer()
	srv := testserver.Start(b, testserver.WithLogger(hclog.NewNullLogger()))
	ctx, cancel := context.WithTimeout(context.Background(), limit+2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	alloc := map[string]string{"cpu": "8", "memory": "32Gi", "pods": "110"}
	parallel(b, perfNodes, func(i int) error {
		n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{
			kplanev1.LabelHostname: fmt.Sprintf("node-%d", i), "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%10)}},
			Spec: &kplanev1.NodeSpec{}}
		created, err := client.Nodes(c).Create(ctx, n)
		if err != nil {
			return err
		}
		created.Status = &kplanev1.NodeStatus{Capacity: alloc, Allocatable: alloc, Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}}
		_, err = client.Nodes(c).UpdateStatus(ctx, created)
		return err
	})

	var pods []*kplanev1.Pod
	measured := "perf-"
	switch shape {
	case "plain":
		for i := range 2000 {
			pods = append(pods, perfPod(fmt.Sprintf("perf-%d", i), "100m"))
		}
	case "anti-affinity":
		anti := func(p *kplanev1.Pod) {
			p.Spec.Affinity = &kplanev1.Affinity{PodAntiAffinity: &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{{
				TopologyKey: kplanev1.LabelHostname, LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "perf"}}}}}}
		}
		for i := range perfNodes {
			pods = append(pods, perfPod(fmt.Sprintf("perf-%d", i), "100m", anti))
		}
	case "spread":
		spread := func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
				WhenUnsatisfiable: "DoNotSchedule", LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "perf"}}}}
		}
		for i := range 2000 {
			pods = append(pods, perfPod(fmt.Sprintf("perf-%d", i), "100m", spread))
		}
	case "preemption":
		for name, v := range map[string]int32{"low": 1, "high": 1000} {
			if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: name}, Value: v})}); err != nil {
				b.Fatal(err)
			}
		}
		parallel(b, perfNodes, func(i int) error {
			_, err := client.Pods(c).Create(ctx, perfPod(fmt.Sprintf("low-%d", i), "8", func(p *kplanev1.Pod) {
				p.Spec.NodeName = fmt.Sprintf("node-%d", i)
				p.Spec.PriorityClassName = "low"
				p.Spec.TerminationGracePeriodSeconds = proto.Int64(1)
			}))
			return err
		})
		for i := range perfNodes {
			pods = append(pods, perfPod(fmt.Sprintf("perf-%d", i), "8", func(p *kplanev1.Pod) { p.Spec.PriorityClassName = "high" }))
		}
	case "replicaset":
		app := map[string]string{"app": "perf"}
		rs, err := c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ReplicaSet{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "perf"},
			Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(0), Selector: &kplanev1.LabelSelector{MatchLabels: app},
				Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: app},
					Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "registry.example/web:1"}}}}}})})
		if err != nil {
			b.Fatal(err)
		}
		owned := func(p *kplanev1.Pod) {
			p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "perf", Uid: rs.GetObject().Meta().GetUid(), Controller: true}}
		}
		parallel(b, placedPods(b), func(i int) error {
			_, err := client.Pods(c).Create(ctx, perfPod(fmt.Sprintf("placed-%d", i), "10m", owned, func(p *kplanev1.Pod) {
				p.Spec.NodeName = fmt.Sprintf("node-%d", i%perfNodes)
			}))
			return err
		})
		for i := range 2000 {
			pods = append(pods, perfPod(fmt.Sprintf("perf-%d", i), "10m", owned))
		}
	}

	// Watch bindings of the measured pods; play the node agents by
	// removing pods being deleted (preemption's victims).
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := client.Pods(c).Watch(wctx, "default", client.WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	bound := map[string]bool{}
	var last time.Time
	all := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		defer w.Stop()
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			p := ev.Object
			if p == nil {
				continue
			}
			if p.GetMetadata().GetDeletionTimestamp() != nil && ev.Type != kplanev1.EventType_EVENT_TYPE_DELETED {
				go func() {
					_, _ = c.Delete(wctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: p.GetMetadata().GetName(), GracePeriodSeconds: proto.Int64(0)})
				}()
			}
			if !strings.HasPrefix(p.GetMetadata().GetName(), measured) || p.GetSpec().GetNodeName() == "" {
				continue
			}
			mu.Lock()
			if !bound[p.GetMetadata().GetName()] {
				bound[p.GetMetadata().GetName()] = true
				last = time.Now()
				if len(bound) == len(pods) {
					close(all)
				}
			}
			mu.Unlock()
		}
	}()
	parallel(b, len(pods), func(i int) error {
		_, err := client.Pods(c).Create(ctx, pods[i])
		return err
	})

	b.StartTimer()
	start := time.Now()
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		args := []string{"--apiserver", srv.Addr(), "--health-addr", "", "--leader-elect=false", "--log-level", "warn"}
		args = append(args, strings.Fields(os.Getenv("SCHEDULER_BENCH_FLAGS"))...)
		done <- app.Run(sctx, scheduler.NewService(nil), args)
	}()
	complete := true
	select {
	case <-all:
	case <-time.After(limit):
		complete = false
	}
	b.StopTimer()
	scancel()
	if err := <-done; err != nil {
		b.Errorf("scheduler: %v", err)
	}
	stopWatch()
	<-watchDone
	mu.Lock()
	n, end := len(bound), last
	mu.Unlock()
	if n == 0 {
		b.Fatalf("no pod was bound")
	}
	rate := float64(n) / end.Sub(start).Seconds()
	b.ReportMetric(rate, "pods/s")
	fmt.Printf("scheduler perf [%s] %d nodes, %d pods: bound %d (complete=%v) in %v: %.0f pods/s\n",
		shape, perfNodes, len(pods), n, complete, end.Sub(start).Round(time.Millisecond), rate)
}

// shapes is how many of the shapes to run: SCHEDULER_PERF_SHAPES=1 runs
// only plain (for profiling), all five by default.
func shapes() int {
	if os.Getenv("SCHEDULER_PERF_SHAPES") == "1" {
		return 1
	}
	return 5
}

// placedPods is how many pods the replicaset shape binds before the
// scheduler starts: SCHEDULER_PERF_PLACED, 20,000 by default.
func placedPods(b *testing.B) int {
	v := os.Getenv("SCHEDULER_PERF_PLACED")
	if v == "" {
		return 20000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("SCHEDULER_PERF_PLACED=%q: want a count", v)
	}
	return n
}
