package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestLedgerVerify(t *testing.T) {
	l := newLedger()
	l.Ack("Secret/ns/a", state{exists: true, uid: "u1", replicas: -1, data: "x"})
	l.Ack("Secret/ns/gone", absent())
	l.Ack("ReplicaSet/ns/rs", state{exists: true, uid: "r1", replicas: 3})
	l.Unknown("ReplicaSet/ns/rs", state{exists: true, uid: "r1", replicas: 5})
	l.Unknown("Secret/ns/maybe", state{exists: true, replicas: -1, data: "m"})

	ok := map[string]state{
		"Secret/ns/a":      {exists: true, uid: "u1", replicas: -1, data: "x"},
		"ReplicaSet/ns/rs": {exists: true, uid: "r1", replicas: 5}, // the unknown write landed
	}
	if v := l.Verify(ok); len(v) != 0 {
		t.Fatalf("consistent store reported %v", v)
	}
	bad := map[string]state{
		// a is lost, gone came back, rs has a value nobody wrote.
		"Secret/ns/gone":   {exists: true, uid: "u9", replicas: -1, data: "?"},
		"ReplicaSet/ns/rs": {exists: true, uid: "r1", replicas: 4},
		"Secret/ns/maybe":  {exists: true, uid: "any", replicas: -1, data: "m"},
	}
	v := l.Verify(bad)
	if len(v) != 3 {
		t.Fatalf("got %d violations, want 3: %v", len(v), v)
	}
	for i, want := range []string{"ReplicaSet/ns/rs: lost write", "Secret/ns/a: lost write", "Secret/ns/gone: deleted object present"} {
		if !strings.Contains(v[i], want) {
			t.Errorf("violation %d = %q, want it to mention %q", i, v[i], want)
		}
	}
}

func pod(name, owner, phase, node string) *kplanev1.Pod {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Uid: "uid-" + name},
		Spec:     &kplanev1.PodSpec{NodeName: node},
		Status:   &kplanev1.PodStatus{Phase: phase},
	}
	if owner != "" {
		p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: owner, Uid: owner, Controller: true}}
	}
	return p
}

func TestCheckInvariants(t *testing.T) {
	ready := &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}}
	lease := func(holder string) *kplanev1.Lease {
		return &kplanev1.Lease{Spec: &kplanev1.LeaseSpec{HolderIdentity: holder}}
	}
	rs := func(uid string, replicas, status int32) *kplanev1.ReplicaSet {
		return &kplanev1.ReplicaSet{Metadata: &kplanev1.ObjectMeta{Name: uid, Uid: uid},
			Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(replicas)}, Status: &kplanev1.ReplicaSetStatus{Replicas: status}}
	}
	live := func(_, id string) bool { return id == "alive_1" }
	good := &snapshot{
		sets:   []*kplanev1.ReplicaSet{rs("a", 2, 2), rs("b", 0, 0)},
		pods:   []*kplanev1.Pod{pod("a1", "a", "Running", "n1"), pod("a2", "a", "Running", "n1")},
		nodes:  []*kplanev1.Node{{Metadata: &kplanev1.ObjectMeta{Name: "n1"}, Status: ready}},
		leases: map[string]*kplanev1.Lease{"replicactl": lease("alive_1")},
	}
	if v := checkInvariants(good, "ns", []string{"replicactl"}, live, newLedger()); len(v) != 0 {
		t.Fatalf("healthy cluster reported %v", v)
	}

	terminating := pod("a4", "a", "Running", "n1")
	terminating.Metadata.DeletionTimestamp = timestamppb.Now()
	bad := &snapshot{
		sets: []*kplanev1.ReplicaSet{rs("a", 2, 3), rs("b", 2, 2)},
		pods: []*kplanev1.Pod{
			pod("a1", "a", "Running", "n1"), pod("a2", "a", "Running", "n1"), pod("a3", "a", "Pending", ""), // a: one too many
			pod("b1", "b", "Pending", "n1"), pod("b2", "b", "Running", "gone-node"), // b: one not running, one on a missing node
			pod("o1", "deleted-rs", "Running", "n1"), pod("o2", "", "Running", "n1"), // orphans
			terminating,
		},
		nodes:  []*kplanev1.Node{{Metadata: &kplanev1.ObjectMeta{Name: "n1"}, Status: &kplanev1.NodeStatus{}}},
		leases: map[string]*kplanev1.Lease{"replicactl": lease("dead_2"), "gcctl": lease("")},
	}
	v := strings.Join(checkInvariants(bad, "ns", []string{"replicactl", "gcctl", "nodectl"}, live, newLedger()), "\n")
	for _, want := range []string{
		"node n1 is not Ready",
		"replicaset a has 3 pods for 2 replicas (duplicates)",
		"replicaset a status.replicas is 3",
		"replicaset b has 1 of 2 replicas Running",
		"pod b2 is bound to node gone-node",
		"orphan pod o1: its owner ReplicaSet deleted-rs",
		"orphan pod o2: no controller owner",
		"pod a4 is still terminating",
		"lease kplane-system/replicactl is held by dead_2",
		"lease kplane-system/gcctl has no holder",
		"lease kplane-system/nodectl does not exist",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("violations do not mention %q:\n%s", want, v)
		}
	}
}

func TestCheckPodIPs(t *testing.T) {
	node := func(name, cidr string) *kplanev1.Node {
		return &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name}, Spec: &kplanev1.NodeSpec{PodCidr: cidr}}
	}
	withIP := func(p *kplanev1.Pod, ns, ip string) *kplanev1.Pod {
		p.Metadata.Namespace, p.Status.PodIp = ns, ip
		return p
	}
	nodes := []*kplanev1.Node{node("n1", "127.64.0.0/24"), node("n2", "127.64.1.0/24"), node("n3", "")}
	good := []*kplanev1.Pod{
		withIP(pod("a", "", "Running", "n1"), "ns", "127.64.0.1"),
		withIP(pod("b", "", "Running", "n2"), "ns", "127.64.1.1"),
		withIP(pod("old", "", "Succeeded", "n2"), "ns", "127.64.1.1"), // finished: its IP may be reused
		withIP(pod("c", "", "Pending", "n1"), "ns", ""),
	}
	if v := checkPodIPs(good, nodes); len(v) != 0 {
		t.Fatalf("valid pod IPs reported %v", v)
	}
	bad := []*kplanev1.Pod{
		withIP(pod("a", "", "Running", "n1"), "ns", "127.64.0.1"),
		withIP(pod("twin", "", "Running", "n1"), "other", "127.64.0.1"),
		withIP(pod("stray", "", "Running", "n1"), "ns", "127.64.1.9"),
		withIP(pod("nocidr", "", "Running", "n3"), "ns", "127.64.2.1"),
		withIP(pod("noip", "", "Running", "n1"), "ns", ""),
	}
	v := strings.Join(checkPodIPs(bad, nodes), "\n")
	for _, want := range []string{
		"running pods ns/a and other/twin share IP 127.64.0.1",
		"running pod ns/stray has IP 127.64.1.9, outside its node n1's podCIDR",
		"running pod ns/nocidr has IP 127.64.2.1, outside its node n3's podCIDR",
		"running pod ns/noip has no valid podIP",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("violations do not mention %q:\n%s", want, v)
		}
	}
}

func TestCheckJobs(t *testing.T) {
	job := func(name, uid, mode string, succeeded, failed int32, completed string, done bool) *kplanev1.Job {
		j := &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{Name: name, Uid: uid},
			Spec:   &kplanev1.JobSpec{Completions: proto.Int32(2), CompletionMode: mode},
			Status: &kplanev1.JobStatus{Succeeded: succeeded, Failed: failed, CompletedIndexes: completed}}
		if done {
			j.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.JobComplete, Status: kplanev1.ConditionTrue}}
		}
		return j
	}
	pod := func(uid, phase, index string, finalizer bool) *kplanev1.Pod {
		p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p-" + uid + "-" + index + phase,
			OwnerReferences: []*kplanev1.OwnerReference{{Kind: "Job", Uid: uid, Controller: true}},
			Annotations:     map[string]string{kplanev1.AnnotationJobCompletionIndex: index}},
			Status: &kplanev1.PodStatus{Phase: phase}}
		if finalizer {
			p.Metadata.Finalizers = []string{kplanev1.FinalizerJobTracking}
		}
		return p
	}
	good := []*kplanev1.Job{job("idx", "u1", "Indexed", 2, 1, "0-1", true), job("plain", "u2", "NonIndexed", 2, 0, "", true)}
	goodPods := []*kplanev1.Pod{pod("u1", "Succeeded", "0", false), pod("u1", "Succeeded", "1", false), pod("u1", "Failed", "1", false),
		pod("u2", "Succeeded", "", false), pod("u2", "Succeeded", "x", false)}
	if v := checkJobs(good, goodPods); len(v) != 0 {
		t.Fatalf("good jobs: %v", v)
	}
	bad := []*kplanev1.Job{job("idx", "u1", "Indexed", 2, 0, "0-1", true), job("plain", "u2", "NonIndexed", 3, 0, "", true), job("late", "u3", "NonIndexed", 0, 0, "", false)}
	badPods := []*kplanev1.Pod{pod("u1", "Succeeded", "0", false), pod("u1", "Succeeded", "0", true), pod("u1", "Failed", "1", false),
		pod("u2", "Succeeded", "", false), pod("u2", "Succeeded", "y", false)}
	got := strings.Join(checkJobs(bad, badPods), "\n")
	for _, want := range []string{
		"pod p-u1-0Succeeded of finished job idx keeps the job-tracking finalizer",
		"job idx: indexes [0] succeeded more than once",
		"job idx: succeeded 2, completedIndexes \"0-1\", 1 distinct indexes succeeded; want 2",
		"job idx: failed 0, but 1 pods Failed",
		"job plain: succeeded 3, 2 Succeeded pods, completions 2",
		"job late has not completed (0/2 succeeded, 0 active)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing violation %q in:\n%s", want, got)
		}
	}
}

func TestCheckEndpoints(t *testing.T) {
	sel := map[string]string{"app": "web"}
	mk := func(name, ip string, ready bool) *kplanev1.Pod {
		p := pod(name, "a", "Running", "n1")
		p.Metadata.Labels = sel
		p.Status.PodIp = ip
		st := "False"
		if ready {
			st = "True"
		}
		p.Status.Conditions = []*kplanev1.Condition{{Type: "Ready", Status: st}}
		return p
	}
	pods := []*kplanev1.Pod{mk("a", "10.0.0.1", true), mk("b", "10.0.0.2", false), mk("noip", "", true)}
	svcs := []*kplanev1.Service{
		{Metadata: &kplanev1.ObjectMeta{Name: "web"}, Spec: &kplanev1.ServiceSpec{Selector: sel}},
		{Metadata: &kplanev1.ObjectMeta{Name: "manual"}, Spec: &kplanev1.ServiceSpec{}},
	}
	addr := func(ip string) *kplanev1.EndpointAddress { return &kplanev1.EndpointAddress{Ip: ip} }
	good := map[string]*kplanev1.Endpoints{"web": {Subsets: []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{addr("10.0.0.1")}, NotReadyAddresses: []*kplanev1.EndpointAddress{addr("10.0.0.2")}}}}}
	if v := checkEndpoints(svcs, good, pods); len(v) != 0 {
		t.Errorf("matching Endpoints reported %v", v)
	}
	stale := map[string]*kplanev1.Endpoints{"web": {Subsets: []*kplanev1.EndpointSubset{
		{Addresses: []*kplanev1.EndpointAddress{addr("10.0.0.1"), addr("10.0.0.2")}}}}}
	if v := checkEndpoints(svcs, stale, pods); len(v) != 1 || !strings.Contains(v[0], "service web: Endpoints list ready [10.0.0.1 10.0.0.2]") {
		t.Errorf("a not-ready pod listed ready: got %v", v)
	}
	if v := checkEndpoints(svcs, nil, pods); len(v) != 1 || v[0] != "service web has no Endpoints" {
		t.Errorf("missing Endpoints: got %v", v)
	}
}

func TestCheckStorage(t *testing.T) {
	vol := func(name, claimUID, phase string) *kplanev1.PersistentVolume {
		v := &kplanev1.PersistentVolume{Metadata: &kplanev1.ObjectMeta{Name: name}, Spec: &kplanev1.PersistentVolumeSpec{},
			Status: &kplanev1.PersistentVolumeStatus{Phase: phase}}
		if claimUID != "" {
			v.Spec.ClaimRef = &kplanev1.ObjectReference{Name: claimUID, Uid: claimUID}
		}
		return v
	}
	claim := func(name, volume, phase string) *kplanev1.PersistentVolumeClaim {
		return &kplanev1.PersistentVolumeClaim{Metadata: &kplanev1.ObjectMeta{Name: name, Uid: name},
			Spec: &kplanev1.PersistentVolumeClaimSpec{VolumeName: volume}, Status: &kplanev1.PersistentVolumeClaimStatus{Phase: phase}}
	}
	good := checkStorage([]*kplanev1.PersistentVolume{vol("v1", "c1", "Bound")},
		[]*kplanev1.PersistentVolumeClaim{claim("c1", "v1", "Bound"), claim("c2", "", "Pending")})
	if len(good) != 0 {
		t.Fatalf("consistent binding reported %v", good)
	}
	v := strings.Join(checkStorage(
		[]*kplanev1.PersistentVolume{vol("v1", "c1", "Bound"), vol("v2", "", "Available"), vol("v3", "c4", "Bound")},
		[]*kplanev1.PersistentVolumeClaim{claim("c1", "v1", "Bound"), claim("c2", "v1", "Bound"), claim("c3", "gone", "Bound"), claim("c4", "v3", "Pending")},
	), "\n")
	for _, want := range []string{
		"volume v1 is bound to 2 claims: [c1 c2]",
		"claim c2 names volume v1, whose claimRef is",
		"claim c3 is bound to volume gone, which does not exist",
		"claim c4 (Pending) and volume v3 (Bound) are not both Bound",
		"volume v2 is not bound, with claims still pending",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("violations do not mention %q:\n%s", want, v)
		}
	}
}

// TestWorkloadPodsHaveCommands: every pod the workload makes runs on the
// compose nodes' exec runtime, which has no image entrypoint; a
// container without a command stays in CreateContainerError there and
// the run never converges (the StatefulSet and DaemonSet pods did).
func TestWorkloadPodsHaveCommands(t *testing.T) {
	w := newWorkload(nil, "chaos-1", 1, 1, 3, newLedger())
	templates := map[string]*kplanev1.PodTemplateSpec{
		"ReplicaSet":  w.replicaSet("rs", 1).GetReplicaSet().GetSpec().GetTemplate(),
		"Deployment":  w.deployment("d", 1).GetDeployment().GetSpec().GetTemplate(),
		"Job":         w.job(1).GetJob().GetSpec().GetTemplate(),
		"StatefulSet": w.setsTemplate(chaosStatefulSet, 1),
		"DaemonSet":   w.setsTemplate(chaosDaemonSet, 1),
	}
	for kind, tmpl := range templates {
		cs := tmpl.GetSpec().GetContainers()
		if len(cs) == 0 {
			t.Errorf("%s template has no containers", kind)
		}
		for _, c := range cs {
			if len(c.GetCommand()) == 0 {
				t.Errorf("%s container %s has no command: it never starts on the exec runtime", kind, c.GetName())
			}
		}
	}
}
