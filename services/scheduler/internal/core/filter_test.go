package core

import (
	"slices"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestPodRequests(t *testing.T) {
	init := testPod("x", [2]string{"100m", "64Mi"}, [2]string{"200m", ""})
	init.Spec.InitContainers = []*kplanev1.Container{{Name: "i", Resources: &kplanev1.ResourceRequirements{
		Requests: map[string]string{ResourceCPU: "1", ResourceMemory: "10Mi"}}}}
	tests := []struct {
		name          string
		pod           *kplanev1.Pod
		want, nonZero Resources
	}{
		{"no requests count 0 but one pod", testPod("a"), Resources{Pods: 1},
			Resources{MilliCPU: DefaultMilliCPURequest, Memory: DefaultMemoryRequest, Pods: 1}},
		{"containers are summed", testPod("b", [2]string{"100m", "64Mi"}, [2]string{"0.5", "1Gi"}),
			Resources{MilliCPU: 600, Memory: 64<<20 + 1<<30, Pods: 1}, Resources{MilliCPU: 600, Memory: 64<<20 + 1<<30, Pods: 1}},
		{"missing memory defaults only for scoring", testPod("c", [2]string{"250m", ""}),
			Resources{MilliCPU: 250, Pods: 1}, Resources{MilliCPU: 250, Memory: DefaultMemoryRequest, Pods: 1}},
		{"largest init container wins when larger", init,
			Resources{MilliCPU: 1000, Memory: 64 << 20, Pods: 1}, Resources{MilliCPU: 1000, Memory: 64<<20 + DefaultMemoryRequest, Pods: 1}},
		{"fractional millicores round up", testPod("d", [2]string{"0.0001", "1k"}),
			Resources{MilliCPU: 1, Memory: 1000, Pods: 1}, Resources{MilliCPU: 1, Memory: 1000, Pods: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, nz, err := PodRequests(tt.pod.Spec)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || nz != tt.nonZero {
				t.Fatalf("PodRequests = %+v / %+v, want %+v / %+v", got, nz, tt.want, tt.nonZero)
			}
		})
	}
	if _, err := NewPodInfo(testPod("bad", [2]string{"lots", ""})); err == nil {
		t.Fatal("an unparsable request must be an error")
	}
}

func TestNodeState(t *testing.T) {
	n := testNode("n", "2", "4Gi", 10)
	n.Status.Allocatable = map[string]string{ResourceCPU: "1500m"} // memory and pods from capacity
	st := NewNodeState(n)
	if want := (Resources{MilliCPU: 1500, Memory: 4 << 30, Pods: 10}); st.Allocatable != want || !st.Ready {
		t.Fatalf("state = %+v, want allocatable %+v and ready", st, want)
	}
	if NewNodeState(testNode("n", "1", "1Gi", 1, notReady("Unknown"))).Ready {
		t.Fatal("Ready=Unknown must not be ready")
	}
	n2 := testNode("n", "2", "4Gi", 10)
	n2.Status.Conditions = nil
	if NewNodeState(n2).Ready {
		t.Fatal("a node without a Ready condition must not be ready")
	}
}

func TestFilters(t *testing.T) {
	small := testPod("small", [2]string{"500m", "512Mi"})
	tolerating := func(tols ...*kplanev1.Toleration) *kplanev1.Pod {
		p := testPod("tol")
		p.Spec.Tolerations = tols
		return p
	}
	selecting := func(sel map[string]string) *kplanev1.Pod {
		p := testPod("sel")
		p.Spec.NodeSelector = sel
		return p
	}
	tests := []struct {
		name   string
		filter FilterFunc
		pod    *kplanev1.Pod
		node   *NodeInfo
		want   []string
	}{
		{"ready node passes", FilterReady, small, nodeInfo(testNode("n", "1", "1Gi", 10)), nil},
		{"not ready node fails", FilterReady, small, nodeInfo(testNode("n", "1", "1Gi", 10, notReady("False"))), []string{ReasonNotReady}},
		{"unknown ready fails", FilterReady, small, nodeInfo(testNode("n", "1", "1Gi", 10, notReady("Unknown"))), []string{ReasonNotReady}},

		{"schedulable passes", FilterUnschedulable, small, nodeInfo(testNode("n", "1", "1Gi", 10)), nil},
		{"cordoned fails", FilterUnschedulable, small, nodeInfo(testNode("n", "1", "1Gi", 10, cordoned)), []string{ReasonUnschedulable}},
		{"cordoned but tolerated", FilterUnschedulable,
			tolerating(&kplanev1.Toleration{Key: "node.kubernetes.io/unschedulable", Operator: "Exists", Effect: "NoSchedule"}),
			nodeInfo(testNode("n", "1", "1Gi", 10, cordoned)), nil},

		{"fits exactly", FilterResources, testPod("p", [2]string{"1", "1Gi"}), nodeInfo(testNode("n", "1", "1Gi", 1)), nil},
		{"insufficient cpu", FilterResources, testPod("p", [2]string{"1001m", ""}), nodeInfo(testNode("n", "1", "1Gi", 10)),
			[]string{ReasonInsufficientCPU}},
		{"insufficient memory counts assigned pods", FilterResources, small,
			nodeInfo(testNode("n", "4", "1Gi", 10), testPod("a", [2]string{"", "600Mi"})), []string{ReasonInsufficientMem}},
		{"every short resource is reported", FilterResources, testPod("p", [2]string{"2", "2Gi"}),
			nodeInfo(testNode("n", "1", "1Gi", 1), testPod("a")), []string{ReasonTooManyPods, ReasonInsufficientCPU, ReasonInsufficientMem}},
		{"pod without requests needs only a slot", FilterResources, testPod("p"),
			nodeInfo(testNode("n", "", "", 2), testPod("a")), nil},
		{"pod limit", FilterResources, testPod("p"), nodeInfo(testNode("n", "8", "8Gi", 2), testPod("a"), testPod("b")),
			[]string{ReasonTooManyPods}},
		{"node without pods allocatable takes none", FilterResources, testPod("p"), nodeInfo(testNode("n", "8", "8Gi", 0)),
			[]string{ReasonTooManyPods}},

		{"selector matches", FilterNodeSelector, selecting(map[string]string{"disk": "ssd"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withLabels("disk", "ssd", "zone", "a"))), nil},
		{"selector value differs", FilterNodeSelector, selecting(map[string]string{"disk": "ssd"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withLabels("disk", "hdd"))), []string{ReasonNodeSelector}},
		{"selector label missing", FilterNodeSelector, selecting(map[string]string{"disk": "ssd", "zone": "a"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withLabels("zone", "a"))), []string{ReasonNodeSelector}},

		{"untainted", FilterTaints, small, nodeInfo(testNode("n", "1", "1Gi", 1)), nil},
		{"NoSchedule not tolerated", FilterTaints, small, nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("dedicated", "gpu", "NoSchedule"))),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{"NoExecute not tolerated", FilterTaints, small,
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("node.kubernetes.io/unreachable", "", "NoExecute"))),
			[]string{"node(s) had untolerated taint {node.kubernetes.io/unreachable: }"}},
		{"PreferNoSchedule does not filter", FilterTaints, small,
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("a", "b", "PreferNoSchedule"))), nil},
		{"Equal toleration", FilterTaints, tolerating(&kplanev1.Toleration{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("dedicated", "gpu", "NoSchedule"))), nil},
		{"Equal toleration with another value", FilterTaints,
			tolerating(&kplanev1.Toleration{Key: "dedicated", Operator: "Equal", Value: "cpu", Effect: "NoSchedule"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("dedicated", "gpu", "NoSchedule"))),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{"Exists toleration ignores value", FilterTaints, tolerating(&kplanev1.Toleration{Key: "dedicated", Operator: "Exists"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("dedicated", "gpu", "NoSchedule"), withTaint("dedicated", "x", "NoExecute"))), nil},
		{"toleration for another effect", FilterTaints,
			tolerating(&kplanev1.Toleration{Key: "dedicated", Operator: "Exists", Effect: "NoSchedule"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("dedicated", "gpu", "NoExecute"))),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{"empty key Exists tolerates everything", FilterTaints, tolerating(&kplanev1.Toleration{Operator: "Exists"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("a", "1", "NoSchedule"), withTaint("b", "", "NoExecute"))), nil},
		{"first untolerated taint is named", FilterTaints, tolerating(&kplanev1.Toleration{Key: "a", Operator: "Exists"}),
			nodeInfo(testNode("n", "1", "1Gi", 1, withTaint("a", "1", "NoSchedule"), withTaint("b", "2", "NoSchedule"), withTaint("c", "3", "NoSchedule"))),
			[]string{"node(s) had untolerated taint {b: 2}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.filter(mustInfo(tt.pod), tt.node)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRunFiltersStopsAtFirstFailure(t *testing.T) {
	// Not ready, cordoned and too small: only the first reason counts, as
	// in Kubernetes, so a node is counted once in the message.
	n := nodeInfo(testNode("n", "100m", "1Mi", 1, notReady("False"), cordoned))
	if got := RunFilters(mustInfo(testPod("p", [2]string{"1", "1Gi"})), n); !slices.Equal(got, []string{ReasonNotReady}) {
		t.Fatalf("got %q", got)
	}
	if got := RunFilters(mustInfo(testPod("p")), nodeInfo(testNode("n", "1", "1Gi", 1))); got != nil {
		t.Fatalf("a fitting pod got %q", got)
	}
}

func TestFitErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  FitError
		want string
	}{
		{"kubectl example", FitError{NumNodes: 3, Reasons: map[string]int{
			ReasonInsufficientCPU: 2, "node(s) had untolerated taint {node.kubernetes.io/unreachable: }": 1}},
			"0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."},
		{"ties sorted alphabetically", FitError{NumNodes: 4, Reasons: map[string]int{
			ReasonInsufficientMem: 2, ReasonInsufficientCPU: 2, ReasonUnschedulable: 1, ReasonNotReady: 1}},
			"0/4 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 1 node(s) were not ready, 1 node(s) were unschedulable."},
		{"no nodes", FitError{}, "0/0 nodes are available: no nodes to schedule pods on."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestScheduleFitErrorCountsEveryNode(t *testing.T) {
	c := NewCache(0, nil, 1)
	c.SetNode(testNode("a", "1", "1Gi", 10))
	c.SetNode(testNode("b", "1", "4Gi", 10))
	c.SetNode(testNode("c", "8", "8Gi", 10, withTaint("node.kubernetes.io/unreachable", "", "NoExecute")))
	c.SetNode(testNode("d", "8", "8Gi", 10, cordoned))
	_, err := c.ScheduleDefault(mustInfo(testPod("big", [2]string{"2", "2Gi"})))
	fe, ok := err.(*FitError)
	if !ok {
		t.Fatalf("err = %v, want a *FitError", err)
	}
	want := "0/4 nodes are available: 2 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable."
	if fe.Error() != want {
		t.Fatalf("got  %q\nwant %q", fe.Error(), want)
	}
}
