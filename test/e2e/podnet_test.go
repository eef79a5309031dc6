package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

// TestPodNetwork runs the local stack (ipamctl, the scheduler and three
// exec-runtime node agents): every node gets its own pod CIDR from the
// cluster CIDR, every pod an address from its node's range, and a pod on
// one node fetches over HTTP from pods on the other nodes by pod IP.
func TestPodNetwork(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	// A cluster CIDR of this run's own, so that stacks running at the same
	// time on this host never share pod IPs.
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 200+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startStack(ctx, t, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Controllers: []string{"scheduler", "ipamctl"}, Nodes: 3,
		Args: map[string][]string{
			"ipamctl":   {"--cluster-cidr", cluster.String()},
			"nodeagent": {"--heartbeat-interval", "1s", "--housekeeping-interval", "500ms"},
		},
	})
	c := &naCluster{t: t, addr: s.APIAddr(), api: dialStack(ctx, t, s)}

	names := []string{"node-1", "node-2", "node-3"}
	ranges := map[string]netip.Prefix{}
	c.eventually("three Ready nodes with pod CIDRs", func() bool {
		for _, n := range names {
			ctx, opt := call(t)
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: n}, opt)
			node := resp.GetObject().GetNode()
			if err != nil || !naNodeReady(node) || node.GetSpec().GetPodCidr() == "" {
				return false
			}
			ranges[n] = netip.MustParsePrefix(node.GetSpec().GetPodCidr())
		}
		return true
	})
	for a, pa := range ranges {
		if !cluster.Contains(pa.Addr()) || pa.Bits() != 24 {
			t.Fatalf("%s has pod CIDR %s, want a /24 of %s", a, pa, cluster)
		}
		for b, pb := range ranges {
			if a != b && pa.Overlaps(pb) {
				t.Fatalf("%s (%s) and %s (%s) overlap", a, pa, b, pb)
			}
		}
	}

	// One web server per node, each listening on its own pod IP.
	const port = 8080
	ips := map[string]netip.Addr{}
	for i, n := range names {
		name := fmt.Sprintf("web-%d", i+1)
		c.create(name, n, "Always", func(ctr *kplanev1.Container) {
			ctr.ReadinessProbe = &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(port)}, PeriodSeconds: 1}
		}, "sh", "-c", fmt.Sprintf(`echo "hello from $KPLANE_POD_NAME at $KPLANE_POD_IP" > index.html && exec python3 -u -m http.server %d --bind "$KPLANE_POD_IP"`, port))
	}
	for i, n := range names {
		name := fmt.Sprintf("web-%d", i+1)
		p := c.waitPod(name, "Running and Ready", func(p *kplanev1.Pod) bool { return naPhase("Running")(p) && naReady(p) })
		ip, err := netip.ParseAddr(p.GetStatus().GetPodIp())
		if err != nil {
			t.Fatalf("%s: podIP %q: %v", name, p.GetStatus().GetPodIp(), err)
		}
		r := ranges[n]
		if !r.Contains(ip) || ip == r.Addr() || ip == lastAddr(r) {
			t.Fatalf("%s on %s has IP %s, want a host address of %s", name, n, ip, r)
		}
		if ips := p.GetStatus().GetPodIps(); len(ips) != 1 || ips[0].GetIp() != ip.String() {
			t.Fatalf("%s: podIPs %v, want [%s]", name, ips, ip)
		}
		for other, oip := range ips {
			if oip == ip {
				t.Fatalf("%s and %s share IP %s", name, other, ip)
			}
		}
		ips[name] = ip
	}

	// A pod on node-1 fetches from the pods on node-2 and node-3.
	script := `import sys, urllib.request
for url in sys.argv[1:]:
    print(urllib.request.urlopen(url, timeout=10).read().decode().strip(), flush=True)`
	c.create("client", "node-1", "Never", nil, "python3", "-c", script,
		fmt.Sprintf("http://%s:%d/", ips["web-2"], port), fmt.Sprintf("http://%s:%d/", ips["web-3"], port))
	p := c.waitPod("client", "Succeeded", func(p *kplanev1.Pod) bool {
		ph := p.GetStatus().GetPhase()
		if ph == "Failed" {
			t.Fatalf("client pod failed: %v; its log: %s", p.GetStatus().GetContainerStatuses(), podLog(t, c, "client"))
		}
		return ph == "Succeeded"
	})
	out := podLog(t, c, "client")
	for _, w := range []string{"web-2", "web-3"} {
		if want := fmt.Sprintf("hello from %s at %s", w, ips[w]); !strings.Contains(out, want) {
			t.Fatalf("client on %s printed %q, want a line %q", p.GetSpec().GetNodeName(), out, want)
		}
	}
}

// lastAddr is the broadcast address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// podLog reads a pod's container log from its node agent's logs server.
func podLog(t *testing.T, c *naCluster, pod string) string {
	t.Helper()
	p, err := c.get(pod)
	if err != nil {
		t.Fatalf("get pod %s: %v", pod, err)
	}
	ctx, opt := call(t)
	resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: p.GetSpec().GetNodeName()}, opt)
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	port := resp.GetObject().GetNode().GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
	r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/logs/default/%s/main", port, pod))
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	defer func() { _ = r.Body.Close() }() // read-only
	b, _ := io.ReadAll(r.Body)
	return string(b)
}
