package cloudcontroller

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func node(name, cidr, provider string, ready bool, taints ...string) *kplanev1.Node {
	st := kplanev1.ConditionFalse
	if ready {
		st = kplanev1.ConditionTrue
	}
	n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name}, Spec: &kplanev1.NodeSpec{PodCidr: cidr, ProviderId: provider},
		Status: &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{{Type: kplanev1.NodeReady, Status: st}},
			Addresses: []*kplanev1.NodeAddress{{Type: kplanev1.NodeHostName, Address: name}, {Type: kplanev1.NodeInternalIP, Address: "10.0.0." + name[len(name)-1:]}}}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: k, Effect: kplanev1.TaintEffectNoSchedule})
	}
	return n
}

func TestPlanRoutes(t *testing.T) {
	nodes := []*kplanev1.Node{
		node("n1", "10.244.1.0/24", "kplane-sim://i-1", true),
		node("n2", "10.244.2.0/24", "kplane-sim://i-2", true),
		node("n3", "", "kplane-sim://i-3", true),              // no range yet
		node("n4", "10.244.4.0/24", "", true),                 // no instance yet
		node("n5", "10.244.5.0/24", "kplane-sim://i-5", true), // being deleted
	}
	nodes[4].Metadata.DeletionTimestamp = timestamppb.Now()
	have := []*cloudsimv1.Route{
		{Name: "k-n1", DestinationCidr: "10.244.1.0/24", TargetInstanceId: "i-1"},   // right
		{Name: "k-n2", DestinationCidr: "10.244.9.0/24", TargetInstanceId: "i-2"},   // wrong range
		{Name: "k-gone", DestinationCidr: "10.244.7.0/24", TargetInstanceId: "i-7"}, // no node
		{Name: "other-n1", DestinationCidr: "10.9.0.0/24", TargetInstanceId: "i-1"}, // another cluster's
	}
	plan := PlanRoutes("k", nodes, have)
	if !slices.Equal(plan.Delete, []string{"k-gone", "k-n2"}) {
		t.Errorf("delete %v, want k-gone and k-n2", plan.Delete)
	}
	if len(plan.Create) != 1 || plan.Create[0].Name != "k-n2" || plan.Create[0].DestinationCidr != "10.244.2.0/24" || plan.Create[0].TargetInstanceId != "i-2" {
		t.Errorf("create %v, want k-n2 10.244.2.0/24 -> i-2", plan.Create)
	}
}

func TestBackends(t *testing.T) {
	excluded := node("n6", "", "", true)
	excluded.Metadata.Labels = map[string]string{kplanev1.LabelExcludeFromExternalLoadBalancers: ""}
	deleting := node("n7", "", "", true)
	deleting.Metadata.DeletionTimestamp = timestamppb.Now()
	nodes := []*kplanev1.Node{
		node("n2", "", "", true), node("n1", "", "", true), node("n3", "", "", false),
		node("n4", "", "", true, kplanev1.TaintNodeUninitialized), node("n5", "", "", true, kplanev1.TaintNodeShutdown),
		excluded, deleting,
	}
	var got []string
	for _, b := range Backends(nodes) {
		got = append(got, b.Name+"="+b.Address)
	}
	if want := []string{"n1=10.0.0.1", "n2=10.0.0.2"}; !slices.Equal(got, want) {
		t.Fatalf("backends %v, want %v (ready, initialised, running, included, at the InternalIP)", got, want)
	}
}

func TestListeners(t *testing.T) {
	svc := &kplanev1.Service{Spec: &kplanev1.ServiceSpec{Ports: []*kplanev1.ServicePort{
		{Port: 80, NodePort: 30080}, {Port: 53, Protocol: "UDP", NodePort: 30053}, {Port: 443, Protocol: "TCP", NodePort: 30443}}}}
	ls, skipped, ok := Listeners(svc)
	if !ok || len(ls) != 2 || ls[0].BackendPort != 30080 || ls[1].Port != 443 || !slices.Equal(skipped, []string{"53/UDP"}) {
		t.Fatalf("listeners %v skipped %v ok %v", ls, skipped, ok)
	}
	svc.Spec.Ports[0].NodePort = 0
	if _, _, ok := Listeners(svc); ok {
		t.Fatal("a port without its nodePort yet must wait")
	}
}

func TestDesiredSpec(t *testing.T) {
	in := &cloudsimv1.Instance{ProviderId: "kplane-sim://i-1", Zone: "z", Region: "r", InstanceType: "t", State: cloudsimv1.InstanceState_INSTANCE_STATE_SHUTDOWN}
	n := node("n1", "", "", true, kplanev1.TaintNodeUninitialized, "other")
	next := desiredSpec(n, in, time.Now())
	var keys []string
	for _, t := range next.Spec.Taints {
		keys = append(keys, t.Key)
	}
	l := next.Metadata.Labels
	if next.Spec.ProviderId != in.ProviderId || l[kplanev1.LabelTopologyZone] != "z" || l[kplanev1.LabelTopologyRegion] != "r" || l[kplanev1.LabelInstanceType] != "t" ||
		!slices.Equal(keys, []string{"other", kplanev1.TaintNodeShutdown}) {
		t.Fatalf("desired %v", next)
	}
	if n.Spec.ProviderId != "" || len(n.Spec.Taints) != 2 {
		t.Fatal("desiredSpec modified its input")
	}
	if again := desiredSpec(next, in, time.Now()); again != nil {
		t.Fatalf("a node that agrees needs nothing, got %v", again)
	}
	in.State = cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING
	if back := desiredSpec(next, in, time.Now()); back == nil || len(back.Spec.Taints) != 1 || back.Spec.Taints[0].Key != "other" {
		t.Fatalf("running again: %v, want the shutdown taint gone", back)
	}
	// A providerID once set is kept.
	next.Spec.ProviderId = "kplane-sim://i-old"
	if got := desiredSpec(next, in, time.Now()); got.GetSpec().GetProviderId() != "kplane-sim://i-old" {
		t.Fatalf("providerID overwritten: %v", got)
	}
}
