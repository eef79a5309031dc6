package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

func init() {
	binaries["nodeagent"] = "services/nodeagent"
	binaries["scheduler"] = "services/scheduler"
	binaries["kpctl"] = "cmd/kpctl"
}

// naCluster is an apiserver with real exec-runtime node agents (and
// optionally the scheduler), each agent with its own root dir and range.
type naCluster struct {
	t      *testing.T
	addr   string
	cfg    apiConfig
	api    kplanev1.ResourcesClient
	agents map[string]*launcher.Process
	roots  map[string]string
}

func newNACluster(t *testing.T, scheduler bool, nodes ...string) *naCluster {
	t.Helper()
	// Secured (apiConfig): each agent runs as its node, the scheduler as
	// itself, and tokenctl makes the default ServiceAccount pods need.
	a := newAPIConfig(t, nodes...)
	waitHealthy(t, launch(t, a.config(t.TempDir(), t.TempDir())))
	c := &naCluster{t: t, addr: a.addr, cfg: a, api: a.dial(t), agents: map[string]*launcher.Process{}, roots: map[string]string{}}
	a.startTokenctl(t, c.api)
	if scheduler {
		startProcess(t, "scheduler", "scheduler", "", append(a.connArgs("scheduler"), "--log-level", "debug")...)
	}
	for i, n := range nodes {
		logs, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		c.roots[n] = root
		// Containers outlive a killed agent by design; make sure none
		// outlives the test.
		t.Cleanup(func() { naKillContainers(root) })
		c.agents[n] = startProcess(t, "nodeagent-"+n, "nodeagent", "", append(a.connArgs(n), "--log-level", "debug",
			"--runtime", "exec", "--node-name", n, "--root-dir", root, "--logs-addr", logs,
			"--pod-cidr", fmt.Sprintf("127.%d.0.0/16", 60+i), "--heartbeat-interval", "1s",
			"--restart-backoff-base", "200ms", "--housekeeping-interval", "500ms")...)
	}
	c.eventually("every node registered and Ready", func() bool {
		for _, n := range nodes {
			ctx, opt := call(t)
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: n}, opt)
			if err != nil || !naNodeReady(resp.GetObject().GetNode()) {
				return false
			}
		}
		return true
	})
	return c
}

func naNodeReady(n *kplanev1.Node) bool {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}

func (c *naCluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting until %s", what)
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatal(c.t.Context().Err())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

func (c *naCluster) create(name, node, policy string, mutate func(*kplanev1.Container), command ...string) *kplanev1.Pod {
	c.t.Helper()
	ctr := &kplanev1.Container{Name: "main", Image: "local", Command: command}
	if mutate != nil {
		mutate(ctr)
	}
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:     &kplanev1.PodSpec{NodeName: node, RestartPolicy: policy, Containers: []*kplanev1.Container{ctr}},
	}
	ctx, opt := call(c.t)
	resp, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(pod)}, opt)
	if err != nil {
		c.t.Fatalf("create pod %s: %v", name, err)
	}
	return resp.GetObject().GetPod()
}

func (c *naCluster) get(name string) (*kplanev1.Pod, error) {
	ctx, opt := call(c.t)
	resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name}, opt)
	return resp.GetObject().GetPod(), err
}

func (c *naCluster) waitPod(name, what string, cond func(*kplanev1.Pod) bool) *kplanev1.Pod {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *kplanev1.Pod
	for {
		if p, err := c.get(name); err == nil {
			last = p
			if cond(p) {
				return p
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting until pod %s is %s; last status: %v", name, what, last.GetStatus())
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatal(c.t.Context().Err())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

func (c *naCluster) delete(name string, grace *int64) {
	c.t.Helper()
	ctx, opt := call(c.t)
	if _, err := c.api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: name, GracePeriodSeconds: grace}, opt); err != nil {
		c.t.Fatalf("delete pod %s: %v", name, err)
	}
}

func (c *naCluster) waitGone(name string) {
	c.t.Helper()
	c.eventually("pod "+name+" is removed", func() bool {
		_, err := c.get(name)
		return status.Code(err) == codes.NotFound
	})
}

// pid reads the pid of the pod's current container run from the agent's
// root dir (written by the shim).
func (c *naCluster) pid(p *kplanev1.Pod) int {
	c.t.Helper()
	restarts := 0
	if cs := p.GetStatus().GetContainerStatuses(); len(cs) > 0 {
		restarts = int(cs[0].GetRestartCount())
	}
	path := filepath.Join(c.roots[p.GetSpec().GetNodeName()], "pods", p.GetMetadata().GetUid(), "main", ".state", "pid."+strconv.Itoa(restarts))
	var info struct {
		Pid int `json:"pid"`
	}
	c.eventually("pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(b, &info) == nil && info.Pid > 0
	})
	return info.Pid
}

func naPhase(ph string) func(*kplanev1.Pod) bool {
	return func(p *kplanev1.Pod) bool { return p.GetStatus().GetPhase() == ph }
}

func naReady(p *kplanev1.Pod) bool {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// naAlive reports whether pid runs (zombies count as gone).
func naAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// naShims returns the pids of live shims whose command line mentions dir.
func naShims(dir string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if len(argv) > 2 && argv[1] == "shim" && strings.Contains(string(b), dir) && naAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// naKillContainers SIGKILLs the process group of every shim under root.
func naKillContainers(root string) {
	for _, pid := range naShims(filepath.Join(root, "pods") + "/") {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// TestNodeAgentExecPods runs real processes through the whole loop:
// the scheduler binds, the exec-runtime agents run, probe, restart,
// report, serve logs, and stop pods on deletion.
func TestNodeAgentExecPods(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	c := newNACluster(t, true, "na-1", "na-2")

	port := 8000 + os.Getpid()%1000
	web := c.create("web", "", "Always", func(ctr *kplanev1.Container) {
		ctr.ReadinessProbe = &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(int32(port))}, PeriodSeconds: 1}
	}, "sh", "-c", fmt.Sprintf(`exec python3 -u -m http.server %d --bind "$KPLANE_POD_IP"`, port))
	created := web
	web = c.waitPod("web", "Running and Ready", func(p *kplanev1.Pod) bool { return naPhase("Running")(p) && naReady(p) })
	if web.GetMetadata().GetUid() != created.GetMetadata().GetUid() {
		t.Fatalf("pod web has uid %s, want the created pod's %s", web.GetMetadata().GetUid(), created.GetMetadata().GetUid())
	}
	ip := web.GetStatus().GetPodIp()
	if !strings.HasPrefix(ip, "127.6") || web.GetSpec().GetNodeName() == "" {
		t.Fatalf("pod IP %q on node %q", ip, web.GetSpec().GetNodeName())
	}
	resp, err := http.Get("http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/")
	if err != nil {
		t.Fatalf("the pod does not answer on its IP: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close() // read-only
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / on the pod: %s", resp.Status)
	}

	// kpctl logs reaches the agent through the Node's address and port.
	c.eventually("kpctl logs shows the request", func() bool {
		out, err := c.cfg.kpctl("logs", "web").CombinedOutput()
		return err == nil && strings.Contains(string(out), `"GET / HTTP/1.1" 200`)
	})

	pid := c.pid(web)
	if !naAlive(pid) {
		t.Fatalf("container pid %d not running", pid)
	}
	c.delete("web", nil)
	c.waitGone("web")
	if naAlive(pid) {
		t.Fatalf("pid %d still runs after its pod was deleted", pid)
	}

	// A failing command under Never: Failed with its exit code.
	c.create("fails", "", "Never", nil, "sh", "-c", "exit 5")
	p := c.waitPod("fails", "Failed", naPhase("Failed"))
	if term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term.GetExitCode() != 5 {
		t.Fatalf("terminated state %v, want exit code 5", term)
	}

	// Under Always: restarts with a growing back-off.
	c.create("crashes", "", "Always", nil, "sh", "-c", "exit 1")
	var delays []string
	c.waitPod("crashes", "crash looping three times", func(p *kplanev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		if len(cs) == 0 {
			return false
		}
		if w := cs[0].GetState().GetWaiting(); w.GetReason() == "CrashLoopBackOff" {
			if d := strings.Fields(w.GetMessage()); len(d) > 1 && (len(delays) == 0 || delays[len(delays)-1] != d[1]) {
				delays = append(delays, d[1])
			}
		}
		return cs[0].GetRestartCount() >= 3 && cs[0].GetState().GetWaiting().GetReason() == "CrashLoopBackOff"
	})
	var prev time.Duration
	for _, s := range delays {
		d, err := time.ParseDuration(s)
		if err != nil || d <= prev {
			t.Fatalf("back-off delays do not grow: %v", delays)
		}
		prev = d
	}
}

// TestNodeAgentSurvivesSIGKILL kills the agent while it runs pods and
// starts it again: running containers are adopted (same pid, one shim
// each, no restart), a container that ended meanwhile reports its exit
// code, and a pod deleted meanwhile has its process killed. Pods are
// bound by spec.nodeName here, so the test exercises the agent alone.
func TestNodeAgentSurvivesSIGKILL(t *testing.T) {
	c := newNACluster(t, false, "na-k")
	root := c.roots["na-k"]
	var pods []*kplanev1.Pod
	for i := 0; i < 3; i++ {
		c.create(fmt.Sprintf("run-%d", i), "na-k", "Always", nil, "sleep", "300")
	}
	c.create("ends", "na-k", "Never", nil, "sleep", "300")
	c.create("deleted", "na-k", "Always", nil, "sleep", "300")
	pids := map[string]int{}
	for _, name := range []string{"run-0", "run-1", "run-2", "ends", "deleted"} {
		p := c.waitPod(name, "Running", naPhase("Running"))
		pods = append(pods, p)
		pids[name] = c.pid(p)
	}

	agent := c.agents["na-k"]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := agent.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if !naAlive(pid) {
			t.Fatalf("container of %s (pid %d) died with the agent", name, pid)
		}
	}
	if err := syscall.Kill(pids["ends"], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	c.delete("deleted", &zero)
	if err := agent.Restart(); err != nil {
		t.Fatal(err)
	}

	p := c.waitPod("ends", "Failed", naPhase("Failed"))
	if term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term.GetExitCode() != 143 {
		t.Fatalf("terminated state %v, want exit code 143 (SIGTERM)", term)
	}
	c.eventually("the deleted pod's process is killed", func() bool { return !naAlive(pids["deleted"]) })
	for _, p := range pods[:3] {
		name := p.GetMetadata().GetName()
		got := c.waitPod(name, "Running", naPhase("Running"))
		if rc := got.GetStatus().GetContainerStatuses()[0].GetRestartCount(); rc != 0 {
			t.Fatalf("%s restarted (%d) after the agent restart", name, rc)
		}
		if pid := c.pid(got); pid != pids[name] || !naAlive(pid) {
			t.Fatalf("%s: pid %d, want the adopted %d", name, pid, pids[name])
		}
		if shims := naShims(filepath.Join(root, "pods", p.GetMetadata().GetUid()) + "/"); len(shims) != 1 {
			t.Fatalf("%s has %d shims, want 1", name, len(shims))
		}
	}
	// Exactly the three adopted containers remain: no duplicates, no orphans.
	c.eventually("only the three running pods have processes", func() bool {
		return len(naShims(filepath.Join(root, "pods")+"/")) == 3
	})
}
