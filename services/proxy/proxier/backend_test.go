package proxier

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// backend is a real TCP server standing in for a pod: on each connection
// it writes its name and a newline, then answers every line with
// "<name> <line>"; on "upload" it reads to EOF and answers with the byte
// count (which needs the client's half-close to reach it).
type backend struct {
	name string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	cs   map[net.Conn]struct{}
}

func startBackend(t testing.TB, name string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, ln: ln, cs: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *backend) addr() netip.AddrPort { return b.ln.Addr().(*net.TCPAddr).AddrPort() }

func (b *backend) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.cs[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() {
				b.mu.Lock()
				delete(b.cs, c)
				b.mu.Unlock()
				_ = c.Close()
			}()
			b.talk(c)
		}()
	}
}

func (b *backend) talk(c net.Conn) {
	if _, err := fmt.Fprintf(c, "%s\n", b.name); err != nil {
		return
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSpace(line)
		if line == "upload" {
			n, err := io.Copy(io.Discard, r)
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(c, "%s got %d bytes\n", b.name, n)
			return
		}
		if _, err := fmt.Fprintf(c, "%s %s\n", b.name, line); err != nil {
			return
		}
	}
}

func (b *backend) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for c := range b.cs {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// session is a client connection through the proxy.
type session struct {
	c       *net.TCPConn
	r       *bufio.Reader
	backend string
}

// connect dials addr and reads the backend's greeting.
func connect(addr string) (*session, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	s := &session{c: c.(*net.TCPConn), r: bufio.NewReader(c)}
	name, err := s.r.ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("greeting: %w", err)
	}
	s.backend = strings.TrimSpace(name)
	return s, nil
}

// ask sends a line and returns the answer.
func (s *session) ask(line string) (string, error) {
	if _, err := fmt.Fprintf(s.c, "%s\n", line); err != nil {
		return "", err
	}
	a, err := s.r.ReadString('\n')
	return strings.TrimSpace(a), err
}

func (s *session) close() { _ = s.c.Close() }

// whoAnswers opens n connections in turn and returns the backend of each.
func whoAnswers(addr string, n int) ([]string, error) {
	var out []string
	for range n {
		s, err := connect(addr)
		if err != nil {
			return out, err
		}
		out = append(out, s.backend)
		s.close()
	}
	return out, nil
}

// refused reports whether a connection to addr is refused, at connect
// (nothing listens) or right after it (reset, no greeting).
func refused(addr string) (bool, error) {
	s, err := connect(addr)
	if err == nil {
		s.close()
		return false, fmt.Errorf("answered by %s", s.backend)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, err
	}
	return true, nil
}

// randomClusterIP picks an address in 127.16.0.0/12 (the default service
// range) that tests running at the same time are unlikely to share.
func randomClusterIP() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(16 + rand.IntN(16)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
}

// freePort returns a TCP port free on ip at the time of the call.
func freePort(t testing.TB, ip string) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// freeNodePort returns a port in the apiserver's default node port range
// (30000-32767) that is free on ip at the time of the call.
func freeNodePort(t testing.TB, ip string) int32 {
	t.Helper()
	for range 100 {
		port := 30000 + rand.IntN(2768)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
		if err != nil {
			continue // taken: try another
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		return int32(port)
	}
	t.Fatalf("no free port in 30000-32767 on %s after 100 tries", ip)
	return 0
}
