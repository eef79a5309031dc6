package endpoints

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func svc(name string, sel map[string]string, ports ...*kplanev1.ServicePort) *kplanev1.Service {
	return &kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"team": "a"}},
		Spec:     &kplanev1.ServiceSpec{Selector: sel, Ports: ports},
	}
}

func port(name string, p int32, target *kplanev1.IntOrString) *kplanev1.ServicePort {
	return &kplanev1.ServicePort{Name: name, Port: p, TargetPort: target, Protocol: kplanev1.ProtocolTCP}
}

type podOpt func(*kplanev1.Pod)

func notReady(p *kplanev1.Pod) {
	p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionFalse}}
}

func withPorts(ports ...*kplanev1.ContainerPort) podOpt {
	return func(p *kplanev1.Pod) { p.Spec.Containers[0].Ports = ports }
}

func pod(name, ip string, opts ...podOpt) *kplanev1.Pod {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, Uid: "uid-" + name, Labels: map[string]string{"app": "web"}},
		Spec:     &kplanev1.PodSpec{NodeName: "node-1", Containers: []*kplanev1.Container{{Name: "c"}}},
		Status: &kplanev1.PodStatus{Phase: kplanev1.PodRunning, PodIp: ip,
			Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

var web = map[string]string{"app": "web"}

func ips(as []*kplanev1.EndpointAddress) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.GetIp())
	}
	return out
}

func TestSubsetsReadyAndNotReady(t *testing.T) {
	s := svc("web", web, port("http", 80, kplanev1.IntOrStringFromInt32(8080)))
	got := Subsets(s, []*kplanev1.Pod{
		pod("b", "10.0.0.2"), pod("a", "10.0.0.1"), pod("c", "10.0.0.3", notReady),
		pod("noip", ""),
		pod("done", "10.0.0.4", func(p *kplanev1.Pod) { p.Status.Phase = kplanev1.PodSucceeded }),
		pod("gone", "10.0.0.5", func(p *kplanev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() }),
		pod("other", "10.0.0.6", func(p *kplanev1.Pod) { p.Metadata.Labels = map[string]string{"app": "db"} }),
		pod("elsewhere", "10.0.0.7", func(p *kplanev1.Pod) { p.Metadata.Namespace = "other" }),
	})
	if len(got) != 1 {
		t.Fatalf("want 1 subset, got %v", got)
	}
	if g := ips(got[0].GetAddresses()); len(g) != 2 || g[0] != "10.0.0.1" || g[1] != "10.0.0.2" {
		t.Errorf("addresses = %v, want [10.0.0.1 10.0.0.2] (sorted)", g)
	}
	if g := ips(got[0].GetNotReadyAddresses()); len(g) != 1 || g[0] != "10.0.0.3" {
		t.Errorf("notReadyAddresses = %v, want [10.0.0.3]", g)
	}
	want := &kplanev1.EndpointPort{Name: "http", Port: 8080, Protocol: kplanev1.ProtocolTCP}
	if len(got[0].GetPorts()) != 1 || !proto.Equal(got[0].GetPorts()[0], want) {
		t.Errorf("ports = %v, want [%v]", got[0].GetPorts(), want)
	}
	a := got[0].GetAddresses()[0]
	if a.GetNodeName() != "node-1" || a.GetTargetRef().GetKind() != "Pod" || a.GetTargetRef().GetName() != "a" ||
		a.GetTargetRef().GetUid() != "uid-a" || a.GetTargetRef().GetNamespace() != "default" {
		t.Errorf("address = %v, want nodeName and a Pod targetRef", a)
	}
}

func TestSubsetsPublishNotReady(t *testing.T) {
	s := svc("web", web, port("", 80, nil))
	s.Spec.PublishNotReadyAddresses = true
	got := Subsets(s, []*kplanev1.Pod{pod("a", "10.0.0.1"), pod("c", "10.0.0.3", notReady),
		pod("gone", "10.0.0.5", func(p *kplanev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() })})
	if len(got) != 1 || len(got[0].GetNotReadyAddresses()) != 0 || len(got[0].GetAddresses()) != 3 {
		t.Fatalf("want all 3 (terminating too) in addresses, got %v", got)
	}
	if p := got[0].GetPorts()[0].GetPort(); p != 80 {
		t.Errorf("a missing targetPort defaults to port: got %d", p)
	}
}

func TestSubsetsNamedPortGroupsPods(t *testing.T) {
	s := svc("web", web,
		port("http", 80, kplanev1.IntOrStringFromString("web")),
		port("metrics", 9090, kplanev1.IntOrStringFromInt32(9090)))
	got := Subsets(s, []*kplanev1.Pod{
		pod("a", "10.0.0.1", withPorts(&kplanev1.ContainerPort{Name: "web", ContainerPort: 8080})),
		pod("b", "10.0.0.2", withPorts(&kplanev1.ContainerPort{Name: "web", ContainerPort: 8081})),
		pod("c", "10.0.0.3", withPorts(&kplanev1.ContainerPort{Name: "web", ContainerPort: 8080})),
		// No port named web: only in the metrics port's subset.
		pod("d", "10.0.0.4"),
		// A UDP port of that name does not serve a TCP service port.
		pod("e", "10.0.0.5", withPorts(&kplanev1.ContainerPort{Name: "web", ContainerPort: 8080, Protocol: kplanev1.ProtocolUDP})),
	})
	if len(got) != 3 {
		t.Fatalf("want 3 subsets (8080+9090, 8081+9090, 9090 only), got %d: %v", len(got), got)
	}
	byIPs := map[string][]int32{}
	for _, s := range got {
		var ps []int32
		for _, p := range s.GetPorts() {
			ps = append(ps, p.GetPort())
		}
		for _, a := range s.GetAddresses() {
			byIPs[a.GetIp()] = ps
		}
	}
	for ip, want := range map[string][]int32{"10.0.0.1": {8080, 9090}, "10.0.0.3": {8080, 9090}, "10.0.0.2": {8081, 9090}, "10.0.0.4": {9090}, "10.0.0.5": {9090}} {
		got := byIPs[ip]
		if len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("%s serves %v, want %v", ip, got, want)
		}
	}
}

func TestSubsetsNamedPortMissingEverywhere(t *testing.T) {
	s := svc("web", web, port("http", 80, kplanev1.IntOrStringFromString("web")))
	if got := Subsets(s, []*kplanev1.Pod{pod("a", "10.0.0.1")}); got != nil {
		t.Errorf("a pod without the named port is left out: got %v", got)
	}
}

func TestSubsetsHeadlessWithoutPortsAndHostname(t *testing.T) {
	s := svc("web", web)
	s.Spec.ClusterIp = ClusterIPNone
	got := Subsets(s, []*kplanev1.Pod{
		pod("a", "10.0.0.1", func(p *kplanev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "web-0", "web" }),
		pod("b", "10.0.0.2", func(p *kplanev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "web-1", "other" }),
	})
	if len(got) != 1 || len(got[0].GetPorts()) != 0 || len(got[0].GetAddresses()) != 2 {
		t.Fatalf("headless without ports lists addresses in one portless subset, got %v", got)
	}
	if h := got[0].GetAddresses()[0].GetHostname(); h != "web-0" {
		t.Errorf("hostname with subdomain = service name: got %q, want web-0", h)
	}
	if h := got[0].GetAddresses()[1].GetHostname(); h != "" {
		t.Errorf("hostname in another subdomain is not published: got %q", h)
	}
	if l := Labels(s); l[LabelHeadless] != "" || len(l) != 2 {
		t.Errorf("labels = %v, want the service's plus %s", l, LabelHeadless)
	}
}

func TestManagedAndSelects(t *testing.T) {
	if Managed(svc("x", nil)) || Managed(svc("x", map[string]string{})) {
		t.Error("a Service without a selector is not managed")
	}
	if Selects(svc("x", nil), pod("a", "10.0.0.1")) {
		t.Error("a Service without a selector selects nothing")
	}
	if !Selects(svc("x", web), pod("a", "10.0.0.1")) {
		t.Error("selector app=web selects a pod labelled app=web")
	}
}

func TestSubsetsEqualIgnoresOrder(t *testing.T) {
	s := svc("web", web, port("a", 80, nil), port("b", 81, nil))
	pods := []*kplanev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2"), pod("c", "10.0.0.3", notReady)}
	want := Subsets(s, pods)
	// The same content, shuffled and split differently.
	shuffled := []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{want[0].Addresses[1]}, Ports: []*kplanev1.EndpointPort{want[0].Ports[1], want[0].Ports[0]}},
		{Addresses: []*kplanev1.EndpointAddress{want[0].Addresses[0]}, NotReadyAddresses: want[0].NotReadyAddresses, Ports: want[0].Ports},
	}
	if !SubsetsEqual(want, shuffled) {
		t.Errorf("reordered content must compare equal:\n%v\n%v", want, shuffled)
	}
	changed := Subsets(s, []*kplanev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2", notReady), pod("c", "10.0.0.3", notReady)})
	if SubsetsEqual(want, changed) {
		t.Error("a pod turning not ready is a change")
	}
	if SubsetsEqual(want, nil) || !SubsetsEqual(nil, []*kplanev1.EndpointSubset{}) {
		t.Error("empty and nil are equal; content and empty are not")
	}
}

func TestNeedsUpdateAndApply(t *testing.T) {
	s := svc("web", web, port("", 80, nil))
	t0 := time.Unix(100, 0)
	want := Desired(s, []*kplanev1.Pod{pod("a", "10.0.0.1")}, t0)
	cur := proto.Clone(want).(*kplanev1.Endpoints)
	cur.Metadata.Annotations = map[string]string{AnnotationLastChangeTriggerTime: "earlier", "user": "kept"}
	if NeedsUpdate(cur, want) {
		t.Error("only the trigger annotation differs: no write")
	}
	cur.Metadata.Labels = nil
	if !NeedsUpdate(cur, want) {
		t.Error("labels differ: write")
	}
	next := Apply(cur, want)
	if next.Metadata.Annotations["user"] != "kept" || next.Metadata.Labels["team"] != "a" ||
		next.Metadata.Annotations[AnnotationLastChangeTriggerTime] != t0.UTC().Format(time.RFC3339Nano) {
		t.Errorf("Apply = %v", next.Metadata)
	}
	if cur.Metadata.Labels != nil {
		t.Error("Apply must not modify cur")
	}
	unclaimed := proto.Clone(want).(*kplanev1.Endpoints)
	unclaimed.Metadata.Annotations = nil
	if !NeedsUpdate(unclaimed, want) {
		t.Error("Endpoints without the trigger annotation get claimed")
	}
}

func TestReadyTransitions(t *testing.T) {
	s := svc("web", web)
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) podOpt {
		return func(p *kplanev1.Pod) { p.Status.Conditions[0].LastTransitionTime = timestamppb.New(t0.Add(d)) }
	}
	pods := []*kplanev1.Pod{pod("a", "1", at(-time.Second)), pod("b", "2", at(time.Second)), pod("c", "3"),
		pod("x", "4", at(2*time.Second), func(p *kplanev1.Pod) { p.Metadata.Labels = nil })}
	got := ReadyTransitions(s, pods)
	if len(got) != 2 || !got["uid-a"].Equal(t0.Add(-time.Second)) || !got["uid-b"].Equal(t0.Add(time.Second)) {
		t.Errorf("ReadyTransitions = %v, want a and b (c has no time, x is not selected)", got)
	}
}

// BenchmarkDecide1000 is the pure part of one reconcile of a Service over
// 1000 pods: the desired subsets and the comparison with the current.
func BenchmarkDecide1000(b *testing.B) {
	s := svc("web", web, port("http", 80, kplanev1.IntOrStringFromString("web")))
	pods := make([]*kplanev1.Pod, 1000)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("p%d", i), fmt.Sprintf("10.0.%d.%d", i/256, i%256),
			withPorts(&kplanev1.ContainerPort{Name: "web", ContainerPort: 8080}))
	}
	cur := Desired(s, pods, time.Now())
	pods[7] = pod("p7", "10.0.0.7", notReady)
	b.ResetTimer()
	for range b.N {
		if !NeedsUpdate(cur, Desired(s, pods, time.Now())) {
			b.Fatal("a change must need an update")
		}
	}
}
