package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// createPod creates pod as given (bound by spec.nodeName).
func (c *naCluster) createPod(pod *kplanev1.Pod) *kplanev1.Pod {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(pod)}, opt)
	if err != nil {
		c.t.Fatalf("create pod %s: %v", pod.GetMetadata().GetName(), err)
	}
	return resp.GetObject().GetPod()
}

// kpctl runs kpctl against the cluster and returns its output.
func (c *naCluster) kpctl(args ...string) (string, error) {
	out, err := c.cfg.kpctl(args...).CombinedOutput()
	return string(out), err
}

// podDir is where the exec runtime keeps the pod's containers' directories.
func (c *naCluster) podDir(p *kplanev1.Pod) string {
	return filepath.Join(c.roots[p.GetSpec().GetNodeName()], "pods", p.GetMetadata().GetUid())
}

func naRestarts(p *kplanev1.Pod) int32 {
	if cs := p.GetStatus().GetContainerStatuses(); len(cs) > 0 {
		return cs[0].GetRestartCount()
	}
	return -1
}

// TestNodeAgentKubeletFeatures runs real processes through probes,
// init containers, sidecars, hooks and the environment, as a user's
// manifests use them.
func TestNodeAgentKubeletFeatures(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	c := newNACluster(t, false, "kl-1")
	node := "kl-1"
	basePort := 9000 + os.Getpid()%500

	t.Run("liveness restarts a web server whose health endpoint fails", func(t *testing.T) {
		port := basePort
		created := c.create("web-live", node, "Always", func(ctr *kplanev1.Container) {
			ctr.Ports = []*kplanev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
			ctr.LivenessProbe = &kplanev1.Probe{
				HttpGet: &kplanev1.HTTPGetAction{Path: "/healthz", Port: kplanev1.IntOrStringFromString("http"),
					HttpHeaders: []*kplanev1.HTTPHeader{{Name: "X-Probe", Value: "liveness"}}},
				InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 2, TerminationGracePeriodSeconds: proto.Int64(1),
			}
		}, "sh", "-c", fmt.Sprintf(`touch healthz; exec python3 -u -m http.server %d --bind "$KPLANE_POD_IP"`, port))
		p := c.waitPod("web-live", "Running", naPhase("Running"))
		first := c.pid(p)
		// The health endpoint starts failing (404): the container is restarted.
		if err := os.Remove(filepath.Join(c.podDir(created), "main", "healthz")); err != nil {
			t.Fatal(err)
		}
		p = c.waitPod("web-live", "restarted and running", func(p *kplanev1.Pod) bool {
			cs := p.GetStatus().GetContainerStatuses()
			return naRestarts(p) >= 1 && cs[0].GetState().GetRunning() != nil
		})
		if naAlive(first) {
			t.Fatalf("first run (pid %d) still alive", first)
		}
		if lt := p.GetStatus().GetContainerStatuses()[0].GetLastState().GetTerminated(); lt == nil {
			t.Fatalf("no lastState after the restart: %v", p.GetStatus())
		}
		// kpctl get shows the restarts.
		c.eventually("kpctl get shows a restart", func() bool {
			out, err := c.kpctl("get", "pod", "web-live")
			return err == nil && strings.Contains(out, "Running") && !strings.Contains(out, " 0 ")
		})
	})

	t.Run("a slow starter with a startup probe is not killed by liveness", func(t *testing.T) {
		port := basePort + 1
		probe := func(failures int32) *kplanev1.Probe {
			return &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(int32(port))},
				PeriodSeconds: 1, FailureThreshold: failures, TerminationGracePeriodSeconds: proto.Int64(1)}
		}
		c.create("slow", node, "Always", func(ctr *kplanev1.Container) {
			ctr.StartupProbe = probe(30)
			ctr.LivenessProbe = probe(1)
			ctr.ReadinessProbe = probe(1)
			ctr.ReadinessProbe.TerminationGracePeriodSeconds = nil // readiness never kills
			// Not listening for about three seconds: a liveness probe alone
			// would kill it at once.
		}, "sh", "-c", fmt.Sprintf(`sleep 3; exec python3 -u -m http.server %d --bind "$KPLANE_POD_IP"`, port))
		p := c.waitPod("slow", "Ready", naReady)
		if naRestarts(p) != 0 || !p.GetStatus().GetContainerStatuses()[0].GetStarted() {
			t.Fatalf("slow starter: %v", p.GetStatus().GetContainerStatuses()[0])
		}
	})

	t.Run("init containers run in order and a failing one blocks the app", func(t *testing.T) {
		ordered := c.createPod(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: "inits", Namespace: "default"},
			Spec: &kplanev1.PodSpec{NodeName: node, InitContainers: []*kplanev1.Container{
				{Name: "one", Image: "local", Command: []string{"sh", "-c", "echo one >> ../order"}},
				{Name: "two", Image: "local", Command: []string{"sh", "-c", "echo two >> ../order"}},
			}, Containers: []*kplanev1.Container{{Name: "main", Image: "local", Command: []string{"sh", "-c", "echo app >> ../order; exec sleep 300"}}}},
		})
		blocked := c.createPod(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: "init-blocked", Namespace: "default"},
			Spec: &kplanev1.PodSpec{NodeName: node, InitContainers: []*kplanev1.Container{
				{Name: "migrate", Image: "local", Command: []string{"sh", "-c", "echo migration failed; exit 3"}},
			}, Containers: []*kplanev1.Container{{Name: "main", Image: "local", Command: []string{"sh", "-c", "echo app ran > ../app; exec sleep 300"}}}},
		})
		c.waitPod("inits", "Running", naPhase("Running"))
		c.eventually("the app's line", func() bool {
			b, _ := os.ReadFile(filepath.Join(c.podDir(ordered), "order"))
			return strings.Contains(string(b), "app")
		})
		if b, _ := os.ReadFile(filepath.Join(c.podDir(ordered), "order")); string(b) != "one\ntwo\napp\n" {
			t.Fatalf("runs in order %q", b)
		}
		c.eventually("kpctl get shows Init:CrashLoopBackOff", func() bool {
			out, err := c.kpctl("get", "pod", "init-blocked")
			return err == nil && strings.Contains(out, "Init:CrashLoopBackOff")
		})
		if _, err := os.Stat(filepath.Join(c.podDir(blocked), "app")); err == nil {
			t.Fatal("the app ran although its init container failed")
		}
		if p, _ := c.get("init-blocked"); p.GetStatus().GetPhase() != "Pending" {
			t.Fatalf("phase %s, want Pending", p.GetStatus().GetPhase())
		}
	})

	t.Run("a sidecar runs beside the app, stops after it, preStop before SIGTERM", func(t *testing.T) {
		always := "Always"
		p := c.createPod(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: "with-sidecar", Namespace: "default"},
			Spec: &kplanev1.PodSpec{NodeName: node, RestartPolicy: "Never", InitContainers: []*kplanev1.Container{{
				Name: "proxy", Image: "local", RestartPolicy: &always,
				Command:      []string{"sh", "-c", `trap 'echo sigterm >> ../log; exit 0' TERM; touch ../proxy-up; while :; do sleep 0.05; done`},
				StartupProbe: &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"test", "-f", "../proxy-up"}}, PeriodSeconds: 1},
				Lifecycle:    &kplanev1.Lifecycle{PreStop: &kplanev1.LifecycleHandler{Exec: &kplanev1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> ../log"}}}},
			}}, Containers: []*kplanev1.Container{{Name: "main", Image: "local",
				Command: []string{"sh", "-c", "test -f ../proxy-up && echo app-beside-proxy >> ../log"}}}},
		})
		c.waitPod("with-sidecar", "Succeeded", naPhase("Succeeded"))
		if b, _ := os.ReadFile(filepath.Join(c.podDir(p), "log")); string(b) != "app-beside-proxy\nprestop\nsigterm\n" {
			t.Fatalf("log %q: want the app beside the proxy, then preStop, then SIGTERM", b)
		}
	})

	t.Run("env from a Secret and from fieldRef reaches the process", func(t *testing.T) {
		ctx, opt := call(t)
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
			Metadata: &kplanev1.ObjectMeta{Name: "creds", Namespace: "default"},
			Data:     map[string][]byte{"token": []byte("t0ken")},
		})}, opt); err != nil {
			t.Fatal(err)
		}
		c.create("env", node, "Never", func(ctr *kplanev1.Container) {
			ctr.Env = []*kplanev1.EnvVar{
				{Name: "TOKEN", ValueFrom: &kplanev1.EnvVarSource{SecretKeyRef: &kplanev1.SecretKeySelector{Name: "creds", Key: "token"}}},
				{Name: "NODE", ValueFrom: &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				{Name: "ME", ValueFrom: &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			}
			ctr.Args = []string{"$(ME) on $(NODE)"}
			ctr.EnvFrom = []*kplanev1.EnvFromSource{{Prefix: "CREDS_", SecretRef: &kplanev1.SecretEnvSource{Name: "creds"}}}
		}, "sh", "-c", `echo "token=$TOKEN creds=$CREDS_token arg=$0"`)
		c.waitPod("env", "Succeeded", naPhase("Succeeded"))
		out, err := c.kpctl("logs", "env")
		if err != nil || !strings.Contains(out, "token=t0ken creds=t0ken arg=env on kl-1") {
			t.Fatalf("kpctl logs: %q (%v)", out, err)
		}
	})
}
