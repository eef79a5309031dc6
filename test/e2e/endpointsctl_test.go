package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

func init() {
	binaries["endpointsctl"] = "services/endpointsctl"
	binaries["replicactl"] = "services/replicactl"
	binaries["nodectl"] = "services/nodectl"
	binaries["ipamctl"] = "services/ipamctl"
}

// epCluster is the local stack with endpointsctl and a client.
type epCluster struct {
	t   *testing.T
	s   *stack.Stack
	api kplanev1.ResourcesClient
}

func (c *epCluster) eventually(what string, cond func() string) {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting until %s: %s", what, msg)
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatal(c.t.Context().Err())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

func (c *epCluster) create(o *kplanev1.Object) *kplanev1.Object {
	c.t.Helper()
	ctx, opt := call(c.t)
	resp, err := c.api.Create(ctx, &kplanev1.CreateRequest{Object: o}, opt)
	if err != nil {
		c.t.Fatalf("create %s %s: %v", o.KindName(), o.Key(), err)
	}
	return resp.GetObject()
}

func (c *epCluster) get(kind, name string) (*kplanev1.Object, error) {
	ctx, opt := call(c.t)
	resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: kind, Namespace: "default", Name: name}, opt)
	return resp.GetObject(), err
}

// update rereads the object and applies mutate until the write succeeds.
func (c *epCluster) update(kind, name string, mutate func(*kplanev1.Object)) {
	c.t.Helper()
	c.eventually("update "+kind+" "+name, func() string {
		o, err := c.get(kind, name)
		if err != nil {
			return err.Error()
		}
		mutate(o)
		ctx, opt := call(c.t)
		if _, err := c.api.Update(ctx, &kplanev1.UpdateRequest{Object: o}, opt); err != nil {
			return err.Error()
		}
		return ""
	})
}

// epView is what the tests compare: the ready and not-ready IPs and the
// port sets of an Endpoints object.
type epView struct {
	ready, notReady []string
	ports           []string // "name:port" per subset, subsets joined by "|"
	labels          map[string]string
	rv              string
}

func (c *epCluster) endpoints(name string) (epView, bool) {
	o, err := c.get("Endpoints", name)
	if err != nil {
		return epView{}, false
	}
	ep := o.GetEndpoints()
	v := epView{labels: ep.GetMetadata().GetLabels(), rv: ep.GetMetadata().GetResourceVersion()}
	for _, s := range ep.GetSubsets() {
		for _, a := range s.GetAddresses() {
			v.ready = append(v.ready, a.GetIp())
		}
		for _, a := range s.GetNotReadyAddresses() {
			v.notReady = append(v.notReady, a.GetIp())
		}
		var ps []string
		for _, p := range s.GetPorts() {
			ps = append(ps, fmt.Sprintf("%s:%d", p.GetName(), p.GetPort()))
		}
		slices.Sort(ps)
		v.ports = append(v.ports, strings.Join(ps, ","))
	}
	slices.Sort(v.ready)
	slices.Sort(v.notReady)
	slices.Sort(v.ports)
	v.ports = slices.Compact(v.ports)
	return v, true
}

func (c *epCluster) webPods() []*kplanev1.Pod {
	ctx, opt := call(c.t)
	resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=web"}, opt)
	if err != nil {
		return nil
	}
	var out []*kplanev1.Pod
	for _, o := range resp.GetItems() {
		if p := o.GetPod(); p.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, p)
		}
	}
	return out
}

func epService(name string, selector map[string]string, ports ...*kplanev1.ServicePort) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"svc": name}},
		Spec:     &kplanev1.ServiceSpec{Selector: selector, Ports: ports},
	})
}

// TestEndpointsctl runs the local stack (apiserver, scheduler, ipamctl,
// replicactl, nodectl, endpointsctl and two exec-runtime node agents): a
// ReplicaSet of three HTTP servers behind Services, and the Endpoints
// follow scaling, a failing readiness probe, a dead node agent and a
// selector change, with named and numbered target ports, several ports,
// a headless Service, and a selector-less Service left alone.
func TestEndpointsctl(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 150+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 2,
		Controllers: []string{"scheduler", "ipamctl", "replicactl", "nodectl", "endpointsctl"},
		Args: map[string][]string{
			"ipamctl":      {"--cluster-cidr", cluster.String()},
			"nodeagent":    {"--heartbeat-interval", "1s", "--lease-duration", "4s", "--housekeeping-interval", "500ms"},
			"nodectl":      {"--node-monitor-period", "1s", "--node-monitor-grace-period", "4s", "--pod-eviction-timeout", "10m"},
			"endpointsctl": {"--endpoint-updates-batch-period", "200ms", "--log-level", "debug"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	killed := map[string]bool{} // processes the test killed: their exit status is no error
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				name, _, _ := strings.Cut(strings.TrimPrefix(e.Error(), "stop "), ":")
				if !killed[name] {
					t.Errorf("stop stack: %v", e)
				}
			}
		}
		if t.Failed() {
			t.Logf("logs in %s", s.Options().LogDir)
		}
	})
	c := &epCluster{t: t, s: s, api: dialStack(context.Background(), t, s)}

	// Each pod is ready while flags/<its name> exists: its readiness
	// probe (exec; the node agent has no HTTP probes) tests for that file.
	flags := t.TempDir()
	web := map[string]string{"app": "web"}
	c.create(nameServerReplicaSet(web, &kplanev1.Probe{
		Exec:          &kplanev1.ExecAction{Command: []string{"sh", "-c", "test -e " + flags + `/"$KPLANE_POD_NAME"`}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}))
	c.create(epService("web", web, &kplanev1.ServicePort{Name: "http", Port: 80, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")}))
	c.create(epService("multi", web,
		&kplanev1.ServicePort{Name: "http", Port: 80, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromString("http")},
		&kplanev1.ServicePort{Name: "alt", Port: 81, Protocol: "TCP", TargetPort: kplanev1.IntOrStringFromInt32(8080)}))
	headless := epService("headless", web, &kplanev1.ServicePort{Name: "http", Port: 8080, Protocol: "TCP"})
	headless.GetService().Spec.ClusterIp = "None"
	c.create(headless)
	c.create(epService("manual", nil, &kplanev1.ServicePort{Name: "db", Port: 5432, Protocol: "TCP"}))
	manual := c.create(kplanev1.MustWrap(&kplanev1.Endpoints{
		Metadata: &kplanev1.ObjectMeta{Name: "manual", Namespace: "default"},
		Subsets: []*kplanev1.EndpointSubset{{
			Addresses: []*kplanev1.EndpointAddress{{Ip: "192.0.2.10"}},
			Ports:     []*kplanev1.EndpointPort{{Name: "db", Port: 5432, Protocol: "TCP"}},
		}},
	}))

	// The three pods run; until their flag files exist they are not ready.
	var ips []string
	c.eventually("three web pods Running with IPs", func() string {
		pods := c.webPods()
		ips = nil
		for _, p := range pods {
			if p.GetStatus().GetPhase() != "Running" || p.GetStatus().GetPodIp() == "" {
				return fmt.Sprintf("pod %s is %s", p.GetMetadata().GetName(), p.GetStatus().GetPhase())
			}
			ips = append(ips, p.GetStatus().GetPodIp())
		}
		if len(pods) != 3 {
			return fmt.Sprintf("%d pods", len(pods))
		}
		return ""
	})
	slices.Sort(ips)
	c.eventually("web lists three not-ready addresses", func() string {
		v, _ := c.endpoints("web")
		if len(v.ready) != 0 || !slices.Equal(v.notReady, ips) {
			return fmt.Sprintf("%+v", v)
		}
		return ""
	})
	for _, p := range c.webPods() {
		if err := os.WriteFile(filepath.Join(flags, p.GetMetadata().GetName()), []byte("ok\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantAll := func(name string, ports string) {
		t.Helper()
		c.eventually(name+" lists the three pods ready", func() string {
			v, ok := c.endpoints(name)
			if !ok || !slices.Equal(v.ready, ips) || len(v.notReady) != 0 || strings.Join(v.ports, "|") != ports {
				return fmt.Sprintf("%+v, want ready %v ports %s", v, ips, ports)
			}
			return ""
		})
	}
	wantAll("web", "http:8080")
	wantAll("multi", "alt:8080,http:8080")
	wantAll("headless", "http:8080")
	if v, _ := c.endpoints("headless"); v.labels["svc"] != "headless" {
		t.Errorf("headless Endpoints labels %v, want the Service's", v.labels)
	}
	if v, _ := c.endpoints("headless"); !hasKey(v.labels, "service.kubernetes.io/headless") {
		t.Errorf("headless Endpoints labels %v, want service.kubernetes.io/headless", v.labels)
	}

	// A readiness probe starts failing: that pod leaves the addresses
	// (within a probe period plus the batch period; the wait has a
	// generous deadline and asserts no time).
	pods := c.webPods()
	victim := pods[0]
	if err := os.Remove(filepath.Join(flags, victim.GetMetadata().GetName())); err != nil {
		t.Fatal(err)
	}
	vip := victim.GetStatus().GetPodIp()
	c.eventually("the failing pod to move to notReadyAddresses", func() string {
		v, _ := c.endpoints("web")
		if slices.Contains(v.ready, vip) || !slices.Equal(v.notReady, []string{vip}) || len(v.ready) != 2 {
			return fmt.Sprintf("%+v, want %s not ready", v, vip)
		}
		return ""
	})
	if err := os.WriteFile(filepath.Join(flags, victim.GetMetadata().GetName()), []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantAll("web", "http:8080")

	// The selector changes on the fly: multi now selects nothing.
	c.update("Service", "multi", func(o *kplanev1.Object) { o.GetService().Spec.Selector = map[string]string{"app": "nothing"} })
	c.eventually("multi to list no addresses", func() string {
		if v, _ := c.endpoints("multi"); len(v.ready)+len(v.notReady) != 0 {
			return fmt.Sprintf("%+v", v)
		}
		return ""
	})

	// Scale to one: the deleted pods drop out.
	c.update("ReplicaSet", "web", func(o *kplanev1.Object) { o.GetReplicaSet().Spec.Replicas = proto.Int32(1) })
	var last *kplanev1.Pod
	c.eventually("web to list one ready address", func() string {
		pods := c.webPods()
		v, _ := c.endpoints("web")
		if len(pods) != 1 || len(v.ready) != 1 || len(v.notReady) != 0 || v.ready[0] != pods[0].GetStatus().GetPodIp() {
			return fmt.Sprintf("%d pods, endpoints %+v", len(pods), v)
		}
		last = pods[0]
		return ""
	})

	// Kill the node agent of the last pod: once nodectl marks the pod not
	// ready, it leaves the ready addresses.
	node := last.GetSpec().GetNodeName()
	agent := s.Service("nodeagent-" + strings.TrimPrefix(node, "node-"))
	if agent == nil {
		t.Fatalf("no agent for %s", node)
	}
	kctx, kcancel := context.WithTimeout(ctx, 30*time.Second)
	defer kcancel()
	killed[agent.Name] = true
	if err := agent.Process().Kill(kctx); err != nil {
		t.Fatal(err)
	}
	lip := last.GetStatus().GetPodIp()
	c.eventually("the dead node's pod to leave the ready addresses", func() string {
		v, _ := c.endpoints("web")
		if len(v.ready) != 0 || !slices.Equal(v.notReady, []string{lip}) {
			return fmt.Sprintf("%+v, want %s not ready", v, lip)
		}
		return ""
	})

	// The selector-less Service's Endpoints are as the user wrote them.
	v, ok := c.endpoints("manual")
	if !ok || v.rv != manual.Meta().GetResourceVersion() || !slices.Equal(v.ready, []string{"192.0.2.10"}) {
		t.Errorf("the user's Endpoints changed: %+v (was resourceVersion %s)", v, manual.Meta().GetResourceVersion())
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// nameServerReplicaSet is a ReplicaSet "web" of 3 pods labelled labels,
// each serving HTTP on its container port "http" (8080) with its own pod
// name as the body, ready as readiness says.
func nameServerReplicaSet(labels map[string]string, readiness *kplanev1.Probe) *kplanev1.Object {
	script := `mkdir -p www && cd www && echo "$KPLANE_POD_NAME" > index.html && exec python3 -u -m http.server 8080 --bind "$KPLANE_POD_IP"`
	return kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(3),
			Selector: &kplanev1.LabelSelector{MatchLabels: labels},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: labels},
				Spec: &kplanev1.PodSpec{
					TerminationGracePeriodSeconds: proto.Int64(1),
					Containers: []*kplanev1.Container{{
						Name: "web", Image: "local", Command: []string{"sh", "-c", script},
						Ports:          []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: readiness,
					}},
				},
			},
		},
	})
}
