package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
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

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

// svcPort is the web Services' port: above 1024, so the proxy binds
// clusterIP:port without privileges.
const svcPort = 8000

// httpGet GETs url on a fresh connection (each request is a new
// connection to the proxy, so round robin applies per request) and
// returns the trimmed body; a status other than 200 is an error.
func httpGet(url string) (string, error) {
	return httpGetVia(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, url)
}

// httpGetVia is httpGet through c (its transport: TLS and credentials),
// with a 5s timeout.
func httpGetVia(c *http.Client, url string) (string, error) {
	client := *c
	client.Timeout = 5 * time.Second
	r, err := client.Get(url)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(r.Body)
	if cerr := r.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && r.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, r.Status, b)
	}
	return strings.TrimSpace(string(b)), err
}

// proxyMetric returns the value of the proxy's series whose line starts
// with prefix (name and labels), or -1 when it has none.
func proxyMetric(t *testing.T, health, prefix string) float64 {
	t.Helper()
	r, err := http.Get("http://" + health + "/metrics")
	if err != nil {
		return -1
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close() // read-only; a read error is returned below
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", prefix, l)
			}
			return v
		}
	}
	return -1
}

// TestServicesEndToEnd runs every part a Service needs as real processes
// (apiserver, scheduler, ipamctl, replicactl, nodectl, endpointsctl,
// three exec-runtime node agents and the proxy): a ReplicaSet of three
// HTTP servers answering with their pod name behind a Service with a
// selector and no clusterIP. The apiserver allocates the clusterIP,
// endpointsctl writes the Endpoints, the proxy listens on clusterIP:port:
// 30 requests from a pod reach all three pods; the apiserver's service
// proxy reaches more than one of them; a NodePort Service answers on the
// node's port; a headless Service gets no clusterIP and no listener; and
// after scaling to one replica only that pod answers.
func TestServicesEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	// Pod IPs from a loopback range of this run's own, outside the
	// service range 127.16.0.0/12.
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 200+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStack(ctx, t, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 3,
		Controllers: []string{"scheduler", "ipamctl", "replicactl", "nodectl", "endpointsctl"},
		Args: map[string][]string{
			"ipamctl": {"--cluster-cidr", cluster.String()},
			"proxy":   {"--log-level", "debug"},
		},
	})
	c := &epCluster{t: t, s: s, api: dialStack(ctx, t, s)}
	proxyHealth := s.Service("proxy").HealthAddr

	web := map[string]string{"app": "web"}
	// The headless Service first: by the time the proxy serves the later
	// ones it has seen this one.
	headless := epService("headless", web, &kplanev1.ServicePort{Name: "http", Port: svcPort, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")})
	headless.GetService().Spec.ClusterIp = "None"
	if got := c.create(headless).GetService().GetSpec().GetClusterIp(); got != "None" {
		t.Fatalf("headless Service got clusterIP %q, want None", got)
	}
	c.create(nameServerReplicaSet(web, &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromString("http")}, PeriodSeconds: 1}))
	// No clusterIP given: the apiserver allocates one from its default
	// range, 127.16.0.0/12.
	websvc := c.create(epService("web", web, &kplanev1.ServicePort{Name: "http", Port: svcPort, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")})).GetService()
	clusterIP, err := netip.ParseAddr(websvc.GetSpec().GetClusterIp())
	if err != nil || !netip.MustParsePrefix("127.16.0.0/12").Contains(clusterIP) {
		t.Fatalf("web's clusterIP %q, want one allocated from 127.16.0.0/12", websvc.GetSpec().GetClusterIp())
	}
	np := epService("np", web, &kplanev1.ServicePort{Name: "http", Port: svcPort, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromInt32(8080)})
	np.GetService().Spec.Type = kplanev1.ServiceTypeNodePort
	npsvc := c.create(np).GetService()
	nodePort := npsvc.GetSpec().GetPorts()[0].GetNodePort()
	if nodePort < 30000 || nodePort > 32767 || npsvc.GetSpec().GetClusterIp() == "" || npsvc.GetSpec().GetClusterIp() == clusterIP.String() {
		t.Fatalf("np got clusterIP %q nodePort %d, want its own clusterIP and a nodePort in 30000-32767", npsvc.GetSpec().GetClusterIp(), nodePort)
	}

	var names []string
	c.eventually("three web pods Running and Ready", func() string {
		pods := c.webPods()
		names = nil
		for _, p := range pods {
			if !naReady(p) {
				return fmt.Sprintf("pod %s is %s, not ready", p.GetMetadata().GetName(), p.GetStatus().GetPhase())
			}
			names = append(names, p.GetMetadata().GetName())
		}
		if len(pods) != 3 {
			return fmt.Sprintf("%d pods", len(pods))
		}
		return ""
	})
	slices.Sort(names)
	for _, svc := range []string{"web", "np"} {
		series := fmt.Sprintf(`kplane_proxy_endpoints{service="default/%s:http"}`, svc)
		c.eventually("the proxy forwards "+svc+" to three endpoints", func() string {
			if v := proxyMetric(t, proxyHealth, series); v != 3 {
				return fmt.Sprintf("%s = %v", series, v)
			}
			return ""
		})
	}
	addr := net.JoinHostPort(clusterIP.String(), strconv.Itoa(svcPort))

	// 30 requests from a pod on node-1, one connection each: round robin
	// over three endpoints answers 10 times from each pod.
	out := filepath.Join(t.TempDir(), "answers")
	client := `import sys, urllib.request
with open(sys.argv[2], "w") as f:
    for _ in range(30):
        f.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip() + "\n")`
	c.create(kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "client", Namespace: "default"},
		Spec: &kplanev1.PodSpec{NodeName: "node-1", RestartPolicy: "Never", Containers: []*kplanev1.Container{{
			Name: "client", Image: "local", Command: []string{"python3", "-c", client, "http://" + addr + "/", out}}}},
	}))
	c.eventually("the client pod to succeed", func() string {
		o, err := c.get("Pod", "client")
		if err != nil {
			return err.Error()
		}
		switch ph := o.GetPod().GetStatus().GetPhase(); ph {
		case "Succeeded":
			return ""
		case "Failed":
			b, _ := os.ReadFile(out)
			t.Fatalf("the client pod failed; it wrote %q", b)
		default:
			return "phase " + ph
		}
		return ""
	})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	answers := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		answers[l]++
	}
	for _, n := range names {
		if answers[n] != 10 {
			t.Fatalf("30 requests to %s from a pod were answered %v; want 10 by each of %v", addr, answers, names)
		}
	}

	// The apiserver's service proxy, on its main port, answers from a web
	// pod, and requests spread over more than one.
	viaAPI := s.APIURL() + "/api/v1/namespaces/default/services/web:" + strconv.Itoa(svcPort) + "/proxy/"
	adminHTTP, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	c.eventually("the apiserver's service proxy to reach two web pods", func() string {
		body, err := httpGetVia(adminHTTP, viaAPI)
		if err != nil {
			return err.Error()
		}
		if !slices.Contains(names, body) {
			t.Fatalf("GET %s answered %q, not a web pod's name %v", viaAPI, body, names)
		}
		seen[body] = true
		if len(seen) < 2 {
			return fmt.Sprintf("answered by %v", seen)
		}
		return ""
	})

	// The NodePort Service answers on the node's port (the local proxy
	// accepts node ports on every address of the host).
	nodeURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort))) + "/"
	c.eventually("np to answer on node port "+strconv.Itoa(int(nodePort)), func() string {
		body, err := httpGet(nodeURL)
		if err != nil {
			return err.Error()
		}
		if !slices.Contains(names, body) {
			t.Fatalf("GET %s answered %q, not a web pod's name %v", nodeURL, body, names)
		}
		return ""
	})

	// The headless Service has Endpoints but nothing listens for it: the
	// proxy has exactly web's clusterIP:port and np's clusterIP:port and
	// node port, and no series for headless.
	c.eventually("headless to list the three pods", func() string {
		if v, _ := c.endpoints("headless"); len(v.ready) != 3 {
			return fmt.Sprintf("%+v", v)
		}
		return ""
	})
	if v := proxyMetric(t, proxyHealth, "kplane_proxy_listeners"); v != 3 {
		t.Fatalf("the proxy has %v listeners, want 3 (web, np and np's node port; none for headless)", v)
	}
	if v := proxyMetric(t, proxyHealth, `kplane_proxy_endpoints{service="default/headless:http"}`); v != -1 {
		t.Fatalf("the proxy has a headless service port (%v endpoints)", v)
	}

	// Scale to one: once the others are gone only the remaining pod
	// answers, through the clusterIP and through the apiserver.
	c.update("ReplicaSet", "web", func(o *kplanev1.Object) { o.GetReplicaSet().Spec.Replicas = proto.Int32(1) })
	var last string
	c.eventually("one web pod left", func() string {
		pods := c.webPods()
		if len(pods) != 1 {
			return fmt.Sprintf("%d pods", len(pods))
		}
		last = pods[0].GetMetadata().GetName()
		return ""
	})
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, via := range []struct {
		url    string
		client *http.Client
	}{{"http://" + addr + "/", plain}, {viaAPI, adminHTTP}} {
		url := via.url
		c.eventually("only "+last+" to answer "+url+" over 10 requests", func() string {
			got := map[string]int{}
			for range 10 {
				body, err := httpGetVia(via.client, url)
				if err != nil {
					return err.Error()
				}
				got[body]++
			}
			if got[last] != 10 {
				return fmt.Sprintf("answered by %v", got)
			}
			return ""
		})
	}
}
