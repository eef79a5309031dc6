package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// logParams are the pods/log query parameters forwarded to the node
// agent, which applies or refuses each (sinceSeconds, sinceTime and
// timestamps from the per-line times its shim records).
var logParams = []string{"follow", "tailLines", "limitBytes", "sinceSeconds", "sinceTime", "timestamps", "previous"}

// logClient reaches node agents. No overall timeout: a followed log
// streams as long as the client reads.
var logClient = &http.Client{Transport: &http.Transport{
	Proxy:       nil,
	DialContext: (&net.Dialer{}).DialContext,
}}

// serveLog serves GET pods/<name>/log: the pod names its node, the Node's
// status the agent's InternalIP and port (daemonEndpoints.kubeletEndpoint,
// as kpctl logs finds it), and the agent's GET /logs/<ns>/<pod>/<container>
// streams the log, which is copied through, flushed as it arrives.
func (h *Handler) serveLog(w http.ResponseWriter, r *http.Request, req request) {
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(r))
		return
	}
	ctx := r.Context()
	got, err := h.api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: req.namespace, Name: req.name})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	pod := got.GetObject().GetPod()
	q := r.URL.Query()
	container, s := logContainer(pod, q.Get("container"))
	if s != nil {
		writeStatus(w, s)
		return
	}
	u, s := h.agentLogURL(ctx, pod, container)
	if s != nil {
		writeStatus(w, s)
		return
	}
	fwd := url.Values{}
	for _, p := range logParams {
		if v := q.Get(p); v != "" {
			fwd.Set(p, v)
		}
	}
	u.RawQuery = fwd.Encode()
	areq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "logs request: %v", err))
		return
	}
	resp, err := logClient.Do(areq)
	if err != nil {
		writeStatus(w, newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"the node agent of node %s is unreachable: %v", pod.GetSpec().GetNodeName(), err))
		return
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(b))
		switch resp.StatusCode {
		case http.StatusBadRequest:
			writeStatus(w, badRequest("%s", msg))
		case http.StatusNotFound:
			writeStatus(w, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, "%s", msg))
		default:
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "node agent of node %s: %s", pod.GetSpec().GetNodeName(), msg))
		}
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	// A follower whose first line is not due yet (sinceTime ahead of the
	// log) still gets its response at once.
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if err := copyFlushing(w, resp.Body); err != nil && ctx.Err() == nil {
		h.log.Debug("log stream ended", "pod", req.namespace+"/"+req.name, "container", container, "error", err)
	}
}

// logContainer picks the container: the one named (init containers
// included), or the pod's only one.
func logContainer(pod *kplanev1.Pod, name string) (string, *metav1.Status) {
	var names []string
	for _, c := range pod.GetSpec().GetContainers() {
		names = append(names, c.GetName())
	}
	var all []string
	all = append(all, names...)
	for _, c := range pod.GetSpec().GetInitContainers() {
		all = append(all, c.GetName())
	}
	podName := pod.GetMetadata().GetName()
	if name == "" {
		if len(names) == 1 {
			return names[0], nil
		}
		return "", badRequest("a container name must be specified for pod %s, choose one of: %v", podName, names)
	}
	for _, n := range all {
		if n == name {
			return name, nil
		}
	}
	return "", badRequest("container %s is not valid for pod %s", name, podName)
}

// agentLogURL is the node agent's log URL of a container.
func (h *Handler) agentLogURL(ctx context.Context, pod *kplanev1.Pod, container string) (*url.URL, *metav1.Status) {
	nodeName := pod.GetSpec().GetNodeName()
	podName := pod.GetMetadata().GetName()
	if nodeName == "" {
		return nil, badRequest("pod %s does not have a host assigned", podName)
	}
	node, err := h.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: nodeName})
	if err != nil {
		return nil, newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "node %s of pod %s: %v", nodeName, podName, err)
	}
	st := node.GetObject().GetNode().GetStatus()
	host := ""
	for _, a := range st.GetAddresses() {
		if a.GetType() == "InternalIP" {
			host = a.GetAddress()
			break
		}
	}
	port := st.GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
	if host == "" || port == 0 {
		return nil, newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"node %s does not publish an InternalIP and a node agent port", nodeName)
	}
	ns := pod.GetMetadata().GetNamespace()
	return &url.URL{
		Scheme: "http",
		Host:   net.JoinHostPort(host, strconv.Itoa(int(port))),
		Path:   "/logs/" + url.PathEscape(ns) + "/" + url.PathEscape(podName) + "/" + url.PathEscape(container),
	}, nil
}

// copyFlushing copies src to w, flushing after every read so that a
// follower sees each line as the agent sends it.
func copyFlushing(w http.ResponseWriter, src io.Reader) error {
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write the log: %w", werr)
			}
			if f != nil {
				f.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
	}
}
