package integration_test

import (
	"net"
	"net/http"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestPodExecAndPortForwardRoutes: pods/exec and pods/portforward find
// the pod's node and relay the request (query and upgrade included) to
// the node agent's kubelet endpoint; what cannot be relayed is a Status.
func TestPodExecAndPortForwardRoutes(t *testing.T) {
	srv, c := start(t)
	agent := startBackend(t, "agent", "127.0.0.1")
	base := "http://" + srv.Addr() + "/api/v1/namespaces/default/pods"

	code, _, body := httpDo(t, http.MethodPost, base+"/ghost/exec?command=ls&stdout=true", "")
	requireStatus(t, code, body, http.StatusNotFound, "NotFound", `pods "ghost" not found`)

	create(t, c, newPod("default", "pending", nil))
	code, _, body = httpDo(t, http.MethodPost, base+"/pending/exec?command=ls&stdout=true", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", "pod pending is not scheduled to a node yet")

	two := newBoundPod("default", "two", "n1")
	two.GetPod().Spec.Containers = append(two.GetPod().Spec.Containers, &kplanev1.Container{Name: "side", Image: "busybox"})
	create(t, c, two)
	code, _, body = httpDo(t, http.MethodPost, base+"/two/exec?command=ls&stdout=true", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", "a container name must be specified for pod two, choose one of: [app side]")
	code, _, body = httpDo(t, http.MethodPost, base+"/two/exec?command=ls&stdout=true&container=nope", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", "container nope is not valid for pod two")
	code, _, body = httpDo(t, http.MethodPost, base+"/two/exec?stdout=true&container=app", "")
	requireStatus(t, code, body, http.StatusBadRequest, "BadRequest", "command: Required value")

	// The node is not registered yet, then registered without its agent's
	// endpoint, then with it.
	code, _, body = httpDo(t, http.MethodPost, base+"/two/exec?command=ls&stdout=true&container=side", "")
	requireStatus(t, code, body, http.StatusNotFound, "NotFound", `nodes "n1" not found`)
	node := create(t, c, kplanev1.MustWrap(&kplanev1.Node{Metadata: meta("", "n1", nil)}))
	code, _, body = httpDo(t, http.MethodGet, base+"/two/portforward", "")
	requireStatus(t, code, body, http.StatusServiceUnavailable, "ServiceUnavailable", "node n1 publishes no InternalIP address and kubelet endpoint port")
	node.GetNode().Status = &kplanev1.NodeStatus{
		Addresses:       []*kplanev1.NodeAddress{{Type: "Hostname", Address: "n1"}, {Type: "InternalIP", Address: "127.0.0.1"}},
		DaemonEndpoints: &kplanev1.NodeDaemonEndpoints{KubeletEndpoint: &kplanev1.DaemonEndpoint{Port: agent.port()}},
	}
	updateStatus(t, c, node)

	code, _, body = httpDo(t, http.MethodPost, base+"/two/exec?command=sh&command=-c&command=echo+hi&stdout=true&container=side", "")
	if want := "agent POST /exec/default/two/side?command=sh&command=-c&command=echo+hi&stdout=true&container=side "; code != http.StatusOK || body != want {
		t.Fatalf("exec relayed: %d %q, want %q", code, body, want)
	}
	code, _, body = httpDo(t, http.MethodGet, base+"/two/portforward", "")
	if want := "agent GET /portForward/default/two? "; code != http.StatusOK || body != want {
		t.Fatalf("portforward relayed: %d %q, want %q", code, body, want)
	}

	// The agent is gone: 503 naming the node and its address.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	closed := lis.Addr().(*net.TCPAddr)
	_ = lis.Close()
	n := get(t, c, "Node", "", "n1")
	n.GetNode().Status.DaemonEndpoints.KubeletEndpoint.Port = int32(closed.Port)
	updateStatus(t, c, n)
	code, _, body = httpDo(t, http.MethodGet, base+"/two/portforward", "")
	requireStatus(t, code, body, http.StatusServiceUnavailable, "ServiceUnavailable", "error dialing node n1 agent at "+closed.String())
}
