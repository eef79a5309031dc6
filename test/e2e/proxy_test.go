package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func init() { binaries["proxy"] = "services/proxy" }

// TestProxyClusterIP runs bin/proxy beside three exec-runtime node agents:
// a web server pod on each node, a Service with a cluster IP in the
// default service range (127.16.0.0/12, on the loopback every pod
// shares) and its Endpoints written by the test (the Service has no
// selector, so they are the user's). A client pod's 30 requests to
// clusterIP:port reach all three pods, 10 each; after a SIGKILL the
// restarted proxy serves again.
func TestProxyClusterIP(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	c := newNACluster(t, false, "node-1", "node-2", "node-3")
	proxy := startProcess(t, "proxy", "proxy", "", append(c.cfg.connArgs("proxy"), "--log-level", "debug")...)

	const port = 8080
	ep := &kplanev1.Endpoints{Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"}}
	for i, n := range []string{"node-1", "node-2", "node-3"} {
		name := fmt.Sprintf("web-%d", i+1)
		c.create(name, n, "Always", func(ctr *kplanev1.Container) {
			ctr.ReadinessProbe = &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(port)}, PeriodSeconds: 1}
		}, "sh", "-c", fmt.Sprintf(`echo "hello from $KPLANE_POD_NAME" > index.html && exec python3 -u -m http.server %d --bind "$KPLANE_POD_IP"`, port))
		p := c.waitPod(name, "Running and Ready", func(p *kplanev1.Pod) bool { return naPhase("Running")(p) && naReady(p) })
		ep.Subsets = append(ep.Subsets, &kplanev1.EndpointSubset{
			Addresses: []*kplanev1.EndpointAddress{{Ip: p.GetStatus().GetPodIp(), NodeName: n,
				TargetRef: &kplanev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: name, Uid: p.GetMetadata().GetUid()}}},
			Ports: []*kplanev1.EndpointPort{{Name: "http", Port: port}},
		})
	}
	// A cluster IP of this run's own in the service range, a port above
	// 1024 (no privileges needed).
	clusterIP := fmt.Sprintf("127.%d.%d.%d", 16+rand.IntN(16), rand.IntN(256), 1+rand.IntN(254))
	svcPort := 20000 + rand.IntN(10000)
	addr := net.JoinHostPort(clusterIP, strconv.Itoa(svcPort))
	svc := &kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:     &kplanev1.ServiceSpec{ClusterIp: clusterIP, Ports: []*kplanev1.ServicePort{{Name: "http", Port: int32(svcPort), TargetPort: kplanev1.IntOrStringFromInt32(port)}}},
	}
	for _, o := range []*kplanev1.Object{kplanev1.MustWrap(svc), kplanev1.MustWrap(ep)} {
		ctx, opt := call(t)
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: o}, opt); err != nil {
			t.Fatalf("create %s: %v", o.Key(), err)
		}
	}
	get := func() (string, error) {
		client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		r, err := client.Get("http://" + addr + "/")
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(r.Body)
		if cerr := r.Body.Close(); err == nil {
			err = cerr
		}
		return strings.TrimSpace(string(b)), err
	}
	c.eventually("the proxy serves "+addr, func() bool {
		_, err := get()
		return err == nil
	})

	// 30 requests from a pod on node-1.
	script := `import sys, urllib.request
for _ in range(30):
    print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip(), flush=True)`
	c.create("client", "node-1", "Never", nil, "python3", "-c", script, "http://"+addr+"/")
	c.waitPod("client", "Succeeded", func(p *kplanev1.Pod) bool {
		if ph := p.GetStatus().GetPhase(); ph == "Failed" {
			t.Fatalf("client pod failed; its log: %s", podLog(t, c, "client"))
		}
		return p.GetStatus().GetPhase() == "Succeeded"
	})
	answers := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(podLog(t, c, "client")), "\n") {
		answers[line]++
	}
	for i := 1; i <= 3; i++ {
		if n := answers[fmt.Sprintf("hello from web-%d", i)]; n != 10 {
			t.Fatalf("30 requests through %s were answered %v; want 10 by each of web-1..3", addr, answers)
		}
	}

	// SIGKILL the proxy: the restarted one listens and serves again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := proxy.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := get(); err == nil {
		t.Fatalf("%s answered with the proxy dead", addr)
	}
	if err := proxy.Restart(); err != nil {
		t.Fatal(err)
	}
	c.eventually("the restarted proxy serves "+addr, func() bool {
		body, err := get()
		return err == nil && strings.HasPrefix(body, "hello from web-")
	})
}
