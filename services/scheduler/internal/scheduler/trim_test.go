package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/framework/plugins"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// runningPod is a realistic pod of a ReplicaSet, Running on node: what a
// node agent reports for a web server, with the fields Kubernetes users
// write (image, command, env, probes, mounts) and the status the agent
// writes (conditions, container status, IPs).
func runningPod(name, node string) *kplanev1.Pod {
	created := timestamppb.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	started := timestamppb.New(time.Date(2025, 3, 1, 12, 0, 3, 0, time.UTC))
	cond := func(typ string) *kplanev1.Condition {
		return &kplanev1.Condition{Type: typ, Status: kplanev1.ConditionTrue, LastTransitionTime: started}
	}
	return &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{
			Name: name, GenerateName: "web-7d9f8b6c5-", Namespace: "default", Uid: "7f3c1e2a-5b4d-4c3e-9a8b-" + fmt.Sprintf("%012d", len(name)),
			ResourceVersion: "123456", Generation: 1, CreationTimestamp: created,
			Labels:      map[string]string{"app": "web", "tier": "frontend", "pod-template-hash": "7d9f8b6c5"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2025-03-01T11:59:00Z", "prometheus.io/scrape": "true"},
			OwnerReferences: []*kplanev1.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8b6c5",
				Uid: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", Controller: true, BlockOwnerDeletion: true}},
		},
		Spec: &kplanev1.PodSpec{
			NodeName: node, RestartPolicy: "Always", ServiceAccountName: "default", SchedulerName: kplanev1.DefaultSchedulerName,
			TerminationGracePeriodSeconds: proto.Int64(30), PriorityClassName: "normal", Priority: 100,
			Tolerations: []*kplanev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(300)},
				{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(300)},
			},
			Volumes: []*kplanev1.Volume{{Name: "cache", EmptyDir: &kplanev1.EmptyDirVolumeSource{}},
				{Name: "tls", Secret: &kplanev1.SecretVolumeSource{SecretName: "web-tls"}}},
			Containers: []*kplanev1.Container{{
				Name: "web", Image: "registry.example.com/team/web:1.24.3", ImagePullPolicy: "IfNotPresent",
				Command: []string{"/bin/web"}, Args: []string{"--listen=:8080", "--log-format=json"},
				Env:   []*kplanev1.EnvVar{{Name: "GOMAXPROCS", Value: "2"}, {Name: "LOG_LEVEL", Value: "info"}, {Name: "CACHE_DIR", Value: "/var/cache/web"}},
				Ports: []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: "TCP"}, {Name: "metrics", ContainerPort: 9090, Protocol: "TCP"}},
				Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "250m", "memory": "256Mi"},
					Limits: map[string]string{"cpu": "1", "memory": "512Mi"}},
				ReadinessProbe: &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/healthz", Port: &kplanev1.IntOrString{IntVal: 8080}},
					PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
				LivenessProbe: &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/livez", Port: &kplanev1.IntOrString{IntVal: 8080}},
					InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
				VolumeMounts:           []*kplanev1.VolumeMount{{Name: "cache", MountPath: "/var/cache/web"}, {Name: "tls", MountPath: "/etc/tls", ReadOnly: true}},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File",
			}},
		},
		Status: &kplanev1.PodStatus{
			Phase:      kplanev1.PodRunning,
			Conditions: []*kplanev1.Condition{cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond(kplanev1.PodScheduled)},
			HostIp:     "10.0.3.17", HostIps: []*kplanev1.HostIP{{Ip: "10.0.3.17"}},
			PodIp: "10.244.3.42", PodIps: []*kplanev1.PodIP{{Ip: "10.244.3.42"}},
			StartTime: started, QosClass: "Burstable",
			ContainerStatuses: []*kplanev1.ContainerStatus{{
				Name: "web", Ready: true, Started: proto.Bool(true), Image: "registry.example.com/team/web:1.24.3",
				ImageId:     "registry.example.com/team/web@sha256:4f1d3c2b1a0e9f8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d",
				ContainerId: "kplane://3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d",
				State:       &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: started}},
			}},
		},
	}
}

func trim(p *kplanev1.Pod) *kplanev1.Pod {
	return trimAssignedPod(kplanev1.MustWrap(proto.Clone(p))).GetPod()
}

// The transform keeps exactly what the scheduler reads of an assigned
// pod (see trimAssignedPod) and leaves a pending pod as it is.
func TestTrimAssignedPod(t *testing.T) {
	full := runningPod("web-7d9f8b6c5-x2k4q", "node-1")
	full.Metadata.DeletionTimestamp = timestamppb.New(time.Date(2025, 3, 2, 0, 0, 0, 0, time.UTC))
	full.Metadata.Finalizers = []string{"example.com/drain"}
	full.Metadata.OwnerReferences = append([]*kplanev1.OwnerReference{{ApiVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", Uid: "cm-uid"}},
		full.Metadata.OwnerReferences...)
	full.Metadata.ManagedFields = []*kplanev1.ManagedFieldsEntry{{Manager: "kubectl", Operation: "Apply"}}
	full.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	podAffinity := &kplanev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []*kplanev1.WeightedPodAffinityTerm{{Weight: 10,
		PodAffinityTerm: &kplanev1.PodAffinityTerm{LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}, TopologyKey: "zone"}}}}
	antiAffinity := &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{
		{LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: kplanev1.LabelHostname}}}
	full.Spec.Affinity = &kplanev1.Affinity{PodAffinity: podAffinity, PodAntiAffinity: antiAffinity,
		NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{
			NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "disk", Operator: "In", Values: []string{"ssd"}}}}}}}}
	full.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: "DoNotSchedule"}}
	full.Spec.PreemptionPolicy = proto.String(kplanev1.PreemptNever)
	full.Spec.Containers[0].Ports = append(full.Spec.Containers[0].Ports, &kplanev1.ContainerPort{Name: "host", ContainerPort: 53, HostPort: 5353, Protocol: "UDP"})
	full.Spec.InitContainers = []*kplanev1.Container{{Name: "migrate", Image: "registry.example.com/team/migrate:3", Command: []string{"/migrate"},
		Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "1"}, Limits: map[string]string{"cpu": "2"}}}}
	full.Status.NominatedNodeName = "node-9"

	want := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: full.Metadata.Name, Namespace: "default", Uid: full.Metadata.Uid, ResourceVersion: "123456",
			CreationTimestamp: full.Metadata.CreationTimestamp, DeletionTimestamp: full.Metadata.DeletionTimestamp, Labels: full.Metadata.Labels,
			OwnerReferences: []*kplanev1.OwnerReference{{Uid: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", Controller: true}}},
		Spec: &kplanev1.PodSpec{NodeName: "node-1", Priority: 100,
			Containers: []*kplanev1.Container{{Name: "web", Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "250m", "memory": "256Mi"}},
				Ports: []*kplanev1.ContainerPort{{HostPort: 5353, Protocol: "UDP"}}}},
			InitContainers: []*kplanev1.Container{{Name: "migrate", Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "1"}}}},
			Affinity:       &kplanev1.Affinity{PodAffinity: podAffinity, PodAntiAffinity: antiAffinity}},
	}
	got := trim(full)
	if !proto.Equal(got, want) {
		t.Fatalf("trimmed pod:\n%v\nwant:\n%v", got, want)
	}
	// A finished pod keeps its phase (it frees its node); the pods of one
	// owner share one owner list.
	done := proto.Clone(full).(*kplanev1.Pod)
	done.Status.Phase = kplanev1.PodSucceeded
	if got := trim(done); got.GetStatus().GetPhase() != kplanev1.PodSucceeded {
		t.Fatalf("a finished pod trimmed to status %v; want its phase kept", got.GetStatus())
	} else if &got.GetMetadata().GetOwnerReferences()[0] != &trim(full).GetMetadata().GetOwnerReferences()[0] {
		t.Error("two pods of one owner do not share the trimmed owner list")
	}
	// What the cache parses of it is what it parses of the whole pod, as
	// far as an assigned pod's info is read (its own node selector and
	// tolerations are read only while it is being scheduled).
	a, err := core.NewPodInfo(full)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.NewPodInfo(got)
	if err != nil {
		t.Fatal(err)
	}
	a.Pod, b.Pod = nil, nil
	a.NodeSelector, a.Tolerations = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("parsed trimmed pod %+v\nwant %+v", b, a)
	}
	if n, f := proto.Size(got), proto.Size(full); n*3 > f {
		t.Errorf("trimmed pod is %d bytes encoded of %d; want at most a third", n, f)
	}

	// A pending pod is the scheduler's to write: it stays whole.
	pending := runningPod("pending", "")
	pending.Status = &kplanev1.PodStatus{Phase: kplanev1.PodPending, Conditions: []*kplanev1.Condition{{Type: kplanev1.PodScheduled, Status: kplanev1.ConditionFalse}}}
	o := kplanev1.MustWrap(proto.Clone(pending))
	if out := trimAssignedPod(o); out != o || !proto.Equal(out.GetPod(), pending) {
		t.Fatalf("pending pod changed: %v", out)
	}
}

// recordingAPI answers what preemption's eviction asks (Get, UpdateStatus,
// Delete) from whole pods and records the deletions.
type recordingAPI struct {
	kplanev1.ResourcesClient
	pods map[string]*kplanev1.Pod

	mu      sync.Mutex
	deleted []string
}

func (r *recordingAPI) Get(_ context.Context, req *kplanev1.GetRequest, _ ...grpc.CallOption) (*kplanev1.GetResponse, error) {
	return &kplanev1.GetResponse{Object: kplanev1.MustWrap(proto.Clone(r.pods[req.GetName()]))}, nil
}

func (r *recordingAPI) UpdateStatus(_ context.Context, req *kplanev1.UpdateStatusRequest, _ ...grpc.CallOption) (*kplanev1.UpdateStatusResponse, error) {
	return &kplanev1.UpdateStatusResponse{Object: req.GetObject()}, nil
}

func (r *recordingAPI) Delete(_ context.Context, req *kplanev1.DeleteRequest, _ ...grpc.CallOption) (*kplanev1.DeleteResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deleted = append(r.deleted, req.GetName())
	return &kplanev1.DeleteResponse{}, nil
}

// stubHandle is a framework.Handle without a scheduler: empty informers
// (never started), Go runs at once.
type stubHandle struct{ api kplanev1.ResourcesClient }

func (h stubHandle) Client() kplanev1.ResourcesClient { return h.api }
func (h stubHandle) Informer(kind string) *informer.Informer {
	inf, err := informer.New(nil, informer.Options{Selection: informer.Selection{Kind: kind}})
	if err != nil {
		panic(err)
	}
	return inf
}
func (stubHandle) Logger() hclog.Logger                           { return hclog.NewNullLogger() }
func (stubHandle) WaitingPod(string) framework.WaitingPod         { return nil }
func (stubHandle) Event(*kplanev1.Object, string, string, string) {}
func (stubHandle) Go(fn func(context.Context))                    { fn(context.Background()) }

// Every default plugin decides the same with the cache holding the
// assigned pods trimmed as whole: filters, scores and preemption (its
// node and victims), for pods that exercise what is read of the existing
// ones (requests and init containers, host ports, owners, labels and
// namespaces, pod (anti-)affinity both ways, spreading, priorities,
// creation and deletion timestamps, finished pods).
func TestTrimmedCacheDecidesAlike(t *testing.T) {
	type opt func(*kplanev1.Pod)
	labels := func(kv ...string) opt {
		return func(p *kplanev1.Pod) {
			p.Metadata.Labels = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				p.Metadata.Labels[kv[i]] = kv[i+1]
			}
		}
	}
	cpu := func(c string) opt {
		return func(p *kplanev1.Pod) { p.Spec.Containers[0].Resources.Requests["cpu"] = c }
	}
	prio := func(v int32) opt { return func(p *kplanev1.Pod) { p.Spec.Priority = v } }
	age := func(h int) opt {
		return func(p *kplanev1.Pod) {
			p.Metadata.CreationTimestamp = timestamppb.New(time.Date(2025, 1, 1, h, 0, 0, 0, time.UTC))
		}
	}
	hostPort := func(port int32) opt {
		return func(p *kplanev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, &kplanev1.ContainerPort{ContainerPort: port, HostPort: port})
		}
	}
	term := func(app, key string) *kplanev1.PodAffinityTerm {
		return &kplanev1.PodAffinityTerm{LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: key}
	}
	antiRequired := func(app string) opt {
		return func(p *kplanev1.Pod) {
			p.Spec.Affinity = &kplanev1.Affinity{PodAntiAffinity: &kplanev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{term(app, kplanev1.LabelHostname)}}}
		}
	}
	affinityPreferred := func(app string) opt {
		return func(p *kplanev1.Pod) {
			p.Spec.Affinity = &kplanev1.Affinity{PodAffinity: &kplanev1.PodAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []*kplanev1.WeightedPodAffinityTerm{{Weight: 50, PodAffinityTerm: term(app, "zone")}},
				RequiredDuringSchedulingIgnoredDuringExecution:  []*kplanev1.PodAffinityTerm{term(app, "zone")}}}
		}
	}
	existing := func(name, node string, opts ...opt) *kplanev1.Pod {
		p := runningPod(name, node)
		p.Metadata.Uid = "uid-" + name
		for _, o := range opts {
			o(p)
		}
		return p
	}
	pods := []*kplanev1.Pod{
		existing("e1", "n1", labels("app", "web"), cpu("1"), prio(10), hostPort(8080), age(1)),
		existing("e2", "n1", labels("app", "db"), cpu("1"), prio(100), antiRequired("web"), age(2), func(p *kplanev1.Pod) {
			p.Spec.InitContainers = []*kplanev1.Container{{Name: "init", Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "2"}}}}
		}),
		existing("e3", "n2", labels("app", "web"), cpu("1"), prio(5), affinityPreferred("api"), age(3)),
		existing("e4", "n2", labels("app", "web"), cpu("1"), prio(1), age(4), func(p *kplanev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() }),
		existing("e5", "n3", labels("app", "cache"), cpu("1500m"), prio(1), age(5)),
		existing("e6", "n3", labels("app", "cache"), cpu("1"), prio(1), age(6)),
		existing("e7", "n3", labels("app", "web"), cpu("4"), prio(1), func(p *kplanev1.Pod) { p.Status.Phase = kplanev1.PodSucceeded }),
		existing("e8", "n3", labels("app", "web"), cpu("500m"), prio(1), age(7), func(p *kplanev1.Pod) { p.Metadata.Namespace = "other" }),
	}
	incoming := []*kplanev1.Pod{
		existing("plain", "", labels("app", "web"), cpu("1")),
		existing("port", "", labels("app", "api"), cpu("100m"), hostPort(8080)),
		existing("anti", "", labels("app", "x"), cpu("100m"), antiRequired("web")),
		existing("joins-db", "", labels("app", "db"), cpu("100m"), affinityPreferred("db")),
		existing("spread", "", labels("app", "web"), cpu("100m"), func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: "DoNotSchedule",
				LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
		}),
		existing("urgent", "", labels("app", "batch"), cpu("2100m"), prio(1000)),
		existing("urgent-web", "", labels("app", "web"), cpu("3"), prio(50)),
	}
	for _, p := range incoming {
		p.Status = nil
	}

	type outcome struct {
		Filters    map[string]string
		Scores     []int64
		Nominated  string
		PostFilter string
		Victims    []string
	}
	decide := func(trimmed bool) map[string]outcome {
		cache := core.NewCache(time.Minute, nil, 1)
		for i, n := range []string{"n1", "n2", "n3"} {
			alloc := map[string]string{"cpu": "4", "memory": "16Gi", "pods": "110"}
			cache.SetNode(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: n, Labels: map[string]string{kplanev1.LabelHostname: n, "zone": []string{"a", "a", "b"}[i]}},
				Status: &kplanev1.NodeStatus{Allocatable: alloc, Conditions: []*kplanev1.Condition{{Type: kplanev1.NodeReady, Status: kplanev1.ConditionTrue}}}})
		}
		whole := map[string]*kplanev1.Pod{}
		for _, p := range pods {
			whole[p.Metadata.Name] = p
			cached := proto.Clone(p).(*kplanev1.Pod)
			if trimmed {
				cached = trim(p)
			}
			cache.SyncPod(cached)
		}
		out := map[string]outcome{}
		for _, p := range incoming {
			api := &recordingAPI{pods: whole}
			cfg, err := framework.ParseConfig([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"))
			if err != nil {
				t.Fatal(err)
			}
			profiles, err := framework.NewProfiles(cfg, plugins.NewInTreeRegistry(), plugins.DefaultPlugins(), stubHandle{api: api}, 1)
			if err != nil {
				t.Fatal(err)
			}
			fwk := profiles[kplanev1.DefaultSchedulerName]
			info, err := core.NewPodInfo(p)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			nodes := cache.Snapshot()
			state := framework.NewCycleState()
			state.SetNodes(nodes)
			fwk.UseFilters(state)
			o := outcome{Filters: map[string]string{}}
			filtered := framework.NodeToStatus{}
			if st := fwk.RunPreFilterPlugins(ctx, state, info); !st.IsSuccess() {
				t.Fatalf("%s: prefilter: %v", p.Metadata.Name, st.AsError())
			}
			for _, n := range nodes {
				st := fwk.RunFilterPlugins(ctx, state, info, n)
				o.Filters[n.Name] = fmt.Sprintf("%v %s", st.Code(), st.Message())
				if !st.IsSuccess() {
					filtered[n.Name] = st
				}
			}
			if o.Scores, err = fwk.RunScorePlugins(ctx, state, info, nodes); err != nil {
				t.Fatal(err)
			}
			if len(filtered) == len(nodes) {
				res, st := fwk.RunPostFilterPlugins(ctx, state, info, nodes, filtered)
				o.PostFilter = fmt.Sprintf("%v %s", st.Code(), st.Message())
				if res != nil {
					o.Nominated = res.NominatedNodeName
				}
				o.Victims = slices.Sorted(slices.Values(api.deleted))
			}
			out[p.Metadata.Name] = o
		}
		return out
	}
	want, got := decide(false), decide(true)
	for name, w := range want {
		if g := got[name]; !reflect.DeepEqual(g, w) {
			t.Errorf("%s with a trimmed cache: %+v\nwith whole pods: %+v", name, g, w)
		}
	}
	// The cases are meant to reach each kind of decision.
	if v := want["urgent"].Victims; len(v) == 0 {
		t.Errorf("urgent preempted nothing (%+v): the case no longer tests victims", want["urgent"])
	}
	if f := want["port"].Filters["n1"]; f == "Success " {
		t.Errorf("port fits n1 (%s): the case no longer tests host ports", f)
	}
	if f := want["plain"].Filters["n1"]; f == "Success " {
		t.Errorf("plain fits n1 (%s): the case no longer tests existing anti-affinity", f)
	}
}

// BenchmarkAssignedPodMemory measures the live heap of the scheduler's
// cached copy of a Running pod, whole and trimmed by trimAssignedPod:
// 20,000 pods are decoded from the wire form (as the informer gets them)
// and transformed, then the heap after a GC is compared with the heap
// before, per pod. Run it with -benchtime=1x.
func BenchmarkAssignedPodMemory(b *testing.B) {
	const pods = 20000
	for _, tc := range []struct {
		name      string
		transform func(*kplanev1.Object) *kplanev1.Object
	}{
		{"whole", func(o *kplanev1.Object) *kplanev1.Object { return o }},
		{"trimmed", trimAssignedPod},
	} {
		b.Run(tc.name, func(b *testing.B) {
			wire := make([][]byte, pods)
			for i := range wire {
				p := runningPod(fmt.Sprintf("web-7d9f8b6c5-%05d", i), fmt.Sprintf("node-%04d", i%1000))
				p.Metadata.Uid = fmt.Sprintf("7f3c1e2a-5b4d-4c3e-9a8b-%012d", i)
				var err error
				if wire[i], err = proto.Marshal(kplanev1.MustWrap(p)); err != nil {
					b.Fatal(err)
				}
			}
			var perPod float64
			for range b.N {
				kept := make([]*kplanev1.Object, pods)
				before := liveHeap()
				for i, w := range wire {
					o := &kplanev1.Object{}
					if err := proto.Unmarshal(w, o); err != nil {
						b.Fatal(err)
					}
					kept[i] = tc.transform(o)
				}
				perPod = float64(liveHeap()-before) / pods
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(perPod, "bytes/pod")
		})
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
