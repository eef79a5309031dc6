package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/nodeagent/internal/shim"
)

// The test binary doubles as the shim: the exec runtime re-executes its
// own binary as "<binary> shim ...".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == shim.Command {
		os.Exit(shim.Main(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

type env struct {
	t    *testing.T
	srv  *testserver.Server
	api  *client.Client
	ctx  context.Context
	root string
}

func newEnv(t *testing.T, opts ...testserver.Option) *env {
	t.Helper()
	srv := testserver.Start(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	e := &env{t: t, srv: srv, api: api, ctx: ctx, root: t.TempDir()}
	// Whatever a test leaves running is killed (after the agents stopped,
	// as cleanups run last-in first-out).
	t.Cleanup(func() { killShims(e.root) })
	return e
}

// agentHandle is an agent running in-process.
type agentHandle struct {
	stop func() error
}

// startAgent runs the agent with the test's defaults plus args until the
// test ends or stop is called (the SIGTERM equivalent).
func (e *env) startAgent(args ...string) *agentHandle {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	base := []string{"--apiserver", e.srv.Addr(), "--health-addr", "127.0.0.1:0", "--logs-addr", "127.0.0.1:0",
		"--log-level", "warn", "--root-dir", e.root, "--heartbeat-interval", "100ms", "--housekeeping-interval", "100ms",
		"--restart-backoff-base", "100ms", "--node-name", "node-a"}
	if !slices.Contains(args, "--fake-nodes") {
		// One exec node, standing alone: its range is the override.
		base = append(base, "--pod-cidr", "127.10.0.0/16")
	}
	go func() { done <- runService(ctx, append(base, args...)) }()
	stopped := false
	var result error
	h := &agentHandle{stop: func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}}
	e.t.Cleanup(func() {
		if err := h.stop(); err != nil {
			e.t.Errorf("agent exited with %v", err)
		}
	})
	return h
}

func runService(ctx context.Context, args []string) error { return app.Run(ctx, NewService(), args) }

// killShims SIGKILLs the process group of every shim running for root.
func killShims(root string) {
	prefix := filepath.Join(root, podsDir) + "/"
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		if strings.HasPrefix(shimExitFile(pid), prefix) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// shimCount counts live shims for root whose exit file is under dir.
func shimCount(root, sub string) int {
	prefix := filepath.Join(root, podsDir, sub)
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		if strings.HasPrefix(shimExitFile(pid), prefix) && !isZombie(pid) {
			n++
		}
	}
	return n
}

func (e *env) createPod(name, node string, mutate func(*kplanev1.Pod), command ...string) *kplanev1.Pod {
	e.t.Helper()
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.PodSpec{NodeName: node, Containers: []*kplanev1.Container{
			{Name: "main", Image: "local", Command: command},
		}},
	}
	if mutate != nil {
		mutate(p)
	}
	out, err := client.For[*kplanev1.Pod](e.api).Create(e.ctx, p)
	if err != nil {
		e.t.Fatalf("create pod %s: %v", name, err)
	}
	return out
}

// waitCreated is waitPod for the pod createPod returned; it fails when the
// pod found is a namesake with another UID, whose status would say nothing
// about the agent's handling of created.
func (e *env) waitCreated(created *kplanev1.Pod, what string, cond func(*kplanev1.Pod) bool) *kplanev1.Pod {
	e.t.Helper()
	p := e.waitPod(created.GetMetadata().GetName(), what, cond)
	if p.GetMetadata().GetUid() != created.GetMetadata().GetUid() {
		e.t.Fatalf("pod %s has uid %s, want the created pod's %s", created.GetMetadata().GetName(), p.GetMetadata().GetUid(), created.GetMetadata().GetUid())
	}
	return p
}

// waitPod polls the pod until cond holds and returns it.
func (e *env) waitPod(name, what string, cond func(*kplanev1.Pod) bool) *kplanev1.Pod {
	e.t.Helper()
	var last *kplanev1.Pod
	for {
		p, err := client.For[*kplanev1.Pod](e.api).Get(e.ctx, "default", name)
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("pod %s never %s; last: %v (err %v)", name, what, last, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *env) waitGone(name string) {
	e.t.Helper()
	for {
		_, err := client.For[*kplanev1.Pod](e.api).Get(e.ctx, "default", name)
		if client.IsNotFound(err) {
			return
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("pod %s was never removed (err %v)", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func phase(ph string) func(*kplanev1.Pod) bool {
	return func(p *kplanev1.Pod) bool { return p.GetStatus().GetPhase() == ph }
}

func isReady(p *kplanev1.Pod) bool { return apiutil.IsPodReady(p) }

// containerPid reads the pid of the pod's current container run.
func (e *env) containerPid(p *kplanev1.Pod, container string) int {
	e.t.Helper()
	cs := p.GetStatus().GetContainerStatuses()[0]
	path := filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), container, stateDir, "pid."+strconv.Itoa(int(cs.GetRestartCount())))
	var pi shim.PidInfo
	waitFor(e.t, e.ctx, "pid file "+path, func() bool {
		var err error
		pi, err = shim.ReadPid(path)
		return err == nil
	})
	return pi.Pid
}

func pidAlive(pid int) bool { return alive(pid) }

func TestExecPodRunsAndNodeRegisters(t *testing.T) {
	e := newEnv(t)
	e.startAgent("--node-labels", "zone=a,disk=ssd", "--cpu", "3", "--memory", "2Gi")
	p := e.createPod("web", "node-a", nil, "sh", "-c", `echo "hello from $KPLANE_POD_NAMESPACE/$KPLANE_POD_NAME at $KPLANE_POD_IP"; exec sleep 300`)
	p = e.waitCreated(p, "Running and Ready", func(p *kplanev1.Pod) bool { return phase(kplanev1.PodRunning)(p) && isReady(p) })
	st := p.GetStatus()
	if !strings.HasPrefix(st.GetPodIp(), "127.10.") || st.GetHostIp() != "127.0.0.1" || st.GetStartTime() == nil {
		t.Fatalf("status addresses: %v", st)
	}
	for _, typ := range []string{kplanev1.PodScheduled, kplanev1.PodInitialized, kplanev1.ContainersReady, kplanev1.PodReady} {
		if c := condition(st, typ); c.GetStatus() != kplanev1.ConditionTrue {
			t.Errorf("condition %s = %v", typ, c)
		}
	}
	cs := st.GetContainerStatuses()[0]
	if cs.GetState().GetRunning() == nil || !cs.GetReady() || cs.GetRestartCount() != 0 {
		t.Fatalf("container status %v", cs)
	}
	pid := e.containerPid(p, "main")
	if !pidAlive(pid) {
		t.Fatalf("container pid %d is not running", pid)
	}

	node, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	ns := node.GetStatus()
	if readyOf(ns) != kplanev1.ConditionTrue || ns.GetCapacity()["cpu"] != "3" || ns.GetCapacity()["memory"] != "2Gi" || ns.GetAllocatable()["memory"] != "1948Mi" || ns.GetCapacity()["ephemeral-storage"] == "" || ns.GetCapacity()["pods"] != "110" {
		t.Fatalf("node status %v", ns)
	}
	if node.GetMetadata().GetLabels()["zone"] != "a" || node.GetMetadata().GetLabels()["kubernetes.io/hostname"] != "node-a" {
		t.Fatalf("node labels %v", node.GetMetadata().GetLabels())
	}
	if ns.GetAddresses()[0].GetType() != "InternalIP" || ns.GetNodeInfo().GetKubeletVersion() == "" {
		t.Fatalf("node addresses/info %v", ns)
	}
	lease, err := client.For[*kplanev1.Lease](e.api).Get(e.ctx, kplanev1.NamespaceNodeLease, "node-a")
	if err != nil || lease.GetSpec().GetHolderIdentity() != "node-a" || lease.GetSpec().GetLeaseDurationSeconds() != 40 {
		t.Fatalf("lease %v, %v", lease, err)
	}
	renewed := lease.GetSpec().GetRenewTime().AsTime()
	waitFor(t, e.ctx, "lease renewal", func() bool {
		l, err := client.For[*kplanev1.Lease](e.api).Get(e.ctx, kplanev1.NamespaceNodeLease, "node-a")
		return err == nil && l.GetSpec().GetRenewTime().AsTime().After(renewed)
	})

	// Logs through the agent's endpoint.
	port := ns.GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
	want := "hello from default/web at " + st.GetPodIp()
	waitFor(t, e.ctx, "log line", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/logs/default/web/main", port))
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }() // read-only
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), want)
	})
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/logs/default/nope/main", port))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // read-only, and only the status is checked
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("logs of an unknown pod: %d", resp.StatusCode)
	}

	// A deleted Node is registered again.
	if _, err := client.For[*kplanev1.Node](e.api).Delete(e.ctx, "", "node-a", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.ctx, "node re-registration", func() bool {
		n, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "node-a")
		return err == nil && readyOf(n.GetStatus()) == kplanev1.ConditionTrue
	})
}

func TestExecFailureUnderNever(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	e.createPod("fail", "node-a", func(p *kplanev1.Pod) { p.Spec.RestartPolicy = kplanev1.RestartPolicyNever }, "sh", "-c", "echo bye; exit 3")
	p := e.waitPod("fail", "Failed", phase(kplanev1.PodFailed))
	term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated()
	if term.GetExitCode() != 3 || term.GetReason() != ReasonError || p.GetStatus().GetContainerStatuses()[0].GetRestartCount() != 0 {
		t.Fatalf("terminated state %v", p.GetStatus().GetContainerStatuses()[0])
	}
	if isReady(p) {
		t.Fatal("a failed pod is Ready")
	}

	// A command that does not exist fails to start (exit 128, StartError).
	e.createPod("nocmd", "node-a", func(p *kplanev1.Pod) { p.Spec.RestartPolicy = kplanev1.RestartPolicyNever }, "/nonexistent/binary")
	p = e.waitPod("nocmd", "Failed", phase(kplanev1.PodFailed))
	if term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term.GetReason() != ReasonStartError || term.GetExitCode() != shim.StartErrorCode {
		t.Fatalf("terminated state %v", term)
	}

	// OnFailure with success: Succeeded.
	e.createPod("ok", "node-a", func(p *kplanev1.Pod) { p.Spec.RestartPolicy = kplanev1.RestartPolicyOnFailure }, "true")
	e.waitPod("ok", "Succeeded", phase(kplanev1.PodSucceeded))
}

var backoffMsg = regexp.MustCompile(`^back-off (\S+) restarting failed container=main pod=crash$`)

func TestExecCrashLoopUnderAlways(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	e.createPod("crash", "node-a", nil, "sh", "-c", "exit 2")
	b := Backoff{Base: 100 * time.Millisecond, Max: DefaultBackoff.Max, ResetAfter: 2 * DefaultBackoff.Max}
	var delays []time.Duration
	e.waitPod("crash", "crash looping with a growing back-off", func(p *kplanev1.Pod) bool {
		if p.GetStatus().GetPhase() != kplanev1.PodRunning || len(p.GetStatus().GetContainerStatuses()) == 0 {
			return false
		}
		cs := p.GetStatus().GetContainerStatuses()[0]
		w := cs.GetState().GetWaiting()
		if w.GetReason() != ReasonCrashLoopBackOff {
			return false
		}
		m := backoffMsg.FindStringSubmatch(w.GetMessage())
		if m == nil {
			t.Fatalf("back-off message %q", w.GetMessage())
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		if want := b.Delay(int(cs.GetRestartCount()), 0); d != want {
			t.Fatalf("restartCount %d: back-off %v, want %v", cs.GetRestartCount(), d, want)
		}
		if cs.GetLastState().GetTerminated().GetExitCode() != 2 {
			t.Fatalf("lastState %v", cs.GetLastState())
		}
		if len(delays) == 0 || delays[len(delays)-1] != d {
			delays = append(delays, d)
		}
		return cs.GetRestartCount() >= 3
	})
	for i := 1; i < len(delays); i++ {
		if delays[i] <= delays[i-1] {
			t.Fatalf("back-off did not grow: %v", delays)
		}
	}
}

func TestGracefulDeletion(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	// Exits on SIGTERM.
	p := e.createPod("polite", "node-a", nil, "sleep", "300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	pid := e.containerPid(p, "main")
	// Ignores SIGTERM (the ignore is inherited by sleep): SIGKILLed after 1s.
	grace := int64(1)
	q := e.createPod("stubborn", "node-a", func(p *kplanev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &grace },
		"sh", "-c", `trap "" TERM; sleep 300`)
	q = e.waitCreated(q, "Running", phase(kplanev1.PodRunning))
	qpid := e.containerPid(q, "main")

	for _, name := range []string{"polite", "stubborn"} {
		if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", name, client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitGone("polite")
	e.waitGone("stubborn")
	for _, pid := range []int{pid, qpid} {
		if pidAlive(pid) {
			t.Fatalf("container pid %d still runs after its pod was deleted", pid)
		}
	}
	waitFor(t, e.ctx, "pod directories removed", func() bool {
		_, err1 := os.Stat(filepath.Join(e.root, podsDir, p.GetMetadata().GetUid()))
		_, err2 := os.Stat(filepath.Join(e.root, podsDir, q.GetMetadata().GetUid()))
		return os.IsNotExist(err1) && os.IsNotExist(err2)
	})

	// Deleted outright (grace 0): the agent kills the process anyway.
	r := e.createPod("forced", "node-a", nil, "sleep", "300")
	r = e.waitCreated(r, "Running", phase(kplanev1.PodRunning))
	rpid := e.containerPid(r, "main")
	zero := int64(0)
	if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", "forced", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.ctx, "force-deleted pod's process to stop", func() bool { return !pidAlive(rpid) })
}

func TestReadinessProbe(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("probed", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &kplanev1.Probe{
			Exec:          &kplanev1.ExecAction{Command: []string{"test", "-f", "ready"}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
	}, "sleep", "300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	if isReady(p) {
		t.Fatal("Ready before the probe passed")
	}
	flag := filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), "main", "ready")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitPod("probed", "Ready", isReady)
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	p = e.waitPod("probed", "not Ready again", func(p *kplanev1.Pod) bool { return !isReady(p) })
	if c := condition(p.GetStatus(), kplanev1.ContainersReady); c.GetReason() != ReasonContainersNotRdy || !strings.Contains(c.GetMessage(), "main") {
		t.Fatalf("ContainersReady = %v", c)
	}
}

func TestRestartAdoptsContainers(t *testing.T) {
	e := newEnv(t)
	a1 := e.startAgent()
	never := func(p *kplanev1.Pod) { p.Spec.RestartPolicy = kplanev1.RestartPolicyNever }
	keep := e.createPod("keep", "node-a", nil, "sleep", "300")
	dies := e.createPod("dies", "node-a", never, "sleep", "300")
	gone := e.createPod("gone", "node-a", nil, "sleep", "300")
	keep = e.waitCreated(keep, "Running", phase(kplanev1.PodRunning))
	dies = e.waitCreated(dies, "Running", phase(kplanev1.PodRunning))
	gone = e.waitCreated(gone, "Running", phase(kplanev1.PodRunning))
	keepPid, diesPid, gonePid := e.containerPid(keep, "main"), e.containerPid(dies, "main"), e.containerPid(gone, "main")

	if err := a1.stop(); err != nil {
		t.Fatal(err)
	}
	// The agent is down; containers keep running.
	for _, pid := range []int{keepPid, diesPid, gonePid} {
		if !pidAlive(pid) {
			t.Fatalf("pid %d stopped with the agent", pid)
		}
	}
	// Meanwhile one container ends and one pod is deleted for good.
	if err := syscall.Kill(diesPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", "gone", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}

	e.startAgent()
	p := e.waitPod("dies", "Failed with the exit code of SIGTERM", phase(kplanev1.PodFailed))
	if term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term.GetExitCode() != 143 || term.GetSignal() != 15 {
		t.Fatalf("terminated %v", term)
	}
	waitFor(t, e.ctx, "the deleted pod's container to be killed", func() bool { return !pidAlive(gonePid) })
	p = e.waitPod("keep", "still Running", phase(kplanev1.PodRunning))
	cs := p.GetStatus().GetContainerStatuses()[0]
	if cs.GetRestartCount() != 0 || e.containerPid(p, "main") != keepPid || !pidAlive(keepPid) {
		t.Fatalf("adopted container restarted: %v (pid %d)", cs, keepPid)
	}
	if n := shimCount(e.root, keep.GetMetadata().GetUid()); n != 1 {
		t.Fatalf("%d shims for the adopted pod, want 1", n)
	}
	// Adopted containers are still stopped on deletion.
	if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", "keep", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("keep")
	waitFor(t, e.ctx, "adopted container to stop", func() bool { return !pidAlive(keepPid) })
}

// assignPodCIDR plays ipamctl: it sets the node's spec.podCIDR once.
func (e *env) assignPodCIDR(name, cidr string) {
	e.t.Helper()
	nodes := client.For[*kplanev1.Node](e.api)
	err := client.RetryOnConflict(e.ctx, client.DefaultRetry, func() error {
		n, err := nodes.Get(e.ctx, "", name)
		if err != nil {
			return err
		}
		n.Spec.PodCidr = cidr
		_, err = nodes.Update(e.ctx, n)
		return err
	})
	if err != nil {
		e.t.Fatalf("assign pod CIDR %s to %s: %v", cidr, name, err)
	}
}

func TestFakeRuntimeNodes(t *testing.T) {
	e := newEnv(t)
	agent := e.startAgent("--runtime", "fake", "--fake-nodes", "3", "--node-name", "fake")
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("fake-%d", i)
		// Registered, but not Ready until the Node has its pod CIDR.
		waitFor(t, e.ctx, "node "+name+" registered, waiting for its pod CIDR", func() bool {
			n, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", name)
			return err == nil && readyOf(n.GetStatus()) == kplanev1.ConditionFalse && strings.Contains(apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeReady).GetMessage(), "spec.podCIDR")
		})
		if _, err := client.For[*kplanev1.Lease](e.api).Get(e.ctx, kplanev1.NamespaceNodeLease, name); err != nil {
			t.Fatal(err)
		}
	}
	early := e.createPod("early", "fake-0", nil)
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("fake-%d", i)
		e.assignPodCIDR(name, fmt.Sprintf("10.200.%d.0/24", i))
		waitFor(t, e.ctx, "node "+name+" Ready", func() bool {
			n, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", name)
			return err == nil && readyOf(n.GetStatus()) == kplanev1.ConditionTrue
		})
	}
	// The pod that waited for the range runs with an address from it.
	if p := e.waitPod("early", "Running", phase(kplanev1.PodRunning)); !strings.HasPrefix(p.GetStatus().GetPodIp(), "10.200.0.") || p.GetMetadata().GetUid() != early.GetMetadata().GetUid() {
		t.Fatalf("early pod: podIP %q, want one of 10.200.0.0/24", p.GetStatus().GetPodIp())
	}
	ann := func(kv ...string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			p.Metadata.Annotations = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				p.Metadata.Annotations[kv[i]] = kv[i+1]
			}
			p.Spec.RestartPolicy = kplanev1.RestartPolicyNever
		}
	}
	e.createPod("instant", "fake-0", nil)
	e.createPod("slow", "fake-1", ann(AnnotationFakeStartDelay, "300ms"))
	e.createPod("done", "fake-2", ann(AnnotationFakeExitAfter, "200ms", AnnotationFakeExitCode, "0"))
	e.createPod("broken", "fake-2", ann(AnnotationFakeExitAfter, "200ms", AnnotationFakeExitCode, "4"))
	e.createPod("elsewhere", "other-node", nil)

	e.waitPod("instant", "Running and Ready", func(p *kplanev1.Pod) bool { return phase(kplanev1.PodRunning)(p) && isReady(p) })
	e.waitPod("slow", "Running", phase(kplanev1.PodRunning))
	e.waitPod("done", "Succeeded", phase(kplanev1.PodSucceeded))
	p := e.waitPod("broken", "Failed", phase(kplanev1.PodFailed))
	if code := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated().GetExitCode(); code != 4 {
		t.Fatalf("exit code %d, want 4", code)
	}
	if p, _ := client.For[*kplanev1.Pod](e.api).Get(e.ctx, "default", "elsewhere"); p.GetStatus().GetPhase() != kplanev1.PodPending {
		t.Fatalf("a pod of another node was touched: %v", p.GetStatus())
	}
	node, _ := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "fake-0")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/logs/default/instant", node.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read-only
	if err != nil {
		t.Fatalf("read fake logs: %v", err)
	}
	if !strings.Contains(string(b), "fake runtime") {
		t.Fatalf("fake logs: %q", b)
	}
	// Each pod's IP comes from its own node's range, none twice, and an
	// agent restart keeps them (the fake runtime keeps nothing on disk: the
	// reported podIPs are reserved again).
	ips := map[string]string{}
	for node, pods := range map[string][]string{"fake-0": {"instant", "early"}, "fake-1": {"slow"}, "fake-2": {"done", "broken"}} {
		for _, name := range pods {
			p, _ := client.For[*kplanev1.Pod](e.api).Get(e.ctx, "default", name)
			ip := p.GetStatus().GetPodIp()
			want := "10.200." + node[len(node)-1:] + "."
			if !strings.HasPrefix(ip, want) || strings.HasSuffix(ip, ".0") || strings.HasSuffix(ip, ".255") {
				t.Errorf("pod %s on %s has podIP %q, want a host address of %s0/24", name, node, ip, want)
			}
			for other, oip := range ips {
				if oip == ip {
					t.Errorf("pods %s and %s share IP %s", name, other, ip)
				}
			}
			ips[name] = ip
		}
	}
	if err := agent.stop(); err != nil {
		t.Fatal(err)
	}
	e.startAgent("--runtime", "fake", "--fake-nodes", "3", "--node-name", "fake")
	e.createPod("after", "fake-0", nil)
	after := e.waitPod("after", "Running", phase(kplanev1.PodRunning))
	for _, name := range []string{"instant", "early"} {
		p := e.waitPod(name, "Running", phase(kplanev1.PodRunning))
		if p.GetStatus().GetPodIp() != ips[name] {
			t.Errorf("pod %s changed IP across an agent restart: %s -> %s", name, ips[name], p.GetStatus().GetPodIp())
		}
		if after.GetStatus().GetPodIp() == ips[name] {
			t.Errorf("new pod got %s's IP %s", name, ips[name])
		}
	}

	if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", "instant", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("instant")
}

// A second node agent on one host, on the default --logs-addr of the
// first: the start fails with an error that names the flag to change.
func TestLogsAddrInUseNamesTheFlag(t *testing.T) {
	e := newEnv(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }() // only held to make the port busy
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	err = runService(ctx, []string{"--apiserver", e.srv.Addr(), "--health-addr", "127.0.0.1:0",
		"--logs-addr", taken.Addr().String(), "--log-level", "warn", "--root-dir", e.root,
		"--node-name", "node-a", "--pod-cidr", "127.10.0.0/16"})
	if err == nil || !strings.Contains(err.Error(), "--logs-addr") || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Fatalf("run with --logs-addr in use: %v; want an error naming --logs-addr and the address", err)
	}
}
