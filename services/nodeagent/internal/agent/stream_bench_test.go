package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
)

// The streaming endpoints' cost, client-go's websocket clients against
// the agent's handlers over real loopback sockets:
//
//	go test -run '^$' -bench 'ExecRoundTrip|ExecStdout|PortForwardThroughput' -benchtime 3s ./internal/agent/

func execServer(b *testing.B) *httptest.Server {
	dir := b.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts, err := parseExecOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		serveExecStreams(w, r, opts, dir, os.Environ(), hclog.NewNullLogger())
	}))
	b.Cleanup(srv.Close)
	return srv
}

// benchExec runs command; lost reports client-go's stream-registration
// race (see BenchmarkExecRoundTrip) instead of failing.
func benchExec(b *testing.B, srv *httptest.Server, out io.Writer, command ...string) (lost bool) {
	u := srv.URL + "/?" + url.Values{"command": command, "stdout": {"true"}}.Encode()
	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: srv.URL}, "GET", u)
	if err != nil {
		b.Fatal(err)
	}
	err = ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: out})
	if err != nil && strings.Contains(err.Error(), "closed all streams") {
		return true
	}
	if err != nil {
		b.Fatal(err)
	}
	return false
}

// BenchmarkExecRoundTrip: one exec of `true` (upgrade, fork/exec, exit
// status) per op. client-go's websocket executor registers its streams
// after it starts reading, so a command that ends within about a
// millisecond of the upgrade can close the connection before the client
// registered them: the client then reports "closed all streams". Such
// runs are counted (lost/exec), not hidden.
func BenchmarkExecRoundTrip(b *testing.B) {
	srv := execServer(b)
	start := time.Now()
	lost := 0
	for i := 0; i < b.N; i++ {
		if benchExec(b, srv, io.Discard, "true") {
			lost++
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/exec")
	b.ReportMetric(float64(lost)/float64(b.N), "lost/exec")
}

// BenchmarkExecStdout: 32 MiB of a command's stdout through the
// v5.channel.k8s.io stdout channel.
func BenchmarkExecStdout(b *testing.B) {
	const size = 32 << 20
	srv := execServer(b)
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		var n countWriter
		if benchExec(b, srv, &n, "head", "-c", fmt.Sprint(size), "/dev/zero") {
			b.Fatal("stream registration lost")
		}
		if n != size {
			b.Fatalf("got %d bytes, want %d", n, size)
		}
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// BenchmarkPortForwardThroughput: 32 MiB from a server on the "pod" side
// through SPDY tunnelled in a websocket, one connection per op.
func BenchmarkPortForwardThroughput(b *testing.B) {
	const size = 32 << 20
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lis.Close() })
	payload := bytes.Repeat([]byte("x"), 1<<20)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				for i := 0; i < size/len(payload); i++ {
					if _, err := c.Write(payload); err != nil {
						return
					}
				}
			}()
		}
	}()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwardTo(w, r, "127.0.0.1", hclog.NewNullLogger())
	}))
	b.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/")
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, &rest.Config{Host: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", lis.Addr().(*net.TCPAddr).Port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			b.Errorf("ForwardPorts: %v", err)
		}
		spdyShutdownsEnd(b)
	}()
	<-ready
	ports, err := fw.GetPorts()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, c)
		_ = c.Close()
		if err != nil || n != size {
			b.Fatalf("read %d bytes (%v), want %d", n, err, size)
		}
	}
}

// spdyShutdownsEnd waits until spdystream's closing goroutines (started
// by Close, ending once the peer let go) are gone, so the package's leak
// check sees a quiet process.
func spdyShutdownsEnd(b *testing.B) {
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if !strings.Contains(string(buf[:n]), "spdystream.(*Connection).shutdown") {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("spdystream connections still shutting down after 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling the condition above
	}
}
