package rest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The pods/exec and pods/portforward subresources: the apiserver finds
// the pod's node and hands the client's upgrade request, untouched, to
// that node agent's streaming endpoint (the kubelet's paths on the port
// the Node publishes as daemonEndpoints.kubeletEndpoint), then relays the
// upgraded connection both ways. The agent speaks the protocols kubectl
// sends (v5.channel.k8s.io for exec, SPDY/3.1+portforward.k8s.io for
// port-forward), so nothing is translated here.

// RegisterStreams adds the exec and portforward routes to mux; they are
// more specific than Register's /api/ and win over it.
func (h *Handler) RegisterStreams(mux *http.ServeMux) {
	s := &streams{h: h, transport: &http.Transport{
		Proxy:       nil, // node agents are cluster addresses, reached directly
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}}
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(m+" /api/v1/namespaces/{namespace}/pods/{name}/exec", s.serveExec)
		mux.HandleFunc(m+" /api/v1/namespaces/{namespace}/pods/{name}/portforward", s.servePortForward)
	}
}

type streams struct {
	h         *Handler
	transport http.RoundTripper
}

func (s *streams) serveExec(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	// Both the websocket GET and the SPDY POST run commands in (or reach
	// into) the pod, so both need create, as in Kubernetes.
	if err := s.h.authorizeSub(r.Context(), "create", "Pod", "exec", ns, name); err != nil {
		writeStatus(w, statusFor(err, request{}))
		return
	}
	q := r.URL.Query()
	if len(q["command"]) == 0 {
		writeStatus(w, badRequest("command: Required value: at least one command argument is needed"))
		return
	}
	pod, st := s.pod(r.Context(), ns, name)
	if st != nil {
		writeStatus(w, st)
		return
	}
	container := q.Get("container")
	if container == "" {
		cs := pod.GetSpec().GetContainers()
		if len(cs) != 1 {
			names := make([]string, len(cs))
			for i, c := range cs {
				names[i] = c.GetName()
			}
			writeStatus(w, badRequest("a container name must be specified for pod %s, choose one of: [%s]", name, strings.Join(names, " ")))
			return
		}
		container = cs[0].GetName()
	}
	if !hasContainer(pod, container) {
		writeStatus(w, badRequest("container %s is not valid for pod %s", container, name))
		return
	}
	s.forward(w, r, pod, "/exec/"+url.PathEscape(ns)+"/"+url.PathEscape(name)+"/"+url.PathEscape(container))
}

func (s *streams) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	// Both the websocket GET and the SPDY POST run commands in (or reach
	// into) the pod, so both need create, as in Kubernetes.
	if err := s.h.authorizeSub(r.Context(), "create", "Pod", "portforward", ns, name); err != nil {
		writeStatus(w, statusFor(err, request{}))
		return
	}
	pod, st := s.pod(r.Context(), ns, name)
	if st != nil {
		writeStatus(w, st)
		return
	}
	s.forward(w, r, pod, "/portForward/"+url.PathEscape(ns)+"/"+url.PathEscape(name))
}

func hasContainer(pod *kplanev1.Pod, name string) bool {
	for _, c := range append(append([]*kplanev1.Container{}, pod.GetSpec().GetInitContainers()...), pod.GetSpec().GetContainers()...) {
		if c.GetName() == name {
			return true
		}
	}
	return false
}

// pod reads the pod; a Status says why the request cannot go on.
func (s *streams) pod(ctx context.Context, ns, name string) (*kplanev1.Pod, *metav1.Status) {
	pods := s.h.byGV["v1"]["pods"]
	resp, err := s.h.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: ns, Name: name})
	if err != nil {
		return nil, statusFor(err, request{res: pods, namespace: ns, name: name})
	}
	pod := resp.GetObject().GetPod()
	if pod.GetSpec().GetNodeName() == "" {
		return nil, badRequest("pod %s is not scheduled to a node yet", name)
	}
	switch pod.GetStatus().GetPhase() {
	case "Succeeded", "Failed":
		return nil, badRequest("cannot exec into or forward to a container in a completed pod; current phase is %s", pod.GetStatus().GetPhase())
	}
	return pod, nil
}

// agentAddr is host:port of the node agent's streaming endpoint, from the
// Node's InternalIP and kubelet endpoint port.
func (s *streams) agentAddr(ctx context.Context, node string) (string, *metav1.Status) {
	resp, err := s.h.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: node})
	if err != nil {
		return "", statusFor(err, request{res: s.h.byGV["v1"]["nodes"], name: node})
	}
	n := resp.GetObject().GetNode()
	port := n.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
	var ip string
	for _, a := range n.GetStatus().GetAddresses() {
		if a.GetType() == "InternalIP" && ip == "" {
			ip = a.GetAddress()
		}
	}
	if ip == "" || port == 0 {
		return "", newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"node %s publishes no InternalIP address and kubelet endpoint port: its agent has not registered", node)
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(port))), nil
}

// forward relays the request to path on the pod's node agent, keeping
// the query and the upgrade headers.
func (s *streams) forward(w http.ResponseWriter, r *http.Request, pod *kplanev1.Pod, path string) {
	node := pod.GetSpec().GetNodeName()
	addr, st := s.agentAddr(r.Context(), node)
	if st != nil {
		writeStatus(w, st)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", addr
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = addr
			pr.SetXForwarded()
		},
		Transport:     s.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			s.h.log.Warn("node agent unreachable", "node", node, "addr", addr, "error", err)
			writeStatus(w, newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				"error dialing node %s agent at %s: %v", node, addr, err))
		},
	}
	rp.ServeHTTP(w, r)
}
