package agent

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

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
