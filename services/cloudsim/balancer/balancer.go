// Package balancer is the data plane of one simulated cloud load
// balancer: it listens on its external addresses, checks its backends
// with TCP connects, and forwards every accepted connection to a healthy
// backend (round robin), copying bytes both ways until either side closes.
package balancer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Backend is one target: a node's name and address.
type Backend struct {
	Name    string
	Address string
}

// Listener forwards connections accepted on ListenAddr to BackendPort on
// the healthy backends.
type Listener struct {
	ListenAddr  string
	BackendPort int
}

// Health is the last check of one backend on one port.
type Health struct {
	Backend Backend
	Port    int
	Healthy bool
}

// Options tune the health checks.
type Options struct {
	// Interval between health checks of every backend (default 1s).
	Interval time.Duration
	// Timeout of one check's TCP connect, and of a forwarded dial
	// (default 1s).
	Timeout time.Duration
	// UnhealthyAfter consecutive failed checks mark a backend unhealthy
	// (default 2); one success marks it healthy again.
	UnhealthyAfter int
	Logger         hclog.Logger
}

type target struct {
	addr string // host:port
	port int
	be   Backend
}

type checkState struct {
	healthy  bool
	failures int
}

// Balancer is one load balancer's listeners and health checker.
type Balancer struct {
	opts   Options
	log    hclog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	mu        sync.Mutex
	backends  []Backend
	listeners map[string]*listener // by listen address
	health    map[string]*checkState
	conns     map[net.Conn]struct{}
	next      uint64
}

type listener struct {
	spec Listener
	ln   net.Listener
}

// New returns a Balancer with no listeners; Update gives it some.
func New(opts Options) *Balancer {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.UnhealthyAfter <= 0 {
		opts.UnhealthyAfter = 2
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Balancer{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1),
		listeners: map[string]*listener{}, health: map[string]*checkState{}, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.checkLoop()
	return b
}

// Update makes the balancer listen on exactly the given listeners and
// forward to exactly the given backends. Listeners that stay keep their
// sockets (and connections); a listener that cannot be opened fails the
// update and leaves the others as they were asked to be.
func (b *Balancer) Update(listeners []Listener, backends []Backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return errors.New("balancer: closed")
	}
	want := map[string]Listener{}
	for _, l := range listeners {
		want[l.ListenAddr] = l
	}
	for addr, l := range b.listeners {
		if _, ok := want[addr]; !ok {
			_ = l.ln.Close() // the accept loop ends with it
			delete(b.listeners, addr)
		}
	}
	var errs []error
	for addr, spec := range want {
		if l, ok := b.listeners[addr]; ok {
			l.spec = spec
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("listen on %s: %w", addr, err))
			continue
		}
		l := &listener{spec: spec, ln: ln}
		b.listeners[addr] = l
		b.wg.Add(1)
		go b.acceptLoop(l)
	}
	b.backends = slices.Clone(backends)
	// Forget checks of targets that are gone; a new target is checked at
	// once (kick) and is unhealthy until its first check succeeds.
	keep := map[string]bool{}
	for _, t := range b.targetsLocked() {
		keep[t.addr+"/"+t.be.Name] = true
	}
	for k := range b.health {
		if !keep[k] {
			delete(b.health, k)
		}
	}
	select {
	case b.kick <- struct{}{}:
	default:
	}
	return errors.Join(errs...)
}

// Addrs returns the addresses the balancer listens on (useful with port 0).
func (b *Balancer) Addrs() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	for addr, l := range b.listeners {
		out[addr] = l.ln.Addr().String()
	}
	return out
}

// Health reports every backend on every backend port.
func (b *Balancer) Health() []Health {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Health
	for _, t := range b.targetsLocked() {
		st := b.health[t.addr+"/"+t.be.Name]
		out = append(out, Health{Backend: t.be, Port: t.port, Healthy: st != nil && st.healthy})
	}
	return out
}

// Close stops listening, ends every forwarded connection and the health
// checks, and waits for their goroutines.
func (b *Balancer) Close() {
	b.mu.Lock()
	b.cancel()
	for _, l := range b.listeners {
		_ = l.ln.Close()
	}
	b.listeners = map[string]*listener{}
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// targetsLocked lists each backend on each distinct backend port.
func (b *Balancer) targetsLocked() []target {
	ports := map[int]bool{}
	for _, l := range b.listeners {
		ports[l.spec.BackendPort] = true
	}
	var out []target
	for _, p := range slices.Sorted(maps.Keys(ports)) {
		for _, be := range b.backends {
			out = append(out, target{addr: net.JoinHostPort(be.Address, strconv.Itoa(p)), port: p, be: be})
		}
	}
	return out
}

func (b *Balancer) checkLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.Interval)
	defer t.Stop()
	for {
		b.checkAll()
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
	}
}

// checkAll connects to every target at once and records the outcomes.
func (b *Balancer) checkAll() {
	b.mu.Lock()
	targets := b.targetsLocked()
	b.mu.Unlock()
	results := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: b.opts.Timeout}
			c, err := d.DialContext(b.ctx, "tcp", t.addr)
			if err == nil {
				_ = c.Close()
			}
			results[i] = err == nil
		}()
	}
	wg.Wait()
	if b.ctx.Err() != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, t := range targets {
		k := t.addr + "/" + t.be.Name
		st := b.health[k]
		if st == nil {
			st = &checkState{}
			b.health[k] = st
		}
		was := st.healthy
		if results[i] {
			st.healthy, st.failures = true, 0
		} else if st.failures++; st.failures >= b.opts.UnhealthyAfter {
			st.healthy = false
		}
		if was != st.healthy {
			b.log.Info("backend health changed", "backend", t.be.Name, "target", t.addr, "healthy", st.healthy)
		}
	}
}

// pick returns the healthy targets on port, starting at the round-robin
// position, so a failed dial can try the next one.
func (b *Balancer) pick(port int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ok []string
	for _, be := range b.backends {
		addr := net.JoinHostPort(be.Address, strconv.Itoa(port))
		if st := b.health[addr+"/"+be.Name]; st != nil && st.healthy {
			ok = append(ok, addr)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	start := int(b.next % uint64(len(ok)))
	b.next++
	return append(ok[start:], ok[:start]...)
}

func (b *Balancer) acceptLoop(l *listener) {
	defer b.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				b.log.Warn("accept failed; listener stops", "listen", l.spec.ListenAddr, "error", err)
			}
			return
		}
		b.mu.Lock()
		if b.ctx.Err() != nil {
			b.mu.Unlock()
			_ = c.Close()
			return
		}
		port := l.spec.BackendPort
		b.conns[c] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go b.forward(c, port)
	}
}

// forward connects c to the first healthy backend that answers and copies
// both ways; with no healthy backend the client's connection is closed.
func (b *Balancer) forward(c net.Conn, port int) {
	defer b.wg.Done()
	defer b.untrack(c)
	var up net.Conn
	for _, addr := range b.pick(port) {
		d := net.Dialer{Timeout: b.opts.Timeout}
		conn, err := d.DialContext(b.ctx, "tcp", addr)
		if err == nil {
			up = conn
			break
		}
		b.log.Debug("backend dial failed; trying the next", "target", addr, "error", err)
	}
	if up == nil {
		b.log.Debug("no healthy backend; connection closed", "client", c.RemoteAddr().String(), "port", port)
		return
	}
	if !b.track(up) {
		_ = up.Close()
		return
	}
	defer b.untrack(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with either side; errors end the connection alike
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

func (b *Balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *Balancer) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	_ = c.Close()
}
