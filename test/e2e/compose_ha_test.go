package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/dockernet"
)

// haServices are the apiserver services of compose.ha.yaml, each also
// its etcd member's name, in the order of the published ports.
var haServices = []string{"apiserver", "apiserver-2", "apiserver-3"}

// TestComposeHA starts the three apiservers of the HA compose project
// (compose.yaml with compose.ha.yaml: stacked etcd, one member per
// apiserver container), isolated as TestCompose is, and checks what the
// profile promises, through a client given all three published ports:
//
//   - under a write load, SIGKILL the etcd leader's container (docker
//     kill -s KILL): writes continue through the other two;
//   - SIGKILL a second one: every write fails with Unavailable, none
//     succeeds; start one again: writes resume; every write acknowledged
//     on the way is present, at its resourceVersion, on each apiserver;
//   - cut the leader off the network (docker network disconnect): its
//     container turns unhealthy (its /readyz fails), a write and a
//     linearizable read through it (kpctl in its network namespace) fail
//     with Unavailable, while the other two serve; heal it (connect again
//     with the aliases and address compose gave it): it turns healthy and
//     reads through it the object written during the partition.
//
// Only the apiservers run: the controllers' failover over the same list
// is the chaos harness's subject (make chaos CHAOS_TARGET=compose-ha).
func TestComposeHA(t *testing.T) {
	c := newComposeStack(t, composeConfig{
		name: "ha", netOffset: 25, overrides: []string{"compose.ha.yaml"}, apiPorts: 3,
		certHosts: []string{"apiserver-2", "apiserver-3"},
		env:       []string{"KPLANE_APISERVERS=apiserver:6443,apiserver-2:6443,apiserver-3:6443"},
		images:    []string{"apiserver", "kpctl"},
	})
	start := time.Now()
	if _, err := c.run(5*time.Minute, append([]string{"up", "-d"}, haServices...)...); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, s := range haServices {
		ids[s] = c.containerID(s)
	}
	c.waitHealthy(ids, haServices...)
	t.Logf("three apiservers healthy %v after up", time.Since(start).Round(time.Second))

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	all := c.adminOptions(strings.Join(c.addrs, ","))
	all.CallTimeout = 20 * time.Second
	cl, err := client.Dial(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	admin := kplanev1.NewAdminClient(cl.Conn())

	// (a) Kill the leader's container under load: a new leader is
	// elected among the other two and writes go on.
	load := startWriteLoad(ctx, cl, 4)
	c.eventually("writes under load", 2*time.Minute, func() bool { return load.ok.Load() >= 50 })
	first := c.etcdLeader(ctx, admin)
	c.kill(ids[first])
	after := load.ok.Load()
	c.eventually("writes to continue after "+first+" was killed", 2*time.Minute, func() bool { return load.ok.Load() >= after+100 })
	load.halt()
	t.Logf("with %s killed: %d writes acknowledged, %d failed (in flight at the kill)", first, load.ok.Load(), load.fails.Load())

	// (b) Kill a second one: no quorum, so every write fails with
	// Unavailable; start it again: writes resume.
	second := haServices[(slices.Index(haServices, first)+1)%len(haServices)]
	c.kill(ids[second])
	requireUnavailable(ctx, t, cl, "no-quorum")
	if c.running(ids[first]) {
		t.Fatalf("%s runs again although nobody started it (restart policy after docker kill)", first)
	}
	dockerOut(t, "start", ids[second])
	waitWritable(ctx, t, cl, "quorum-back", 2*time.Minute)
	dockerOut(t, "start", ids[first])
	c.waitHealthy(ids, haServices...)
	var each []client.Options
	for _, a := range c.addrs {
		each = append(each, c.adminOptions(a))
	}
	load.checkAcked(ctx, t, each)

	// (c) Partition the leader from the other two.
	cut := c.etcdLeader(ctx, admin)
	ep, err := dockernet.Disconnect(ctx, c.dockerNetwork, ids[cut])
	if err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = ep.Connect(context.Background())
		}
	})
	// The other two elect a leader and serve, through the same client.
	waitWritable(ctx, t, cl, "during-partition", 2*time.Minute)
	getCtx, getCancel := context.WithTimeout(ctx, 20*time.Second)
	written, err := cl.Get(getCtx, &kplanev1.GetRequest{Kind: "Secret", Namespace: "default", Name: "during-partition"})
	getCancel()
	if err != nil {
		t.Fatalf("read during-partition through the majority: %v", err)
	}
	c.eventually(cut+"'s container unhealthy (its /readyz fails without a leader)", 2*time.Minute, func() bool {
		return c.health(ids[cut]) == "unhealthy"
	})
	// Inside its network namespace it still answers gRPC, but neither a
	// write nor a linearizable read.
	manifest := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: through-the-minority\n  namespace: default\n"
	wout, err := c.kpctlIn(ids[cut], manifest, "create", "-f", "-")
	if err == nil || !strings.Contains(wout, "Unavailable") {
		t.Fatalf("a write through partitioned %s: err %v, output %q; want Unavailable", cut, err, wout)
	}
	rout, err := c.kpctlIn(ids[cut], "", "get", "secret", "during-partition", "-n", "default")
	if err == nil || !strings.Contains(rout, "Unavailable") {
		t.Fatalf("a read through partitioned %s: err %v, output %q; want Unavailable", cut, err, rout)
	}
	t.Logf("partitioned %s (was %s on %s): create through it: %s; get: %s", cut, ep.IPv4, ep.Network, strings.TrimSpace(wout), strings.TrimSpace(rout))

	// Heal: it rejoins under its service name, catches up and serves the
	// object written without it.
	if err := ep.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	healed = true
	if now, err := dockernet.Inspect(ctx, c.dockerNetwork, ids[cut]); err != nil || !slices.Contains(now.Aliases, cut) {
		t.Fatalf("after the heal %s is on %s as %+v (%v), want alias %s", cut, c.dockerNetwork, now, err, cut)
	}
	c.waitHealthy(ids, cut)
	if now, err := dockernet.Inspect(ctx, c.dockerNetwork, ids[cut]); err == nil {
		t.Logf("healed %s: aliases %v, address %s", cut, now.Aliases, now.IPv4)
	}
	one, err := client.Dial(ctx, c.adminOptions(c.addrs[slices.Index(haServices, cut)]))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = one.Close() }()
	c.eventually(cut+" serves the object written during its partition", 2*time.Minute, func() bool {
		gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
		defer gcancel()
		got, err := one.Get(gctx, &kplanev1.GetRequest{Kind: "Secret", Namespace: "default", Name: "during-partition"})
		if client.IsNotFound(err) {
			t.Fatalf("%s, healthy again, answers NotFound for an object the cluster acknowledged: a stale read", cut)
		}
		if err != nil {
			return false
		}
		if rv, want := got.GetObject().Meta().GetResourceVersion(), written.GetObject().Meta().GetResourceVersion(); rv != want {
			t.Fatalf("%s reads during-partition at resourceVersion %s, the majority at %s", cut, rv, want)
		}
		return true
	})
	t.Logf("the whole test took %v after up", time.Since(start).Round(time.Second))
}

// containerID is the id of service's container, running or not.
func (c *composeStack) containerID(service string) string {
	c.t.Helper()
	out := strings.Fields(dockerOut(c.t, "ps", "-aq", "--no-trunc", "--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+service))
	if len(out) != 1 {
		c.t.Fatalf("service %s has containers %v, want one", service, out)
	}
	return out[0]
}

// health is the container's Docker health status ("" when it has none
// or is gone).
func (c *composeStack) health(id string) string {
	out, err := exec.Command("docker", "inspect", "--format", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", id).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func (c *composeStack) running(id string) bool {
	out, err := exec.Command("docker", "inspect", "--format", "{{.State.Running}}", id).Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// waitHealthy waits until each of services' containers is running and
// healthy.
func (c *composeStack) waitHealthy(ids map[string]string, services ...string) {
	c.t.Helper()
	for _, s := range services {
		c.eventually(s+" healthy", 3*time.Minute, func() bool { return c.healthy(ids[s]) })
	}
}

// kill sends the container SIGKILL and waits until it has exited.
func (c *composeStack) kill(id string) {
	c.t.Helper()
	dockerOut(c.t, "kill", "--signal", "KILL", id)
	c.eventually("container "+id[:12]+" exited", time.Minute, func() bool { return !c.running(id) })
}

// etcdLeader is the service whose etcd member leads, as a member
// answering through the client sees it.
func (c *composeStack) etcdLeader(ctx context.Context, admin kplanev1.AdminClient) string {
	c.t.Helper()
	var leader string
	c.eventually("an etcd leader", time.Minute, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := admin.EtcdMemberList(cctx, &kplanev1.EtcdMemberListRequest{})
		if err != nil {
			return false
		}
		for _, m := range resp.GetMembers() {
			if m.GetIsLeader() && slices.Contains(haServices, m.GetName()) {
				leader = m.GetName()
				return true
			}
		}
		return false
	})
	return leader
}

// kpctlIn runs the kpctl image as the admin in container id's network
// namespace against the apiserver there (127.0.0.1:6443), with stdin,
// and returns its combined output.
func (c *composeStack) kpctlIn(id, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"run", "--rm", "-i", "--network", "container:" + id, "-v", c.certs + ":/etc/kplane/certs:ro",
		"--entrypoint", "/usr/local/bin/kpctl", "kplane/kpctl:" + c.tag,
		"--server", "127.0.0.1:6443", "--tls-ca", "/etc/kplane/certs/ca.crt",
		"--client-certificate", "/etc/kplane/certs/admin.crt", "--client-key", "/etc/kplane/certs/admin.key",
		"--request-timeout", "30s"}, args...)
	cmd := exec.CommandContext(ctx, "docker", argv...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kpctl %s in %s: %w", strings.Join(args, " "), id[:12], err)
	}
	return out.String(), err
}
