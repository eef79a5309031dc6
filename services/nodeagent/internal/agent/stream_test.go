package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// agentPort is the kubelet endpoint port node-a publishes.
func (e *env) agentPort() int32 {
	e.t.Helper()
	var port int32
	waitFor(e.t, e.ctx, "node-a publishes its kubelet endpoint", func() bool {
		n, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "node-a")
		port = n.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
		return err == nil && port != 0
	})
	return port
}

// execIn runs command in the pod's main container through the agent's
// exec endpoint with client-go's websocket executor (v5.channel.k8s.io).
func execIn(ctx context.Context, port int32, pod, stdin string, q url.Values) (string, string, error) {
	if stdin != "" {
		q.Set("stdin", "true")
	}
	q.Set("stdout", "true")
	q.Set("stderr", "true")
	u := fmt.Sprintf("http://127.0.0.1:%d/exec/default/%s/main?%s", port, pod, q.Encode())
	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: fmt.Sprintf("http://127.0.0.1:%d", port)}, "GET", u)
	if err != nil {
		return "", "", err
	}
	var out, errb bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &out, Stderr: &errb}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	err = ex.StreamWithContext(ctx, opts)
	return out.String(), errb.String(), err
}

// oneSize sends one terminal size, then ends the resize stream.
type oneSize struct{ size *remotecommand.TerminalSize }

func (q *oneSize) Next() *remotecommand.TerminalSize {
	s := q.size
	q.size = nil
	return s
}

func TestExecEndpoint(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("web", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].Env = []*kplanev1.EnvVar{{Name: "COLOR", Value: "blue"}}
	}, "sh", "-c", "exec sleep 300")
	e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	port := e.agentPort()

	out, errs, err := execIn(e.ctx, port, "web", "", url.Values{"command": {"sh", "-c", `echo "$COLOR $KPLANE_POD_NAME"; pwd; echo warn >&2`}})
	if err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, errs)
	}
	if want := "blue web\n" + filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), "main") + "\n"; out != want {
		t.Errorf("stdout %q, want %q (the container's env and directory)", out, want)
	}
	if errs != "warn\n" {
		t.Errorf("stderr %q", errs)
	}

	out, _, err = execIn(e.ctx, port, "web", "", url.Values{"command": {"sh", "-c", "echo before; exit 5"}})
	var ce utilexec.CodeExitError
	if !errors.As(err, &ce) || ce.ExitStatus() != 5 || out != "before\n" {
		t.Errorf("exit 5: err %v, stdout %q", err, out)
	}

	out, _, err = execIn(e.ctx, port, "web", "a\nb\n", url.Values{"command": {"sh", "-c", "wc -l; echo closed"}})
	if err != nil || strings.TrimSpace(strings.Split(out, "\n")[0]) != "2" || !strings.HasSuffix(out, "closed\n") {
		t.Errorf("stdin: err %v, stdout %q (want 2 lines counted, then the command goes on after stdin closed)", err, out)
	}

	_, _, err = execIn(e.ctx, port, "web", "", url.Values{"command": {"/no/such/binary"}})
	if err == nil || !strings.Contains(err.Error(), "/no/such/binary") {
		t.Errorf("missing binary: %v", err)
	}

	// A terminal: the command has one on stdin and stdout, sized by the
	// resize channel (the size may arrive after the command started: it
	// polls for it, bounded).
	u := fmt.Sprintf("http://127.0.0.1:%d/exec/default/web/main?%s", port, url.Values{
		"command": {"sh", "-c", `test -t 0 && test -t 1 && echo tty; for i in $(seq 100); do s=$(stty size); [ "$s" = "40 100" ] && break; sleep 0.05; done; echo "$s"`},
		"stdout":  {"true"}, "tty": {"true"},
	}.Encode())
	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: fmt.Sprintf("http://127.0.0.1:%d", port)}, "GET", u)
	if err != nil {
		t.Fatal(err)
	}
	var tout bytes.Buffer
	err = ex.StreamWithContext(e.ctx, remotecommand.StreamOptions{Stdout: &tout, Tty: true, TerminalSizeQueue: &oneSize{size: &remotecommand.TerminalSize{Width: 100, Height: 40}}})
	if err != nil || tout.String() != "tty\r\n40 100\r\n" {
		t.Errorf("tty: err %v, output %q, want %q", err, tout.String(), "tty\r\n40 100\r\n")
	}

	// Failures before the upgrade are plain HTTP answers naming the cause.
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/exec/default/web/main?stdout=true", "command: Required value", http.StatusBadRequest},
		{"/exec/default/web/main?command=true&stdout=maybe", `stdout: Invalid value: "maybe"`, http.StatusBadRequest},
		{"/exec/default/web/main?command=true", "at least 1 of stdin, stdout, stderr", http.StatusBadRequest},
		{"/exec/default/web/main?command=true&stdout=true", "websocket upgrade", http.StatusBadRequest},
		{"/exec/default/web/other?command=true&stdout=true", "container other is not valid", http.StatusNotFound},
		{"/exec/default/nope/main?command=true&stdout=true", "not on this node", http.StatusNotFound},
		{"/portForward/default/web", "websocket upgrade with subprotocol SPDY/3.1+portforward.k8s.io", http.StatusBadRequest},
	} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, tc.path)) //nolint:noctx // test
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET %s: %d %q, want %d containing %q", tc.path, resp.StatusCode, b, tc.code, tc.want)
		}
	}
}

func TestPortForwardEndpoint(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("fw", "node-a", nil, "sh", "-c", "exec sleep 300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	port := e.agentPort()

	// A server on the pod's IP (loopback range): what the pod would serve.
	lis, err := net.Listen("tcp", net.JoinHostPort(p.GetStatus().GetPodIp(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				b, _ := io.ReadAll(io.LimitReader(c, 5))
				_, _ = c.Write(append([]byte("echo:"), b...))
			}()
		}
	}()
	remote := lis.Addr().(*net.TCPAddr).Port
	// A closed port on the pod IP: its listener is gone.
	gone, err := net.Listen("tcp", net.JoinHostPort(p.GetStatus().GetPodIp(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	closed := gone.Addr().(*net.TCPAddr).Port
	_ = gone.Close()

	u, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d/portForward/default/fw", port))
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, &rest.Config{Host: u.Scheme + "://" + u.Host})
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remote), fmt.Sprintf("0:%d", closed)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer close(stop)
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward ended before ready: %v", err)
	case <-e.ctx.Done():
		t.Fatal("port-forward not ready")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // each connection is a new stream pair
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "ping%d", i)
		b, err := io.ReadAll(c)
		_ = c.Close()
		if want := fmt.Sprintf("echo:ping%d", i); err != nil || string(b) != want {
			t.Fatalf("connection %d: %q, %v; want %q", i, b, err, want)
		}
	}
	// The closed port: the agent reports the refused dial on the error
	// stream; the connection ends without data and client-go (as kubectl
	// port-forward 1.32) then ends the whole forward.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[1].Local))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	_ = c.Close()
	if len(b) != 0 {
		t.Errorf("closed port answered %q", b)
	}
	select {
	case err := <-done:
		if !errors.Is(err, portforward.ErrLostConnectionToPod) {
			t.Errorf("ForwardPorts after a refused dial: %v, want %v", err, portforward.ErrLostConnectionToPod)
		}
	case <-e.ctx.Done():
		t.Fatal("port-forward did not end after the error")
	}
}
