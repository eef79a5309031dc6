package agent

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: 10 * time.Second, Max: 5 * time.Minute, ResetAfter: 10 * time.Minute}
	tests := []struct {
		restarts int
		lastRun  time.Duration
		want     time.Duration
	}{
		{0, 0, 0},
		{1, 0, 10 * time.Second},
		{2, time.Second, 20 * time.Second},
		{3, 0, 40 * time.Second},
		{5, 0, 160 * time.Second},
		{6, 0, 5 * time.Minute},
		{60, 0, 5 * time.Minute},
		{4, 10 * time.Minute, 0}, // a long healthy run resets the back-off
	}
	for _, tc := range tests {
		if got := b.Delay(tc.restarts, tc.lastRun); got != tc.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.restarts, tc.lastRun, got, tc.want)
		}
	}
}

func TestShouldRestart(t *testing.T) {
	tests := []struct {
		policy string
		code   int
		want   bool
	}{
		{kplanev1.RestartPolicyAlways, 0, true}, {kplanev1.RestartPolicyAlways, 1, true},
		{kplanev1.RestartPolicyOnFailure, 0, false}, {kplanev1.RestartPolicyOnFailure, 2, true},
		{kplanev1.RestartPolicyNever, 0, false}, {kplanev1.RestartPolicyNever, 1, false},
	}
	for _, tc := range tests {
		if got := shouldRestart(tc.policy, &Exit{Code: tc.code}); got != tc.want {
			t.Errorf("shouldRestart(%s, %d) = %v, want %v", tc.policy, tc.code, got, tc.want)
		}
	}
}

func csRunning() *kplanev1.ContainerStatus {
	return &kplanev1.ContainerStatus{State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{}}}
}

func csTerminated(code int32) *kplanev1.ContainerStatus {
	return &kplanev1.ContainerStatus{State: &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{ExitCode: code}}}
}

func csWaiting(crashed bool) *kplanev1.ContainerStatus {
	cs := &kplanev1.ContainerStatus{State: waiting(ReasonContainerCreating, "")}
	if crashed {
		cs.State = waiting(ReasonCrashLoopBackOff, "")
		cs.LastState = &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{ExitCode: 1}}
	}
	return cs
}

func TestPodPhase(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		cs     []*kplanev1.ContainerStatus
		want   string
	}{
		{"no containers yet", kplanev1.RestartPolicyAlways, nil, kplanev1.PodPending},
		{"one creating", kplanev1.RestartPolicyAlways, []*kplanev1.ContainerStatus{csRunning(), csWaiting(false)}, kplanev1.PodPending},
		{"all running", kplanev1.RestartPolicyNever, []*kplanev1.ContainerStatus{csRunning(), csRunning()}, kplanev1.PodRunning},
		{"one running one failed, Never", kplanev1.RestartPolicyNever, []*kplanev1.ContainerStatus{csRunning(), csTerminated(1)}, kplanev1.PodRunning},
		{"all succeeded, Never", kplanev1.RestartPolicyNever, []*kplanev1.ContainerStatus{csTerminated(0), csTerminated(0)}, kplanev1.PodSucceeded},
		{"one failed, Never", kplanev1.RestartPolicyNever, []*kplanev1.ContainerStatus{csTerminated(0), csTerminated(3)}, kplanev1.PodFailed},
		{"all succeeded, OnFailure", kplanev1.RestartPolicyOnFailure, []*kplanev1.ContainerStatus{csTerminated(0)}, kplanev1.PodSucceeded},
		{"crash looping, OnFailure", kplanev1.RestartPolicyOnFailure, []*kplanev1.ContainerStatus{csWaiting(true)}, kplanev1.PodRunning},
		{"crash looping, Always", kplanev1.RestartPolicyAlways, []*kplanev1.ContainerStatus{csWaiting(true)}, kplanev1.PodRunning},
		{"exited 0, Always restarts", kplanev1.RestartPolicyAlways, []*kplanev1.ContainerStatus{csTerminated(0)}, kplanev1.PodRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := podPhase(tc.policy, tc.cs); got != tc.want {
				t.Fatalf("podPhase = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestContainerStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	spec := &kplanev1.Container{Name: "app", Image: "busybox"}
	exit1 := &Exit{Code: 1, StartedAt: t0, FinishedAt: t0.Add(time.Second)}
	tests := []struct {
		name          string
		in            containerInput
		wantWaiting   string
		wantRunning   bool
		wantExit      int32
		wantTermReas  string
		wantLastExit  int32
		wantRestarts  int32
		wantReady     bool
		wantLastState bool
	}{
		{name: "not created", in: containerInput{Spec: spec}, wantWaiting: ReasonContainerCreating},
		{name: "create error", in: containerInput{Spec: spec, CreateError: "no command"}, wantWaiting: ReasonCreateError},
		{name: "running, ready", in: containerInput{Spec: spec, Ready: true, State: ContainerState{Created: true, Running: true, StartedAt: t0}},
			wantRunning: true, wantReady: true},
		{name: "running, probe not passed", in: containerInput{Spec: spec, Ready: false, State: ContainerState{Created: true, Running: true}},
			wantRunning: true},
		{name: "restarted, last state kept", in: containerInput{Spec: spec, Ready: true, State: ContainerState{Created: true, Attempt: 2, Running: true, Previous: exit1}},
			wantRunning: true, wantReady: true, wantRestarts: 2, wantLastState: true, wantLastExit: 1},
		{name: "crash loop back-off", in: containerInput{Spec: spec, BackOff: true, BackOffDelay: time.Second, State: ContainerState{Created: true, Attempt: 3, Exit: exit1}},
			wantWaiting: ReasonCrashLoopBackOff, wantRestarts: 3, wantLastState: true, wantLastExit: 1},
		{name: "terminated with error", in: containerInput{Spec: spec, State: ContainerState{Created: true, Exit: exit1}},
			wantExit: 1, wantTermReas: ReasonError},
		{name: "completed", in: containerInput{Spec: spec, State: ContainerState{Created: true, Exit: &Exit{Code: 0}}},
			wantTermReas: ReasonCompleted},
		{name: "start error", in: containerInput{Spec: spec, State: ContainerState{Created: true, Exit: &Exit{Code: 128, StartError: true}}},
			wantExit: 128, wantTermReas: ReasonStartError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := containerStatus(tc.in, "exec", "uid1", "pod1")
			if got := cs.GetState().GetWaiting().GetReason(); got != tc.wantWaiting {
				t.Errorf("waiting reason = %q, want %q", got, tc.wantWaiting)
			}
			if got := cs.GetState().GetRunning() != nil; got != tc.wantRunning {
				t.Errorf("running = %v, want %v", got, tc.wantRunning)
			}
			if tc.wantTermReas != "" {
				term := cs.GetState().GetTerminated()
				if term.GetReason() != tc.wantTermReas || term.GetExitCode() != tc.wantExit {
					t.Errorf("terminated = %v, want reason %s exit %d", term, tc.wantTermReas, tc.wantExit)
				}
			}
			if got := cs.GetLastState().GetTerminated() != nil; got != tc.wantLastState {
				t.Errorf("lastState.terminated set = %v, want %v", got, tc.wantLastState)
			} else if got && cs.GetLastState().GetTerminated().GetExitCode() != tc.wantLastExit {
				t.Errorf("lastState exit = %d, want %d", cs.GetLastState().GetTerminated().GetExitCode(), tc.wantLastExit)
			}
			if cs.RestartCount != tc.wantRestarts || cs.Ready != tc.wantReady {
				t.Errorf("restartCount %d ready %v, want %d %v", cs.RestartCount, cs.Ready, tc.wantRestarts, tc.wantReady)
			}
		})
	}
}

func condition(st *kplanev1.PodStatus, typ string) *kplanev1.Condition {
	return apiutil.FindCondition(st.GetConditions(), typ)
}

func TestBuildStatusStableAndTerminal(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "p", Uid: "u"},
		Spec:     &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever, Containers: []*kplanev1.Container{{Name: "a", Image: "x"}}},
		Status: &kplanev1.PodStatus{Phase: kplanev1.PodPending, QosClass: "BestEffort", Conditions: []*kplanev1.Condition{
			{Type: "DisruptionTarget", Status: kplanev1.ConditionTrue},
		}},
	}
	running := []containerInput{{Spec: pod.Spec.Containers[0], Ready: true, State: ContainerState{Created: true, Running: true, StartedAt: t0}}}
	in := statusInput{Pod: pod, Containers: running, Runtime: "exec", PodIP: "127.1.0.1", HostIP: "127.0.0.1", StartTime: t0, Now: t0}
	st := buildStatus(in)
	if st.Phase != kplanev1.PodRunning || st.PodIp != "127.1.0.1" || st.HostIp != "127.0.0.1" || st.QosClass != "BestEffort" ||
		len(st.PodIps) != 1 || st.PodIps[0].Ip != st.PodIp || len(st.HostIps) != 1 || st.HostIps[0].Ip != st.HostIp {
		t.Fatalf("status = %v", st)
	}
	for _, typ := range []string{kplanev1.PodReady, kplanev1.ContainersReady, kplanev1.PodInitialized, kplanev1.PodScheduled} {
		if c := condition(st, typ); c.GetStatus() != kplanev1.ConditionTrue {
			t.Errorf("condition %s = %v, want True", typ, c)
		}
	}
	if condition(st, "DisruptionTarget") == nil {
		t.Error("a condition owned by someone else was dropped")
	}

	// Computing again later from the written status changes nothing.
	pod2 := proto.Clone(pod).(*kplanev1.Pod)
	pod2.Status = st
	in.Pod, in.Now = pod2, t0.Add(time.Minute)
	if again := buildStatus(in); !statusEqual(st, again) {
		t.Fatalf("status not stable:\n%v\n%v", st, again)
	}

	// A runtime's clock has nanoseconds; the status carries what the
	// apiserver stores (to the second), so it compares equal to it.
	precise := in
	precise.Containers = []containerInput{{Spec: pod.Spec.Containers[0], Ready: true,
		State: ContainerState{Created: true, Running: true, StartedAt: t0.Add(123456789)}}}
	precise.StartTime = t0.Add(987654321)
	if got := buildStatus(precise); !statusEqual(st, got) {
		t.Fatalf("sub-second times make a different status:\n%v\n%v", st, got)
	}

	// The container fails: Never → Failed, Ready false with PodCompleted.
	in.Containers = []containerInput{{Spec: pod.Spec.Containers[0], State: ContainerState{Created: true, Exit: &Exit{Code: 3, StartedAt: t0, FinishedAt: t0}}}}
	failed := buildStatus(in)
	if failed.Phase != kplanev1.PodFailed {
		t.Fatalf("phase = %s, want Failed", failed.Phase)
	}
	if c := condition(failed, kplanev1.PodReady); c.GetStatus() != kplanev1.ConditionFalse || c.GetReason() != ReasonPodCompleted ||
		!c.GetLastTransitionTime().AsTime().Equal(t0.Add(time.Minute)) {
		t.Errorf("Ready = %v, want False/PodCompleted with a new transition time", c)
	}
	// A terminal phase is final even if the runtime forgot the containers.
	pod3 := proto.Clone(pod).(*kplanev1.Pod)
	pod3.Status = failed
	in.Pod, in.Containers = pod3, []containerInput{{Spec: pod.Spec.Containers[0]}}
	if got := buildStatus(in).Phase; got != kplanev1.PodFailed {
		t.Fatalf("terminal phase changed to %s", got)
	}
}

func TestProbeThresholds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &kplanev1.Probe{InitialDelaySeconds: 5, PeriodSeconds: 2, SuccessThreshold: 2, FailureThreshold: 2}
	if !newProbeState(probeLiveness, p, 0, t0).ok {
		t.Fatal("a liveness probe must start out passing")
	}
	s := newProbeState(probeReadiness, p, 0, t0)
	if s.ok || !s.next.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("initial state %+v", s)
	}
	steps := []struct {
		ok    bool
		ready bool
	}{
		{true, false}, // 1 of 2 successes
		{true, true},  // threshold reached
		{false, true}, // 1 of 2 failures
		{true, true},  // failures reset
		{false, true},
		{false, false}, // 2 failures
		{true, false},
		{true, true},
	}
	now := t0
	for i, st := range steps {
		now = now.Add(2 * time.Second)
		s.record(p, st.ok, now)
		if s.ok != st.ready {
			t.Fatalf("step %d (ok=%v): ready = %v, want %v", i, st.ok, s.ok, st.ready)
		}
		if !s.next.Equal(now.Add(2 * time.Second)) {
			t.Fatalf("step %d: next probe at %v, want period later", i, s.next)
		}
	}
}

func TestRunProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(lis.Addr().(*net.TCPAddr).Port)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := int32(closed.Addr().(*net.TCPAddr).Port)
	// The port must really be closed for the probe against it to fail.
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }() // the test is over; nothing to check

	// A real HTTP server: /healthz wants the probe's header, /broken fails.
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hport := int32(hlis.Addr().(*net.TCPAddr).Port)
	hsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz" && r.Header.Get("X-Probe") == "yes":
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/moved":
			w.WriteHeader(http.StatusFound) // 3xx counts as success without following
		case r.URL.Path == "/elsewhere":
			http.Redirect(w, r, "http://192.0.2.1:1/never", http.StatusFound) // not followed: another host
		case r.URL.Path == "/here":
			http.Redirect(w, r, "/broken", http.StatusFound) // followed: same host
		default:
			http.Error(w, "no", http.StatusInternalServerError)
		}
	})}
	go func() { _ = hsrv.Serve(hlis) }()
	defer func() { _ = hsrv.Close() }()

	// A real gRPC server with the standard health service.
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gport := int32(glis.Addr().(*net.TCPAddr).Port)
	gsrv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gsrv, hs)
	go func() { _ = gsrv.Serve(glis) }()
	defer gsrv.Stop()
	hdr := []*kplanev1.HTTPHeader{{Name: "X-Probe", Value: "yes"}}
	tests := []struct {
		name string
		p    *kplanev1.Probe
		ok   bool
	}{
		{"tcp open", &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(port)}}, true},
		{"tcp closed", &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(closedPort)}}, false},
		{"tcp by port name", &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromString("http")}}, true},
		{"tcp by unknown port name", &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromString("admin")}}, false},
		{"exec true", &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"true"}}}, true},
		{"exec false", &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"false"}}}, false},
		{"exec sees env", &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"sh", "-c", `test "$KPLANE_POD_IP" = 127.0.0.1`}}}, true},
		{"exec missing", &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"/nonexistent/x"}}}, false},
		{"http ok with header", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/healthz", Port: kplanev1.IntOrStringFromString("web"), HttpHeaders: hdr}}, true},
		{"http without header", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/healthz", Port: kplanev1.IntOrStringFromInt32(hport)}}, false},
		{"http 500", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/broken", Port: kplanev1.IntOrStringFromInt32(hport), HttpHeaders: hdr}}, false},
		{"http redirect", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/moved", Port: kplanev1.IntOrStringFromInt32(hport)}}, true},
		{"http redirect to another host", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/elsewhere", Port: kplanev1.IntOrStringFromInt32(hport)}}, true},
		{"http redirect on the same host", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Path: "/here", Port: kplanev1.IntOrStringFromInt32(hport)}}, false},
		{"http closed port", &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Port: kplanev1.IntOrStringFromInt32(closedPort)}}, false},
		{"grpc serving", &kplanev1.Probe{Grpc: &kplanev1.GRPCAction{Port: gport}}, true},
		{"grpc service not serving", &kplanev1.Probe{Grpc: &kplanev1.GRPCAction{Port: gport, Service: proto.String("db")}}, false},
		{"grpc unknown service", &kplanev1.Probe{Grpc: &kplanev1.GRPCAction{Port: gport, Service: proto.String("nope")}}, false},
		{"grpc closed port", &kplanev1.Probe{Grpc: &kplanev1.GRPCAction{Port: closedPort}}, false},
		{"no handler", &kplanev1.Probe{}, false},
	}
	ctr := &kplanev1.Container{Name: "c", Ports: []*kplanev1.ContainerPort{{Name: "http", ContainerPort: port}, {Name: "web", ContainerPort: hport}}}
	target := probeTarget{Container: ctr, PodIP: "127.0.0.1", Dir: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin", "KPLANE_POD_IP=127.0.0.1"}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := runProbe(context.Background(), tc.p, target)
			if (err == nil) != tc.ok {
				t.Fatalf("runProbe = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestFakeRuntimeTimeline(t *testing.T) {
	r := newFakeRuntime()
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Uid: "u", Name: "p", Namespace: "default", Annotations: map[string]string{
			AnnotationFakeStartDelay: "2s", AnnotationFakeExitAfter: "5s", AnnotationFakeExitCode: "3",
		}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "a"}}},
	}
	if err := r.PreparePod(pod, ""); err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(context.Background(), pod, pod.Spec.Containers[0], 0, ""); err != nil {
		t.Fatal(err)
	}
	created := r.pods["u"].container("a").created
	if st := r.State("u", "a", created.Add(time.Second)); !st.Waiting || st.Running {
		t.Fatalf("before the start delay: %+v", st)
	}
	if next := r.NextChange("u", created.Add(time.Second)); !next.Equal(created.Add(2 * time.Second)) {
		t.Fatalf("NextChange = %v, want the start", next)
	}
	if st := r.State("u", "a", created.Add(3*time.Second)); !st.Running {
		t.Fatalf("after the start delay: %+v", st)
	}
	if next := r.NextChange("u", created.Add(3*time.Second)); !next.Equal(created.Add(7 * time.Second)) {
		t.Fatalf("NextChange = %v, want the exit", next)
	}
	st := r.State("u", "a", created.Add(8*time.Second))
	if st.Running || st.Exit == nil || st.Exit.Code != 3 {
		t.Fatalf("after the exit: %+v", st)
	}
	if next := r.NextChange("u", created.Add(8*time.Second)); !next.IsZero() {
		t.Fatalf("NextChange after exit = %v, want none", next)
	}
	// A pod that already ran continues from its reported start.
	r2 := newFakeRuntime()
	pod.Status = &kplanev1.PodStatus{ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "a", RestartCount: 2,
		State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: timestamppb.New(created)}}}}}
	_ = r2.PreparePod(pod, "")
	_ = r2.StartContainer(context.Background(), pod, pod.Spec.Containers[0], 0, "")
	if st := r2.State("u", "a", created.Add(time.Second)); !st.Running || st.Attempt != 2 || !st.StartedAt.Equal(created) {
		t.Fatalf("adopted fake container: %+v", st)
	}
}

// latest prefers the pod our own status write returned while the cache is
// older, the cache once it caught up, and refuses (forgetting the written
// copy) when a resourceVersion is not a revision.
func TestLatestComparesRevisions(t *testing.T) {
	at := func(rv string) *kplanev1.Pod {
		return &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "p", Uid: "u1", ResourceVersion: rv}}
	}
	a := &Agent{written: map[string]*kplanev1.Pod{"u1": at("10")}}
	if got, err := a.latest(at("9")); err != nil || got.GetMetadata().GetResourceVersion() != "10" {
		t.Fatalf("cache older than our write: got rv %q, %v; want the written 10", got.GetMetadata().GetResourceVersion(), err)
	}
	if got, err := a.latest(at("11")); err != nil || got.GetMetadata().GetResourceVersion() != "11" {
		t.Fatalf("cache newer than our write: got rv %q, %v; want the cached 11", got.GetMetadata().GetResourceVersion(), err)
	}
	if _, ok := a.written["u1"]; ok {
		t.Fatal("the written copy is kept after the cache passed it")
	}
	a.written["u1"] = at("x7")
	if _, err := a.latest(at("12")); err == nil || !strings.Contains(err.Error(), `resourceVersion "x7": must be a non-negative integer`) {
		t.Fatalf("unparsable written resourceVersion: %v, want an error naming it", err)
	}
	if got, err := a.latest(at("12")); err != nil || got.GetMetadata().GetResourceVersion() != "12" {
		t.Fatalf("after the error: got %v, %v; want the cached pod", got, err)
	}
}
