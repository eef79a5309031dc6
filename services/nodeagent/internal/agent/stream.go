package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/klog/v2"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The streaming endpoints sit on the kubelet port (--logs-addr), beside
// the logs, with the kubelet's paths; the apiserver proxies the pods/exec
// and pods/portforward subresources here with the client's upgrade
// request untouched:
//
//	GET|POST /exec/<namespace>/<pod>/<container>?command=..&stdin=..&stdout=..&stderr=..&tty=..
//	GET|POST /portForward/<namespace>/<pod>
//
// With tty=true the command runs on a new pseudo-terminal (its
// controlling terminal; stdout carries everything it prints) sized by
// the resize channel.
//
// exec speaks the websocket channel protocols v5.channel.k8s.io and
// v4.channel.k8s.io (what kubectl 1.30+ and client-go's websocket executor
// send); port-forward speaks SPDY/3.1+portforward.k8s.io, portforward.k8s.io
// tunnelled through a websocket (what kubectl 1.31+ sends).

// execWaitDelay bounds how long an exec waits for its output pipes once
// the command exited (a background child may hold them open).
const execWaitDelay = 2 * time.Second

// registerStreams adds the exec and port-forward routes to mux.
func (a *Agent) registerStreams(mux *http.ServeMux) {
	// The Kubernetes libraries behind the streams log through klog (e.g.
	// every websocket the agent closes after the exit status is a "receive
	// error"): into the agent's log at debug level, not raw to stderr.
	klog.LogToStderr(false)
	klog.SetOutput(a.log.Named("k8s").StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}))
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", a.serveExec)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}", a.servePortForward)
	}
}

// streamPod finds a pod of this node that the exec runtime runs.
func (a *Agent) streamPod(ns, name string) (*kplanev1.Pod, int, error) {
	o, ok := a.pods.Store().GetByName(ns, name)
	if !ok || !a.nodes[o.GetPod().GetSpec().GetNodeName()] {
		return nil, http.StatusNotFound, fmt.Errorf("pod %s/%s is not on this node", ns, name)
	}
	if a.exec == nil {
		return nil, http.StatusBadRequest, fmt.Errorf("pod %s/%s runs on the fake runtime, which runs no processes", ns, name)
	}
	return o.GetPod(), 0, nil
}

// execOptions are the query parameters of an exec request.
type execOptions struct {
	command                    []string
	stdin, stdout, stderr, tty bool
}

func parseExecOptions(r *http.Request) (execOptions, error) {
	q := r.URL.Query()
	o := execOptions{command: q["command"]}
	if len(o.command) == 0 {
		return o, errors.New("command: Required value: at least one command argument is needed")
	}
	for _, f := range []struct {
		name string
		v    *bool
	}{{"stdin", &o.stdin}, {"stdout", &o.stdout}, {"stderr", &o.stderr}, {"tty", &o.tty}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		v, err := strconv.ParseBool(s)
		if err != nil {
			return o, fmt.Errorf("%s: Invalid value: %q: must be true or false", f.name, s)
		}
		*f.v = v
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, errors.New("you must specify at least 1 of stdin, stdout, stderr")
	}
	return o, nil
}

// execChannels are the channel types of the exec protocols, in channel
// order: stdin, stdout, stderr, error, resize.
func execChannels(o execOptions) []wsstream.ChannelType {
	ch := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	return []wsstream.ChannelType{
		ch(o.stdin, wsstream.ReadChannel),
		ch(o.stdout, wsstream.WriteChannel),
		ch(o.stderr && !o.tty, wsstream.WriteChannel), // a terminal has one output
		wsstream.WriteChannel,
		ch(o.tty, wsstream.ReadChannel),
	}
}

func (a *Agent) serveExec(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	pod, code, err := a.streamPod(ns, name)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	var spec *kplanev1.Container
	for _, c := range append(append([]*kplanev1.Container{}, pod.GetSpec().GetInitContainers()...), pod.GetSpec().GetContainers()...) {
		if c.GetName() == container {
			spec = c
		}
	}
	if spec == nil {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", container, name), http.StatusNotFound)
		return
	}
	if !a.rt.State(pod.GetMetadata().GetUid(), container, time.Now()).Running {
		http.Error(w, fmt.Sprintf("container %s of pod %s is not running", container, name), http.StatusBadRequest)
		return
	}
	opts, err := parseExecOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !wsstream.IsWebSocketRequest(r) {
		http.Error(w, "exec needs a websocket upgrade with subprotocol "+rcconst.StreamProtocolV5Name+" or "+rcconst.StreamProtocolV4Name, http.StatusBadRequest)
		return
	}
	// The command gets the environment the container's current run got:
	// resolved again here (the reconcile's copy belongs to the reconcile).
	ip := pod.GetStatus().GetPodIp()
	res := &envResolver{api: a.api, pod: pod, podIP: ip, hostIP: a.hostIP, node: a.nodeRes}
	resolved, err := res.resolve(r.Context(), spec)
	if err != nil {
		http.Error(w, fmt.Sprintf("container %s: %v", container, err), http.StatusInternalServerError)
		return
	}
	dir := a.exec.containerDir(pod.GetMetadata().GetUid(), container)
	log := a.log.With("pod", ns+"/"+name, "container", container, "command", strings.Join(opts.command, " "))
	serveExecStreams(w, r, opts, dir, containerEnv(pod, resolved, ip, dir), log)
}

// serveExecStreams upgrades the request to the exec protocols, runs the
// command and sends how it ended on the error channel.
func serveExecStreams(w http.ResponseWriter, r *http.Request, opts execOptions, dir string, env []string, log hclog.Logger) {
	channels := execChannels(opts)
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		rcconst.StreamProtocolV5Name: {Binary: true, Channels: channels},
		rcconst.StreamProtocolV4Name: {Binary: true, Channels: channels},
	})
	_, streams, err := conn.Open(w, r)
	if err != nil {
		log.Warn("exec upgrade failed", "error", err)
		return
	}
	defer func() { _ = conn.Close() }()
	exit := runStreamed(r.Context(), opts, dir, env, streams)
	log.Info("exec finished", "result", exit.Message)
	if err := json.NewEncoder(streams[3]).Encode(exit); err != nil {
		log.Debug("could not send the exec result", "error", err)
	}
}

// runStreamed runs the command in dir with env, its standard streams on
// the channels, and says how it ended as the exec protocols' error
// channel does: Success, or Failure with reason NonZeroExitCode and the
// code as an ExitCode cause (what clients turn into their exit code).
func runStreamed(ctx context.Context, o execOptions, dir string, env []string, streams []io.ReadWriteCloser) *metav1.Status {
	cmd := exec.CommandContext(ctx, o.command[0], o.command[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = execWaitDelay
	if o.tty {
		var in io.Reader
		if o.stdin {
			in = streams[0]
		}
		wait, err := startTTY(ctx, cmd, in, streams[1], streams[4])
		if err != nil {
			return failure(fmt.Sprintf("failed to start command %q on a terminal: %v", strings.Join(o.command, " "), err))
		}
		return exitStatus(o, wait())
	}
	if o.stdout {
		cmd.Stdout = streams[1]
	}
	if o.stderr {
		cmd.Stderr = streams[2]
	}
	var stdin io.WriteCloser
	if o.stdin {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return failure(fmt.Sprintf("stdin: %v", err))
		}
	}
	if err := cmd.Start(); err != nil {
		return failure(fmt.Sprintf("failed to start command %q: %v", strings.Join(o.command, " "), err))
	}
	if stdin != nil {
		// Until the client closes stdin (v5 close signal) or goes away;
		// Wait does not wait for this copy.
		go func() {
			_, _ = io.Copy(stdin, streams[0])
			_ = stdin.Close()
		}()
	}
	return exitStatus(o, cmd.Wait())
}

// exitStatus is the error channel's message for how the command ended.
func exitStatus(o execOptions, err error) *metav1.Status {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return &metav1.Status{Status: metav1.StatusSuccess}
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return &metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  "NonZeroExitCode",
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type: "ExitCode", Message: strconv.Itoa(ee.ExitCode()),
			}}},
		}
	default:
		return failure(fmt.Sprintf("command %q: %v", strings.Join(o.command, " "), err))
	}
}

func failure(msg string) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: msg}
}

// tunnelProtocol is the websocket subprotocol of port-forward over a
// websocket: SPDY frames of the portforward.k8s.io protocol inside binary
// messages.
const tunnelProtocol = pfconst.WebsocketsSPDYTunnelingPrefix + pfconst.PortForwardV1Name

func (a *Agent) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pod, code, err := a.streamPod(ns, name)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	ip := pod.GetStatus().GetPodIp()
	if ip == "" {
		http.Error(w, fmt.Sprintf("pod %s/%s has no IP yet", ns, name), http.StatusBadRequest)
		return
	}
	forwardTo(w, r, ip, a.log.With("pod", ns+"/"+name))
}

// forwardTo upgrades the request to tunnelled SPDY port-forward and
// forwards its connections to ip.
func forwardTo(w http.ResponseWriter, r *http.Request, ip string, log hclog.Logger) {
	if !wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		http.Error(w, "port-forward needs a websocket upgrade with subprotocol "+tunnelProtocol, http.StatusBadRequest)
		return
	}
	up := gwebsocket.Upgrader{
		Subprotocols: []string{tunnelProtocol},
		// Clients are programs, not browsers; the apiserver in front decides
		// who may connect.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		log.Warn("port-forward upgrade failed", "error", err)
		return
	}
	pf := &portForwarder{ip: ip, log: log, pairs: map[string]*streamPair{}, all: map[httpstream.Stream]bool{}, ready: make(chan struct{})}
	conn, err := spdy.NewServerConnection(quietClose{portforward.NewTunnelingConnection("server", ws)}, pf.newStream)
	if err != nil {
		log.Warn("port-forward connection failed", "error", err)
		_ = ws.Close()
		return
	}
	pf.conn = conn
	close(pf.ready)
	log.Info("port-forward started")
	select {
	case <-conn.CloseChan():
	case <-r.Context().Done():
	}
	// Streams still open keep spdystream's shutdown waiting forever: reset
	// them (the client is gone or asked to stop).
	pf.resetAll()
	_ = conn.Close()
	pf.wg.Wait()
	log.Info("port-forward ended")
}

// quietClose drops the error of closing a tunnel whose peer already
// left: spdystream otherwise holds a goroutine for a second per
// connection, waiting for someone to collect that error.
type quietClose struct{ net.Conn }

func (q quietClose) Close() error {
	_ = q.Conn.Close()
	return nil
}

// portForwarder serves one port-forward connection: the client opens an
// error stream and a data stream per forwarded connection, paired by
// their requestID header; each pair is one TCP connection to the pod.
type portForwarder struct {
	ip   string
	log  interface{ Debug(string, ...any) }
	conn httpstream.Connection
	// ready is closed once conn is set: streams may arrive before
	// NewServerConnection returned.
	ready chan struct{}

	mu    sync.Mutex
	pairs map[string]*streamPair
	all   map[httpstream.Stream]bool // streams of unfinished connections, reset at the end
	wg    sync.WaitGroup
}

// resetAll resets every stream of the connection.
func (pf *portForwarder) resetAll() {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	for s := range pf.all {
		_ = s.Reset()
	}
	clear(pf.all)
}

type streamPair struct {
	data, errs httpstream.Stream
}

func (pf *portForwarder) newStream(s httpstream.Stream, replySent <-chan struct{}) error {
	h := s.Headers()
	id := h.Get(corev1.PortForwardRequestIDHeader)
	if id == "" {
		return fmt.Errorf("stream has no %s header", corev1.PortForwardRequestIDHeader)
	}
	pf.mu.Lock()
	pf.all[s] = true
	p := pf.pairs[id]
	if p == nil {
		p = &streamPair{}
		pf.pairs[id] = p
	}
	switch h.Get(corev1.StreamType) {
	case corev1.StreamTypeError:
		p.errs = s
	case corev1.StreamTypeData:
		p.data = s
	default:
		pf.mu.Unlock()
		return fmt.Errorf("stream type %q: want %s or %s", h.Get(corev1.StreamType), corev1.StreamTypeError, corev1.StreamTypeData)
	}
	complete := p.errs != nil && p.data != nil
	if complete {
		delete(pf.pairs, id)
	}
	pf.mu.Unlock()
	if complete {
		pf.wg.Add(1)
		go func() {
			defer pf.wg.Done()
			<-replySent
			<-pf.ready
			pf.forward(p)
		}()
	}
	return nil
}

// forward copies one connection between the data stream and the pod's
// port; a failure is written to the error stream, which the client shows.
func (pf *portForwarder) forward(p *streamPair) {
	defer func() {
		// Done with: a long forward does not keep every connection's streams.
		pf.mu.Lock()
		delete(pf.all, p.data)
		delete(pf.all, p.errs)
		pf.mu.Unlock()
	}()
	defer pf.conn.RemoveStreams(p.data, p.errs)
	defer func() { _ = p.errs.Close() }()
	defer func() { _ = p.data.Close() }()
	portStr := p.data.Headers().Get(corev1.PortHeader)
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		_, _ = fmt.Fprintf(p.errs, "invalid port %q: must be 1-65535", portStr)
		return
	}
	addr := net.JoinHostPort(pf.ip, portStr)
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		_, _ = fmt.Fprintf(p.errs, "error forwarding port %d to pod at %s: %v", port, addr, err)
		return
	}
	defer func() { _ = c.Close() }()
	go func() {
		// Ends when the client closes its side or the connection goes.
		_, _ = io.Copy(c, p.data)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // the client is done sending
		}
	}()
	if _, err := io.Copy(p.data, c); err != nil {
		pf.log.Debug("port-forward copy ended", "addr", addr, "error", err)
	}
	// The pod closed its side: the deferred closes tell the client.
}
