package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// composeStack is one compose project of deploy/compose/compose.yaml
// (with overrides such as compose.ha.yaml), isolated from a user's `make
// up` and from the other compose tests by its project name, API ports,
// network range, image tag and certificates directory.
type composeStack struct {
	t       *testing.T
	command []string // "docker compose" or "docker-compose", with -f and -p
	env     []string
	project string
	tag     string
	images  []string // the images built with tag, removed at the end
	api     kplanev1.ResourcesClient
	// addr is the first apiserver's published gRPC address; addrs are all
	// of them (three with compose.ha.yaml).
	addr  string
	addrs []string
	// network is KPLANE_NET (the first two octets); dockerNetwork the
	// project's compose network.
	network       string
	dockerNetwork string
	// certs is the stack's KPLANE_CERTS: its CA, every service's
	// certificate and the admin's, whose kubeconfig kpctl uses.
	certs string
	// https reaches the apiserver's HTTP side as the admin (TLS, client
	// certificate, http/1.1).
	https *http.Client
}

// composeImages are the images build-images.sh builds by default.
var composeImages = []string{"apiserver", "scheduler", "replicactl", "nodectl", "ipamctl", "gcctl", "endpointsctl", "jobctl", "cronjobctl", "pvctl",
	"deploymentctl", "statefulsetctl", "daemonsetctl", "disruptionctl", "tokenctl", "kcm", "nodeagent", "proxy", "kpctl", "cloudsim", "cloudctl"}

// composeConfig is what sets one compose test's project apart.
type composeConfig struct {
	// name goes into the project name and image tag ("" for TestCompose).
	name string
	// netOffset moves KPLANE_NET (10.(100+(pid+netOffset)%100)) so that
	// two compose tests of one run never share a range.
	netOffset int
	// overrides are compose files applied over compose.yaml.
	overrides []string
	// args go after -f and -p (e.g. --profile cloud).
	args []string
	// apiPorts is how many apiservers publish a port: 1, or 3 with
	// compose.ha.yaml (KPLANE_API_PORT_2 and _3).
	apiPorts int
	// certHosts are extra names of the apiserver certificate.
	certHosts []string
	// env is added to the project's environment.
	env []string
	// images to build; every image of build-images.sh when nil.
	images []string
	// logs are the services whose logs a failed test shows (every
	// service when nil) and tail how many lines of each.
	logs []string
	tail int
}

// newComposeStack prepares a compose project: the binaries, the stack's
// certificates (as make up writes them, kpctl certs; the admin
// kubeconfig names the first published port), the images under a tag of
// its own, and a cleanup that takes it down with its volumes and images,
// also on failure. The caller starts it (c.run "up" ...). Without a
// Docker engine the test is skipped.
func newComposeStack(t *testing.T, cfg composeConfig) *composeStack {
	t.Helper()
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
	// build-images.sh stages every binary whichever images it builds.
	for _, name := range append(slices.Clone(composeImages), "healthcheck") {
		pkg := "services/" + name
		if name == "kpctl" || name == "healthcheck" {
			pkg = "cmd/" + name
		}
		if err := ensureBinary(name, pkg); err != nil {
			t.Fatal(err)
		}
	}
	pid := os.Getpid()
	infix := ""
	if cfg.name != "" {
		infix = cfg.name + "-"
	}
	c := &composeStack{
		t:       t,
		project: fmt.Sprintf("kplane-e2e-%s%d", infix, pid),
		tag:     fmt.Sprintf("e2e-%s%d", infix, pid),
		images:  cfg.images,
		certs:   t.TempDir(),
		// The compose network is KPLANE_NET.0.0/16; pod CIDRs are cut from its upper half.
		network: "10." + strconv.Itoa(100+(pid+cfg.netOffset)%100),
	}
	if c.images == nil {
		c.images = composeImages
	}
	c.dockerNetwork = c.project + "_kplane"
	c.env = []string{"KPLANE_TAG=" + c.tag, "KPLANE_NET=" + c.network, "KPLANE_CERTS=" + c.certs,
		// docker-compose v1 gives up on a busy engine after 60s by default.
		"COMPOSE_HTTP_TIMEOUT=600", "DOCKER_CLIENT_TIMEOUT=600"}
	for i := range max(cfg.apiPorts, 1) {
		addr, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := strings.Cut(addr, ":")
		key := "KPLANE_API_PORT"
		if i > 0 {
			key = fmt.Sprintf("KPLANE_API_PORT_%d", i+1)
		}
		c.env = append(c.env, key+"="+port)
		c.addrs = append(c.addrs, addr)
	}
	c.addr = c.addrs[0]
	c.env = append(c.env, cfg.env...)

	certArgs := []string{"certs", "--server", c.addr, "--dir", c.certs, "--nodes", "node-1,node-2,node-3"}
	if len(cfg.certHosts) > 0 {
		certArgs = append(certArgs, "--hosts", strings.Join(cfg.certHosts, ","))
	}
	if out, err := exec.Command(filepath.Join(binDir, "kpctl"), certArgs...).CombinedOutput(); err != nil {
		t.Fatalf("kpctl certs: %v\n%s", err, out)
	}
	c.command = append(command, "-f", filepath.Join(root, "deploy", "compose", "compose.yaml"))
	for _, f := range cfg.overrides {
		c.command = append(c.command, "-f", filepath.Join(root, "deploy", "compose", f))
	}
	c.command = append(append(c.command, "-p", c.project), cfg.args...)

	build := exec.Command(filepath.Join(root, "deploy", "compose", "build-images.sh"), cfg.images...)
	build.Env = append(os.Environ(), "KPLANE_BIN="+binDir, "KPLANE_TAG="+c.tag)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build images: %v\n%s", err, out)
	}
	tail := cfg.tail
	if tail == 0 {
		tail = 40
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.run(time.Minute, "ps")
			t.Logf("compose ps:\n%s", out)
			out, _ = c.run(time.Minute, append([]string{"logs", "--no-color", "--tail", strconv.Itoa(tail)}, cfg.logs...)...)
			t.Logf("compose logs:\n%s", out)
		}
		// down.sh, as make down: the network goes too, also when Docker
		// left an endpoint on it.
		down := append([]string{filepath.Join(root, "deploy", "compose", "down.sh"), c.project}, c.command...)
		if out, err := c.runCommand(3*time.Minute, append(down, "down", "-v", "--remove-orphans", "--timeout", "10")...); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
		for _, s := range c.images {
			_ = exec.Command("docker", "image", "rm", "kplane/"+s+":"+c.tag).Run()
		}
	})
	return c
}

// adminOptions connect to addr (one apiserver, or a comma-separated
// list) as the admin, over TLS verified against the stack's CA: the
// compose apiserver refuses requests without a client certificate.
func (c *composeStack) adminOptions(addr string) client.Options {
	return client.Options{Address: addr, TLSCA: filepath.Join(c.certs, "ca.crt"),
		ClientCertFile: filepath.Join(c.certs, "admin.crt"), ClientKeyFile: filepath.Join(c.certs, "admin.key")}
}

// dialAdmin connects c.api and c.https to the first apiserver as the
// admin.
func (c *composeStack) dialAdmin() {
	t := c.t
	t.Helper()
	admin := c.adminOptions(c.addr)
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	cl, err := client.Dial(dctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	c.api = kplanev1.NewResourcesClient(cl.Conn())
	tlsCfg, err := client.TLSConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	// The listener offers h2 to gRPC clients; the REST side is http/1.1.
	tlsCfg.NextProtos = []string{"http/1.1"}
	c.https = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	t.Cleanup(c.https.CloseIdleConnections)
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
	return c.runCommand(timeout, append(append([]string{}, c.command...), args...)...)
}

// runCommand runs argv in the project's environment and returns its
// combined output.
func (c *composeStack) runCommand(timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
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

// runClient runs a busybox pod that runs script on node and returns its
// final phase and its log.
func (c *composeStack) runClient(kpctl func(args ...string) string, name, node, script string) (phase, log string) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pod := kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.PodSpec{NodeName: node, RestartPolicy: "Never", Containers: []*kplanev1.Container{{
			Name: "client", Image: "busybox", Command: []string{"sh", "-c", script}}}},
	})
	if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: pod}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	c.eventually(name+" on "+node+" finished", 3*time.Minute, func() bool {
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
		phase = resp.GetObject().GetPod().GetStatus().GetPhase()
		return err == nil && (phase == "Succeeded" || phase == "Failed")
	})
	return phase, kpctl("logs", name)
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
// the example ReplicaSet and Service on the exec-runtime node containers,
// checks Services (an allocated clusterIP from a pod, the apiserver's
// service proxy from the host) and the pod network, runs a Job, kills the
// replicactl leader's container, checks that a standby takes over and
// keeps the ReplicaSet converged, scales replicactl to three replicas
// and takes everything down again (volumes included, also on failure).
func TestCompose(t *testing.T) {
	c := newComposeStack(t, composeConfig{})
	if _, err := c.run(5*time.Minute, "up", "-d"); err != nil {
		t.Fatal(err)
	}
	c.dialAdmin()
	// Without credentials the apiserver refuses, as TLS and authentication
	// on by default promise.
	tlsCfg, err := client.TLSConfig(c.adminOptions(c.addr))
	if err != nil {
		t.Fatal(err)
	}
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: tlsCfg.RootCAs, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}}}
	r, err := anon.Get("https://" + c.addr + "/api/v1/namespaces/default/pods")
	if err != nil {
		t.Fatalf("GET pods without credentials: %v", err)
	}
	_ = r.Body.Close() // only the status matters
	if r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET pods without credentials answered %s, want 401 Unauthorized", r.Status)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	network := c.network

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

	c.eventually("two healthy cronjobctl containers and a leader among them", 2*time.Minute, func() bool {
		ids := c.containers("cronjobctl")
		return len(ids) == 2 && c.healthy(ids[0]) && c.healthy(ids[1]) && holderContainer(c.leaseHolder("cronjobctl"), ids) != ""
	})

	kpctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir, "kpctl"), append([]string{"--kubeconfig", filepath.Join(c.certs, "admin.kubeconfig")}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kpctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kpctl("apply", "-f", filepath.Join(root, "deploy", "compose", "examples", "web.yaml"))
	c.eventually("3 web pods Running", 2*time.Minute, func() bool { return c.runningPods("app=web") == 3 })
	// The DaemonSet example: one log tailer on each of the three nodes.
	kpctl("apply", "-f", filepath.Join(root, "deploy", "compose", "examples", "log-tailer.yaml"))
	c.eventually("3 log-tailer pods Running", 2*time.Minute, func() bool { return c.runningPods("app=log-tailer") == 3 })

	// The busybox httpd runs inside the node containers; kpctl logs reaches
	// it through the node's InternalIP (its address on the compose network).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=web"})
	if err != nil || len(pods.GetItems()) == 0 {
		t.Fatalf("list web pods: %v", err)
	}
	c.eventually("kpctl logs shows the pod's output", time.Minute, func() bool {
		out, err := exec.Command(filepath.Join(binDir, "kpctl"), "--kubeconfig", filepath.Join(c.certs, "admin.kubeconfig"), "logs", pods.GetItems()[0].Meta().GetName()).CombinedOutput()
		return err == nil && strings.Contains(string(out), "serving on "+network+".")
	})

	c.checkServiceProxy(kpctl)
	c.checkPodNetwork(kpctl, network)
	c.checkStorage(kpctl)

	// jobctl runs Jobs to completion with the images' busybox.
	c.eventually("a jobctl leader among its containers", 2*time.Minute, func() bool {
		return holderContainer(c.leaseHolder("jobctl"), c.containers("jobctl")) != ""
	})
	jctx, jcancel := context.WithTimeout(context.Background(), time.Minute)
	defer jcancel()
	if _, err := c.api.Create(jctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Job{
		Metadata: &kplanev1.ObjectMeta{Name: "compose-job", Namespace: "default"},
		Spec: &kplanev1.JobSpec{Completions: proto.Int32(3), Parallelism: proto.Int32(2),
			Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
				Containers: []*kplanev1.Container{{Name: "work", Image: "busybox", Command: []string{"sh", "-c", "echo done"}}}}}},
	})}); err != nil {
		t.Fatalf("create job: %v", err)
	}
	c.eventually("the Job Complete with 3 succeeded", 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Job", Namespace: "default", Name: "compose-job"})
		if err != nil {
			return false
		}
		j := resp.GetObject().GetJob()
		for _, cond := range j.GetStatus().GetConditions() {
			if cond.GetType() == kplanev1.JobComplete && cond.GetStatus() == kplanev1.ConditionTrue {
				return j.GetStatus().GetSucceeded() == 3
			}
		}
		return false
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

// checkPodNetwork runs a web server pod on node-2 and node-3 and a client
// pod on node-1 that fetches from both by pod IP (across containers, no
// NAT); then restarts node-2's container (agent and pods with it) and
// checks that its pod comes back with the same IP, reachable again.
func (c *composeStack) checkPodNetwork(kpctl func(args ...string) string, network string) {
	t := c.t
	cluster := netip.MustParsePrefix(network + ".128.0/17")
	nodeCIDR := map[string]netip.Prefix{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Node"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range resp.GetItems() {
		p, err := netip.ParsePrefix(o.GetNode().GetSpec().GetPodCidr())
		if err != nil || !cluster.Contains(p.Addr()) || p.Bits() != 24 {
			t.Fatalf("node %s has pod CIDR %q, want a /24 of %s", o.Meta().GetName(), o.GetNode().GetSpec().GetPodCidr(), cluster)
		}
		for other, q := range nodeCIDR {
			if p.Overlaps(q) {
				t.Fatalf("nodes %s and %s share pod CIDR %s", o.Meta().GetName(), other, p)
			}
		}
		nodeCIDR[o.Meta().GetName()] = p
	}

	server := func(name, node string) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &kplanev1.PodSpec{NodeName: node, Containers: []*kplanev1.Container{{
				Name: "httpd", Image: "busybox", Command: []string{"sh", "-c",
					`echo "hello from $KPLANE_POD_NAME at $KPLANE_POD_IP" > index.html && exec httpd -f -p "$KPLANE_POD_IP:8080" -h .`},
				ReadinessProbe: &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(8080)}, PeriodSeconds: 1},
			}}},
		})
	}
	for _, p := range []*kplanev1.Object{server("pn-2", "node-2"), server("pn-3", "node-3")} {
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: p}); err != nil {
			t.Fatalf("create %s: %v", p.Meta().GetName(), err)
		}
	}
	ips := map[string]string{}
	waitServer := func(name, node string) {
		c.eventually(name+" Running and Ready with an IP of "+node+"'s range", 2*time.Minute, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
			p := resp.GetObject().GetPod()
			ready := false
			for _, cond := range p.GetStatus().GetConditions() {
				ready = ready || (cond.GetType() == "Ready" && cond.GetStatus() == "True")
			}
			if err != nil || !ready {
				return false
			}
			ip, err := netip.ParseAddr(p.GetStatus().GetPodIp())
			if err != nil || !nodeCIDR[node].Contains(ip) {
				t.Fatalf("%s has podIP %q, want one of %s's %s", name, p.GetStatus().GetPodIp(), node, nodeCIDR[node])
			}
			if old, ok := ips[name]; ok && old != ip.String() {
				t.Fatalf("%s changed IP across its node's restart: %s -> %s", name, old, ip)
			}
			ips[name] = ip.String()
			return true
		})
	}
	waitServer("pn-2", "node-2")
	waitServer("pn-3", "node-3")

	// fetch runs a pod on node-1 that GETs each pod IP and prints the
	// answers, then checks its log.
	fetch := func(client string, servers ...string) {
		var urls []string
		for _, s := range servers {
			urls = append(urls, "http://"+ips[s]+":8080/")
		}
		script := `for u in "$@"; do ok=; for i in 1 2 3 4 5 6 7 8 9 10; do if wget -qO- "$u"; then ok=1; break; fi; sleep 1; done; [ -n "$ok" ] || exit 1; done`
		pod := kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: client, Namespace: "default"},
			Spec: &kplanev1.PodSpec{NodeName: "node-1", RestartPolicy: "Never", Containers: []*kplanev1.Container{{
				Name: "wget", Image: "busybox", Command: append([]string{"sh", "-c", script, "fetch"}, urls...)}}},
		})
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: pod}); err != nil {
			t.Fatalf("create %s: %v", client, err)
		}
		c.eventually(client+" on node-1 finished", 2*time.Minute, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: client})
			ph := resp.GetObject().GetPod().GetStatus().GetPhase()
			return err == nil && (ph == "Succeeded" || ph == "Failed")
		})
		out := kpctl("logs", client)
		for _, s := range servers {
			if want := "hello from " + s + " at " + ips[s]; !strings.Contains(out, want) {
				t.Fatalf("%s on node-1 printed %q, want %q", client, out, want)
			}
		}
	}
	fetch("pn-client", "pn-2", "pn-3")

	// The Docker host is on the compose network too.
	r, err := http.Get("http://" + ips["pn-3"] + ":8080/")
	if err != nil {
		t.Fatalf("the Docker host does not reach pn-3 at %s: %v", ips["pn-3"], err)
	}
	body, _ := io.ReadAll(r.Body)
	_ = r.Body.Close() // read-only
	if !strings.Contains(string(body), "hello from pn-3") {
		t.Fatalf("GET pn-3 from the host: %q", body)
	}

	// Restart node-2's container: the agent starts again, restarts its
	// pod's container with the same IP and adds the address again.
	ids := c.containers("nodeagent-2")
	if len(ids) != 1 {
		t.Fatalf("nodeagent-2 containers: %v", ids)
	}
	dockerOut(t, "restart", ids[0])
	c.eventually("pn-2 restarted after its node's restart", 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "pn-2"})
		cs := resp.GetObject().GetPod().GetStatus().GetContainerStatuses()
		return err == nil && len(cs) == 1 && cs[0].GetRestartCount() > 0
	})
	waitServer("pn-2", "node-2")
	fetch("pn-client-2", "pn-2")

	// node-2's proxy shared the namespace the restart replaced: it sees
	// its node IP gone (--node-ip-check-interval), exits, and its restart
	// joins the new namespace, so node-2's pods reach cluster IPs again.
	c.eventually("proxy-2 restarted into node-2's new network namespace", 2*time.Minute, func() bool {
		ids := c.containers("proxy-2")
		return len(ids) == 1 && dockerOut(t, "inspect", "--format", "{{.RestartCount}}", ids[0]) != "0" && c.healthy(ids[0])
	})
	getCtx, getCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer getCancel()
	svc, err := c.api.Get(getCtx, &kplanev1.GetRequest{Kind: "Service", Namespace: "default", Name: "hello"})
	if err != nil {
		t.Fatalf("get Service hello: %v", err)
	}
	clusterIP := svc.GetObject().GetService().GetSpec().GetClusterIp()
	script := `for i in $(seq 1 60); do wget -qO- http://` + clusterIP + `/ && exit 0; sleep 1; done; exit 1`
	if phase, out := c.runClient(kpctl, "hello-client-2", "node-2", script); phase != "Succeeded" || !strings.Contains(out, "hello from hello-") {
		t.Fatalf("after node-2's restart a pod on node-2 does not reach Service hello at %s: %s; its log:\n%s", clusterIP, phase, out)
	}
}

// checkServiceProxy runs a web server pod on each node behind a Service
// with a selector and no clusterIP: the apiserver allocates one,
// endpointsctl writes the Endpoints. A pod on node-1 fetches the clusterIP
// 30 times: node-1's proxy, in node-1's network namespace, spreads them
// over the pods of all three nodes. From the Docker host, the apiserver's
// service proxy reaches all three too, and the example's Service web
// answers as the README shows.
func (c *composeStack) checkServiceProxy(kpctl func(args ...string) string) {
	t := c.t
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("proxy-%d", i)
		c.eventually(name+" healthy", 2*time.Minute, func() bool {
			ids := c.containers(name)
			return len(ids) == 1 && c.healthy(ids[0])
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ips []string
	for i := 1; i <= 3; i++ {
		name, node := fmt.Sprintf("hello-%d", i), fmt.Sprintf("node-%d", i)
		pod := kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "hello"}},
			Spec: &kplanev1.PodSpec{NodeName: node, Containers: []*kplanev1.Container{{
				Name: "httpd", Image: "busybox", Command: []string{"sh", "-c",
					`echo "hello from $KPLANE_POD_NAME" > index.html && exec httpd -f -p "$KPLANE_POD_IP:8080" -h .`},
				Ports:          []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(8080)}, PeriodSeconds: 1},
			}}},
		})
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: pod}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("hello-%d", i)
		c.eventually(name+" Running and Ready", 2*time.Minute, func() bool {
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
			p := resp.GetObject().GetPod()
			for _, cond := range p.GetStatus().GetConditions() {
				if err == nil && cond.GetType() == "Ready" && cond.GetStatus() == "True" && p.GetStatus().GetPodIp() != "" {
					ips = append(ips, p.GetStatus().GetPodIp())
					return true
				}
			}
			return false
		})
	}
	slices.Sort(ips)
	// No clusterIP: the apiserver allocates one from its default range,
	// 127.16.0.0/12, a loopback range, so each node's proxy binds it in
	// the node's network namespace.
	resp, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: &kplanev1.ServiceSpec{Selector: map[string]string{"app": "hello"},
			Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, TargetPort: kplanev1.IntOrStringFromString("http")}}},
	})})
	if err != nil {
		t.Fatalf("create Service hello: %v", err)
	}
	clusterIP := resp.GetObject().GetService().GetSpec().GetClusterIp()
	if ip, err := netip.ParseAddr(clusterIP); err != nil || !netip.MustParsePrefix("127.16.0.0/12").Contains(ip) {
		t.Fatalf("Service hello got clusterIP %q, want one allocated from 127.16.0.0/12", clusterIP)
	}
	var addrs []string
	c.eventually("endpointsctl lists the three hello pods in Endpoints hello", 2*time.Minute, func() bool {
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Endpoints", Namespace: "default", Name: "hello"})
		if err != nil {
			return false
		}
		addrs = nil
		for _, s := range resp.GetObject().GetEndpoints().GetSubsets() {
			for _, a := range s.GetAddresses() {
				addrs = append(addrs, a.GetIp())
			}
		}
		slices.Sort(addrs)
		return slices.Equal(addrs, ips)
	})

	script := `for i in $(seq 1 60); do wget -qO- http://` + clusterIP + `/ && break; sleep 1; done; for i in $(seq 1 30); do wget -qO- http://` + clusterIP + `/ || exit 1; done`
	phase, out := c.runClient(kpctl, "hello-client", "node-1", script)
	if phase != "Succeeded" {
		t.Fatalf("hello-client %s; its log:\n%s", phase, out)
	}
	for i := 1; i <= 3; i++ {
		if want := fmt.Sprintf("hello from hello-%d", i); !strings.Contains(out, want) {
			t.Fatalf("30 requests to %s from node-1 never reached hello-%d on node-%d; the log:\n%s", clusterIP, i, i, out)
		}
	}

	// From the Docker host through the apiserver's published port, as the
	// admin: the service proxy spreads requests over the pods of all three
	// nodes.
	get := func(url string) (string, error) {
		r, err := c.https.Get(url)
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close() // read-only; a read error is returned
		if err == nil && r.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", r.Status, b)
		}
		return strings.TrimSpace(string(b)), err
	}
	proxyURL := "https://" + c.addr + "/api/v1/namespaces/default/services/hello:80/proxy/"
	seen := map[string]bool{}
	c.eventually("GET "+proxyURL+" from the Docker host to reach hello-1..3", time.Minute, func() bool {
		body, err := get(proxyURL)
		if err != nil {
			return false
		}
		if !strings.HasPrefix(body, "hello from hello-") {
			t.Fatalf("GET %s answered %q", proxyURL, body)
		}
		seen[body] = true
		return len(seen) == 3
	})
	// The README's example: the Service web of examples/web.yaml.
	webURL := "https://" + c.addr + "/api/v1/namespaces/default/services/web:80/proxy/"
	c.eventually("GET "+webURL+" from the Docker host to answer from a web pod", time.Minute, func() bool {
		body, err := get(webURL)
		return err == nil && strings.HasPrefix(body, "hello from web-")
	})
}
