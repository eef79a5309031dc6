package agent

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A fake container that starts at once takes its pod from bound to
// Running in one status write, as the kubelet writes a pod's status when
// it changed and it changed once; no second write follows.
func TestFakePodRunningInOneStatusWrite(t *testing.T) {
	e := newEnv(t)
	if _, err := client.For[*kplanev1.Node](e.api).Create(e.ctx, &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "once-0"},
		Spec: &kplanev1.NodeSpec{PodCidr: "10.77.0.0/24"}}); err != nil {
		t.Fatal(err)
	}
	w, err := client.For[*kplanev1.Pod](e.api).Watch(e.ctx, "default", client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	agent := e.startAgent("--runtime", "fake", "--fake-nodes", "1", "--node-name", "once")
	created := e.createPod("p", "once-0", nil)
	e.waitCreated(created, "Running", phase(kplanev1.PodRunning))
	// Whatever the agent writes, it has written once it has stopped.
	if err := agent.stop(); err != nil {
		t.Fatal(err)
	}
	final, err := client.For[*kplanev1.Pod](e.api).Get(e.ctx, "default", "p")
	if err != nil {
		t.Fatal(err)
	}
	var writes []string
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == kplanev1.EventType_EVENT_TYPE_MODIFIED {
			writes = append(writes, protojson.Format(ev.Object.GetStatus()))
		}
		if ev.Object.GetMetadata().GetResourceVersion() == final.GetMetadata().GetResourceVersion() {
			break
		}
	}
	if len(writes) != 1 {
		t.Errorf("%d status writes, want 1:\n%v", len(writes), writes)
	}
}

// The pod cache keeps what the agent reads: a pod of another node is
// reduced to its identity and node; a pod of ours loses only the fields
// the scheduler and the controllers read.
func TestTrimPod(t *testing.T) {
	a := &Agent{nodes: map[string]bool{"mine": true}}
	full := func(node string) *kplanev1.Object {
		o, err := kplanev1.Wrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "ns", Uid: "u", ResourceVersion: "9", GenerateName: "p-",
				Labels: map[string]string{"app": "x"}, Annotations: map[string]string{AnnotationFakeStartDelay: "1s"},
				OwnerReferences: []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Uid: "o"}}},
			Spec: &kplanev1.PodSpec{NodeName: node, Priority: 7, SchedulerName: "default-scheduler",
				Tolerations:  []*kplanev1.Toleration{{Key: "k", Operator: "Exists"}},
				NodeSelector: map[string]string{"zone": "a"},
				Containers:   []*kplanev1.Container{{Name: "c", Image: "i"}}},
			Status: &kplanev1.PodStatus{Phase: kplanev1.PodRunning, PodIp: "10.0.0.1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	other := a.trimPod(full("elsewhere")).GetPod()
	if md := other.GetMetadata(); md.GetName() != "p" || md.GetNamespace() != "ns" || md.GetUid() != "u" || md.GetResourceVersion() != "9" ||
		other.GetSpec().GetNodeName() != "elsewhere" || len(md.GetLabels()) > 0 || len(other.GetSpec().GetContainers()) > 0 || other.GetStatus() != nil {
		t.Errorf("another node's pod trimmed to %v; want only name, namespace, uid, resourceVersion and node", other)
	}
	mine := a.trimPod(full("mine")).GetPod()
	md, s := mine.GetMetadata(), mine.GetSpec()
	if len(md.GetOwnerReferences()) > 0 || md.GetGenerateName() != "" || len(s.GetTolerations()) > 0 || len(s.GetNodeSelector()) > 0 || s.GetSchedulerName() != "" {
		t.Errorf("own pod kept scheduling-only fields: %v", mine)
	}
	if md.GetLabels()["app"] != "x" || md.GetAnnotations()[AnnotationFakeStartDelay] != "1s" || s.GetPriority() != 7 ||
		len(s.GetContainers()) != 1 || mine.GetStatus().GetPodIp() != "10.0.0.1" || md.GetResourceVersion() != "9" {
		t.Errorf("own pod lost fields the agent reads: %v", mine)
	}
}

// internPod changes no value of a pod, and two pods of one set share
// their labels map after it.
func TestInternPodKeepsValues(t *testing.T) {
	mk := func(name string) *kplanev1.Pod {
		return &kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"a": "b"}},
			Spec: &kplanev1.PodSpec{NodeName: "n-1", RestartPolicy: "Always", ServiceAccountName: "default",
				InitContainers: []*kplanev1.Container{{Name: "init", Image: "busybox"}},
				Containers:     []*kplanev1.Container{{Name: "app", Image: "nginx:1.25", ImagePullPolicy: "IfNotPresent"}}},
			Status: &kplanev1.PodStatus{Phase: "Running", HostIp: "10.1.0.1", QosClass: "BestEffort",
				Conditions:        []*kplanev1.Condition{{Type: "Ready", Status: "True", Reason: "r"}},
				ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "app", Image: "nginx:1.25", ImageId: "fake://nginx"}}},
		}
	}
	a, b := mk("a"), mk("b")
	want := proto.Clone(a)
	internPod(a)
	internPod(b)
	if !proto.Equal(a, want) {
		t.Fatalf("internPod changed the pod:\n%v\nwant\n%v", a, want)
	}
	if reflect.ValueOf(a.Metadata.Labels).UnsafePointer() != reflect.ValueOf(b.Metadata.Labels).UnsafePointer() {
		t.Error("two pods with equal labels do not share one map")
	}
}
