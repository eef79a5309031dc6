package balancer

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/pkg/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves on 127.0.0.1: every connection gets name and a newline,
// then whatever it sends echoed back.
func echo(tb testing.TB, name string) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = fmt.Fprintln(c, name)
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	tb.Cleanup(func() { _ = ln.Close() })
	return ln
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// TestForwardsBothWaysAndCloses: bytes go both ways through the
// balancer, and Close ends listeners and live connections.
func TestForwardsBothWaysAndCloses(t *testing.T) {
	be := echo(t, "a")
	b := New(Options{Interval: 50 * time.Millisecond})
	if err := b.Update([]Listener{{ListenAddr: "127.0.0.1:0", BackendPort: port(be)}}, []Backend{{Name: "a", Address: "127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	addr := b.Addrs()["127.0.0.1:0"]
	testutil.Eventually(t, 10*time.Second, "backend healthy", func() bool {
		h := b.Health()
		return len(h) == 1 && h[0].Healthy
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if l, _ := r.ReadString('\n'); strings.TrimSpace(l) != "a" {
		t.Fatalf("greeting %q", l)
	}
	_, _ = fmt.Fprintln(c, "ping")
	if l, _ := r.ReadString('\n'); strings.TrimSpace(l) != "ping" {
		t.Fatalf("echo %q", l)
	}
	b.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a connection outlived Close")
	}
	_ = c.Close()
	if err := b.Update(nil, nil); err == nil {
		t.Fatal("Update after Close: want an error")
	}
}

// BenchmarkConnect opens a connection, reads the backend's greeting and
// closes, directly and through the balancer; compare the ns/op of the two
// sub-benchmarks for the cost of the hop.
func BenchmarkConnect(b *testing.B) {
	be := echo(b, "a")
	lb := New(Options{Interval: 50 * time.Millisecond})
	defer lb.Close()
	if err := lb.Update([]Listener{{ListenAddr: "127.0.0.1:0", BackendPort: port(be)}}, []Backend{{Name: "a", Address: "127.0.0.1"}}); err != nil {
		b.Fatal(err)
	}
	testutil.Eventually(b, 10*time.Second, "backend healthy", func() bool { return lb.Health()[0].Healthy })
	for _, tc := range []struct{ name, addr string }{{"direct", be.Addr().String()}, {"balancer", lb.Addrs()["127.0.0.1:0"]}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				c, err := net.Dial("tcp", tc.addr)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					b.Fatal(err)
				}
				_ = c.Close()
			}
		})
	}
}
