package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// TestComposeCloud starts the compose deployment with the simulated cloud
// (profile cloud, node agents with --cloud-provider=external): the nodes
// are initialised from cloudsim's instances and routed, and a
// LoadBalancer Service over three busybox httpd pods gets ingress
// 127.0.0.1; from the Docker host, the port cloudsim gave it in the
// published range reaches all three pods. Isolated like TestCompose: a
// project, image tag, API port, network and port range of its own.
func TestComposeCloud(t *testing.T) {
	cloudAddr, err := launcher.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, cloudPort, _ := strings.Cut(cloudAddr, ":")
	// A network and a load balancer port range of this run's own (the
	// range is published on the host's loopback, so it must be free).
	pid := os.Getpid()
	lbLow := 40000 + (pid%500)*10
	lbPorts := fmt.Sprintf("%d-%d", lbLow, lbLow+9)
	c := newComposeStack(t, composeConfig{
		name: "cloud", netOffset: 50, args: []string{"--profile", "cloud"},
		env:  []string{"KPLANE_CLOUD_PROVIDER=external", "KPLANE_CLOUD_ROUTES=cloudsim:7070", "KPLANE_LB_PORTS=" + lbPorts, "KPLANE_CLOUD_PORT=" + cloudPort},
		logs: []string{"cloudsim", "cloudctl"}, tail: 30,
	})
	// One replica of each controller (HA is TestCompose's subject): half
	// the containers, so a loaded Docker engine brings the stack up in
	// time.
	up := []string{"up", "-d"}
	for _, s := range []string{"scheduler", "replicactl", "nodectl", "ipamctl", "gcctl", "endpointsctl", "jobctl", "cronjobctl", "pvctl",
		"deploymentctl", "statefulsetctl", "daemonsetctl", "disruptionctl", "tokenctl", "cloudctl"} {
		up = append(up, "--scale", s+"=1")
	}
	if _, err := c.run(10*time.Minute, up...); err != nil {
		t.Fatal(err)
	}
	c.dialAdmin()
	conn, err := grpc.NewClient(cloudAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cloud := cloudsimv1.NewCloudClient(conn)
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}

	c.eventually("three Ready nodes initialised by cloudctl and routed", 4*time.Minute, func() bool {
		ctx, cancel := call()
		defer cancel()
		resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Node"})
		if err != nil {
			return false
		}
		routes, err := cloud.ListRoutes(ctx, &cloudsimv1.ListRoutesRequest{})
		if err != nil || len(routes.Routes) != 3 {
			return false
		}
		ready := 0
		for _, o := range resp.GetItems() {
			n := o.GetNode()
			if composeNodeReady(n) && strings.HasPrefix(n.GetSpec().GetProviderId(), cloudsimv1.ProviderPrefix) &&
				n.GetMetadata().GetLabels()[kplanev1.LabelTopologyZone] != "" && len(n.GetSpec().GetTaints()) == 0 {
				ready++
			}
		}
		return ready == 3
	})

	// Each node container's routing table carries the cloud's routes: the
	// other two nodes' pod CIDRs via their addresses (nodeagent
	// --cloud-routes-from), so pod-to-pod traffic follows them.
	ctx, cancel := call()
	nodes, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Node"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, self := range []string{"1", "2", "3"} {
		var want []string
		for _, o := range nodes.GetItems() {
			n := o.GetNode()
			if n.GetMetadata().GetName() == "node-"+self {
				continue
			}
			want = append(want, n.GetSpec().GetPodCidr()+" via "+n.GetStatus().GetAddresses()[0].GetAddress())
		}
		ids := c.containers("nodeagent-" + self)
		if len(ids) != 1 {
			t.Fatalf("nodeagent-%s containers: %v", self, ids)
		}
		c.eventually("node-"+self+"'s routing table holds the cloud's routes", time.Minute, func() bool {
			out, err := exec.Command("docker", "exec", ids[0], "ip", "route", "show").CombinedOutput()
			if err != nil {
				return false
			}
			for _, w := range want {
				if !strings.Contains(string(out), w) {
					return false
				}
			}
			return true
		})
	}

	labels := map[string]string{"app": "lbweb"}
	create := func(o *kplanev1.Object) {
		t.Helper()
		ctx, cancel := call()
		defer cancel()
		if _, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: o}); err != nil {
			t.Fatalf("create %s: %v", o.Key(), err)
		}
	}
	create(kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: "lbweb", Namespace: "default"},
		Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(3), Selector: &kplanev1.LabelSelector{MatchLabels: labels},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: labels}, Spec: &kplanev1.PodSpec{
				TerminationGracePeriodSeconds: proto.Int64(1),
				Containers: []*kplanev1.Container{{Name: "httpd", Image: "busybox", Command: []string{"sh", "-c",
					`echo "$KPLANE_POD_NAME" > index.html && exec httpd -f -p "$KPLANE_POD_IP:8080" -h .`},
					Ports:          []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(8080)}, PeriodSeconds: 1}}}}}},
	}))
	create(kplanev1.MustWrap(&kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: "lbweb", Namespace: "default"},
		Spec: &kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeLoadBalancer, Selector: labels,
			Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")}}},
	}))

	var url string
	c.eventually("status.loadBalancer.ingress 127.0.0.1 and a port of the published range", 3*time.Minute, func() bool {
		ctx, cancel := call()
		defer cancel()
		resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Service", Namespace: "default", Name: "lbweb"})
		if err != nil {
			return false
		}
		in := resp.GetObject().GetService().GetStatus().GetLoadBalancer().GetIngress()
		if len(in) != 1 || in[0].Ip != "127.0.0.1" {
			return false
		}
		lb, err := cloud.GetLoadBalancer(ctx, &cloudsimv1.GetLoadBalancerRequest{Name: "default.lbweb"})
		if err != nil || len(lb.LoadBalancer.Listeners) != 1 {
			return false
		}
		ext := lb.LoadBalancer.Listeners[0].ExternalPort
		if ext < int32(lbLow) || ext > int32(lbLow+9) {
			t.Fatalf("load balancer port %d is outside the published range %s", ext, lbPorts)
		}
		url = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ext))) + "/"
		return true
	})
	var pods []string
	c.eventually("from the host, the load balancer reaches all three pods", 4*time.Minute, func() bool {
		ctx, cancel := call()
		defer cancel()
		resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=lbweb"})
		if err != nil {
			return false
		}
		pods = nil
		for _, o := range resp.GetItems() {
			if p := o.GetPod(); p.GetMetadata().GetDeletionTimestamp() == nil && naReady(p) {
				pods = append(pods, p.GetMetadata().GetName())
			}
		}
		if len(pods) != 3 {
			return false
		}
		seen := map[string]bool{}
		for range 30 {
			body, err := httpGet(url)
			if err != nil || !slices.Contains(pods, body) {
				return false
			}
			seen[body] = true
		}
		return len(seen) == 3
	})
	t.Logf("%s reached %v through cloudsim's load balancer", url, pods)
}
