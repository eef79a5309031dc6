package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// composeStack is one compose project of deploy/compose/compose.yaml,
// isolated from a user's `make up` by its project name, API port, network
// range and image tag.
type composeStack struct {
	t       *testing.T
	command []string // "docker compose" or "docker-compose", with -f and -p
	env     []string
	project string
	tag     string
	api     kplanev1.ResourcesClient
	addr    string
}

// composeCommand prefers the docker compose plugin, as the Makefile does.
func composeCommand() ([]string, error) {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}, nil
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	return nil, fmt.Errorf("neither the docker compose plugin nor docker-compose is installed")
}

func (c *composeStack) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append(append([]string{}, c.command...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out.String())
	}
	return out.String(), nil
}

func dockerOut(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// containers lists the ids of a service's running containers.
func (c *composeStack) containers(service string) []string {
	out := dockerOut(c.t, "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+service)
	return strings.Fields(out)
}

func (c *composeStack) healthy(id string) bool {
	out, err := exec.Command("docker", "inspect", "--format", "{{.State.Running}} {{.State.Health.Status}}", id).Output()
	return err == nil && strings.TrimSpace(string(out)) == "true healthy"
}

func (c *composeStack) leaseHolder(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: name})
	if err != nil {
		return ""
	}
	return resp.GetObject().GetLease().GetSpec().GetHolderIdentity()
}

// holderContainer maps a leader-election identity (hostname_pid; the
// hostname is the short container id) to one of ids.
func holderContainer(identity string, ids []string) string {
	i := strings.LastIndexByte(identity, '_')
	if i <= 0 {
		return ""
	}
	for _, id := range ids {
		if strings.HasPrefix(id, identity[:i]) {
			return id
		}
	}
	return ""
}

func (c *composeStack) eventually(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(500 * time.Millisecond) // polling interval, not synchronisation
	}
}

func (c *composeStack) runningPods(selector string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: selector})
	if err != nil {
		return -1
	}
	n := 0
	for _, o := range resp.GetItems() {
		if o.GetPod().GetStatus().GetPhase() == "Running" && o.Meta().GetDeletionTimestamp() == nil {
			n++
		}
	}
	return n
}

// TestCompose builds the images, starts deploy/compose/compose.yaml, runs
// the example ReplicaSet on the exec-runtime node containers, kills the
// replicactl leader's container, checks that a standby takes over and
// keeps the ReplicaSet converged, scales replicactl to three replicas
// and takes everything down again (volumes included, also on failure).
func TestCompose(t *testing.T) {
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker version: %v: %s); the compose deployment is not tested", err, bytes.TrimSpace(out))
	}
	command, err := composeCommand()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for name, pkg := range map[string]string{
		"apiserver": "services/apiserver", "scheduler": "services/scheduler", "replicactl": "services/replicactl",
		"nodectl": "services/nodectl", "gcctl": "services/gcctl", "nodeagent": "services/nodeagent",
		"kpctl": "cmd/kpctl", "healthcheck": "cmd/healthcheck",
	} {
		if err := ensureBinary(name, pkg); err != nil {
			t.Fatal(err)
		}
	}
	addr, err := launcher.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	pid := os.Getpid()
	c := &composeStack{
		t:       t,
		project: fmt.Sprintf("kplane-e2e-%d", pid),
		tag:     fmt.Sprintf("e2e-%d", pid),
		addr:    addr,
	}
	c.command = append(command, "-f", filepath.Join(root, "deploy", "compose", "compose.yaml"), "-p", c.project)
	c.env = []string{"KPLANE_TAG=" + c.tag, "KPLANE_API_PORT=" + port, "KPLANE_NET=10.213." + strconv.Itoa(100+pid%100)}

	build := exec.Command(filepath.Join(root, "deploy", "compose", "build-images.sh"))
	build.Env = append(os.Environ(), "KPLANE_BIN="+binDir, "KPLANE_TAG="+c.tag)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build images: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.run(time.Minute, "ps")
			t.Logf("compose ps:\n%s", out)
			out, _ = c.run(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := c.run(3*time.Minute, "down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
		for _, s := range []string{"apiserver", "scheduler", "replicactl", "nodectl", "gcctl", "nodeagent", "kpctl"} {
			_ = exec.Command("docker", "image", "rm", "kplane/"+s+":"+c.tag).Run()
		}
	})
	if _, err := c.run(5*time.Minute, "up", "-d"); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c.api = kplanev1.NewResourcesClient(conn)

	c.eventually("three Ready nodes", 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Node"})
		if err != nil {
			return false
		}
		ready := 0
		for _, o := range resp.GetItems() {
			if composeNodeReady(o.GetNode()) {
				ready++
			}
		}
		return ready == 3
	})
	c.eventually("two healthy replicactl containers and a leader among them", 2*time.Minute, func() bool {
		ids := c.containers("replicactl")
		return len(ids) == 2 && c.healthy(ids[0]) && c.healthy(ids[1]) && holderContainer(c.leaseHolder("replicactl"), ids) != ""
	})

	kpctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir, "kpctl"), append([]string{"--server", addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kpctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kpctl("apply", "-f", filepath.Join(root, "deploy", "compose", "examples", "web.yaml"))
	c.eventually("3 web pods Running", 2*time.Minute, func() bool { return c.runningPods("app=web") == 3 })

	// The busybox httpd runs inside the node containers; kpctl logs reaches
	// it through the node's InternalIP (its address on the compose network).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=web"})
	if err != nil || len(pods.GetItems()) == 0 {
		t.Fatalf("list web pods: %v", err)
	}
	c.eventually("kpctl logs shows the pod's output", time.Minute, func() bool {
		out, err := exec.Command(filepath.Join(binDir, "kpctl"), "--server", addr, "logs", pods.GetItems()[0].Meta().GetName()).CombinedOutput()
		return err == nil && strings.Contains(string(out), "serving on 127.")
	})

	// Kill the leader's container: the standby takes the lease once it
	// expires and keeps the ReplicaSet converged.
	ids := c.containers("replicactl")
	holder := c.leaseHolder("replicactl")
	leader := holderContainer(holder, ids)
	if leader == "" {
		t.Fatalf("lease holder %q is none of the replicactl containers %v", holder, ids)
	}
	dockerOut(t, "kill", leader)
	c.eventually("a standby takes the replicactl lease", 2*time.Minute, func() bool {
		h := c.leaseHolder("replicactl")
		id := holderContainer(h, c.containers("replicactl"))
		return h != holder && id != "" && id != leader
	})
	kpctl("scale", "rs", "web", "--replicas=4")
	c.eventually("the new leader scales web to 4 Running pods", 2*time.Minute, func() bool { return c.runningPods("app=web") == 4 })

	// Scale replicactl to three: one leader, two standbys.
	if _, err := c.run(5*time.Minute, "up", "-d", "--scale", "replicactl=3"); err != nil {
		t.Fatal(err)
	}
	c.eventually("three healthy replicactl containers, one holding the lease", 2*time.Minute, func() bool {
		ids := c.containers("replicactl")
		if len(ids) != 3 {
			return false
		}
		for _, id := range ids {
			if !c.healthy(id) {
				return false
			}
		}
		return holderContainer(c.leaseHolder("replicactl"), ids) != ""
	})
	if out := kpctl("get", "leases", "-n", "kplane-system"); !strings.Contains(out, c.leaseHolder("replicactl")) {
		t.Fatalf("kpctl get leases does not show the replicactl holder:\n%s", out)
	}
}

func composeNodeReady(n *kplanev1.Node) bool {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}
