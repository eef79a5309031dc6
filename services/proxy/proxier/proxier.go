package proxier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// maxDialAttempts bounds the endpoints one connection tries before it is
// reset: an endpoint that just died (its Endpoints not updated yet) costs
// a client a retry, not a failure.
const maxDialAttempts = 3

// Proxier owns the listeners of every service port on this node and the
// connections forwarded through them. Sync brings one Service's ports to
// a plan; Close stops everything. Listeners and connections are
// independent: changing a port's endpoints, or removing the port, never
// touches a connection already forwarded (as with Kubernetes' conntrack
// entries); only Close does.
type Proxier struct {
	log         hclog.Logger
	dialTimeout time.Duration
	udpTimeout  time.Duration // UDPSessionTimeout; tests shorten it
	metrics     *metrics
	now         func() time.Time

	ctx    context.Context // ends at Close: cancels dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops and connection handlers

	mu        sync.Mutex
	closed    bool
	services  map[string]map[string]*servicePort // service key -> port name -> port
	listeners map[string]*listener               // listen address -> listener
	conns     map[*net.TCPConn]struct{}          // every open connection, both sides
}

// servicePort is one port of one Service on this node.
type servicePort struct {
	name      string
	lb        *Balancer
	m         portMetrics
	listeners map[string]*listener
}

// listener accepts on one address for one service port: TCP
// connections (ln) or UDP datagrams (udp).
type listener struct {
	key  string // listenKey
	ln   *net.TCPListener
	udp  *udpRelay
	sp   *servicePort
	done chan struct{} // closed when the listener is closed
}

// NewProxier returns a proxier that dials endpoints with dialTimeout and
// registers its metrics on reg.
func NewProxier(log hclog.Logger, reg prometheus.Registerer, dialTimeout time.Duration) (*Proxier, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxier{
		log: log, dialTimeout: dialTimeout, udpTimeout: UDPSessionTimeout, metrics: m, now: time.Now,
		ctx: ctx, cancel: cancel,
		services:  map[string]map[string]*servicePort{},
		listeners: map[string]*listener{},
		conns:     map[*net.TCPConn]struct{}{},
	}, nil
}

// Sync makes the ports of the Service key (namespace/name) match plans:
// ports no longer planned close their listeners, planned ones get their
// endpoints updated and listen on every planned address. An address that
// cannot be listened on (taken, not local) is reported in the error after
// everything else was done, so the caller retries it with backoff. After
// Close, Sync does nothing.
func (p *Proxier) Sync(key string, plans []PortPlan) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	ports := p.services[key]
	for name, sp := range ports {
		if !slices.ContainsFunc(plans, func(pl PortPlan) bool { return pl.Name == name }) {
			p.removePortLocked(sp)
			delete(ports, name)
			p.log.Info("service port removed", "service", name)
		}
	}
	var errs []error
	for _, pl := range plans {
		sp := ports[pl.Name]
		if sp == nil {
			if ports == nil {
				ports = map[string]*servicePort{}
				p.services[key] = ports
			}
			sp = &servicePort{name: pl.Name, lb: NewBalancer(), m: p.metrics.forPort(pl.Name), listeners: map[string]*listener{}}
			ports[pl.Name] = sp
			p.log.Info("service port added", "service", pl.Name, "addresses", pl.Listen)
		}
		if old := sp.lb.Endpoints(); !slices.Equal(old, pl.Endpoints) {
			p.log.Debug("endpoints changed", "service", pl.Name, "endpoints", pl.Endpoints)
		}
		sp.lb.Update(pl.Endpoints, pl.AffinityTimeout)
		sp.m.endpoints.Set(float64(len(pl.Endpoints)))
		want := make([]string, len(pl.Listen))
		for i, addr := range pl.Listen {
			want[i] = listenKey(pl.Protocol, addr)
		}
		for key, l := range sp.listeners {
			if !slices.Contains(want, key) {
				p.closeListenerLocked(l)
			}
		}
		for _, addr := range pl.Listen {
			if _, ok := sp.listeners[listenKey(pl.Protocol, addr)]; ok {
				continue
			}
			if err := p.listenLocked(sp, pl.Protocol, addr); err != nil {
				p.metrics.listenErrs.Inc()
				errs = append(errs, err)
			}
		}
	}
	if len(ports) == 0 {
		delete(p.services, key)
	}
	return errors.Join(errs...)
}

func (p *Proxier) removePortLocked(sp *servicePort) {
	for _, l := range sp.listeners {
		p.closeListenerLocked(l)
	}
	p.metrics.deletePort(sp.name)
}

// listenKey names a listener: its address, "udp/" first for UDP.
func listenKey(protocol, addr string) string {
	if protocol == kplanev1.ProtocolUDP {
		return "udp/" + addr
	}
	return addr
}

func (p *Proxier) listenLocked(sp *servicePort, protocol, addr string) error {
	key := listenKey(protocol, addr)
	if other, ok := p.listeners[key]; ok {
		return fmt.Errorf("listen on %s for %s: the address is taken by %s", key, sp.name, other.sp.name)
	}
	l := &listener{key: key, sp: sp, done: make(chan struct{})}
	var lc net.ListenConfig
	if protocol == kplanev1.ProtocolUDP {
		pc, err := lc.ListenPacket(p.ctx, "udp", addr)
		if err != nil {
			return fmt.Errorf("listen on udp %s for %s: %w", addr, sp.name, err)
		}
		l.udp = newUDPRelay(p, sp, pc.(*net.UDPConn))
	} else {
		ln, err := lc.Listen(p.ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s for %s: %w", addr, sp.name, err)
		}
		l.ln = ln.(*net.TCPListener)
	}
	sp.listeners[key] = l
	p.listeners[key] = l
	p.metrics.listeners.Inc()
	p.wg.Add(1)
	if l.udp != nil {
		go l.udp.serve()
	} else {
		go p.serve(l)
	}
	return nil
}

func (p *Proxier) closeListenerLocked(l *listener) {
	close(l.done)
	if l.udp != nil {
		l.udp.close()
	} else {
		_ = l.ln.Close() // the accept loop sees net.ErrClosed and returns
	}
	delete(l.sp.listeners, l.key)
	delete(p.listeners, l.key)
	p.metrics.listeners.Dec()
}

// Addrs returns the addresses listened on, e.g. "127.16.0.10:80" or
// "udp/127.16.0.10:53", sorted.
func (p *Proxier) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.listeners {
		if l.udp != nil {
			out = append(out, "udp/"+l.udp.conn.LocalAddr().String())
		} else {
			out = append(out, l.ln.Addr().String())
		}
	}
	slices.Sort(out)
	return out
}

// Close closes every listener and every forwarded connection and waits
// for their goroutines. It is idempotent.
func (p *Proxier) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.cancel()
		for _, ports := range p.services {
			for _, sp := range ports {
				p.removePortLocked(sp)
			}
		}
		p.services = map[string]map[string]*servicePort{}
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// serve accepts connections on l until it is closed.
func (p *Proxier) serve(l *listener) {
	defer p.wg.Done()
	var delay time.Duration
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off rather than
			// spin, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("accept failed; retrying", "service", l.sp.name, "address", l.key, "error", err, "delay", delay)
			t := time.NewTimer(delay)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.handle(l.sp, c)
	}
}

// track registers an open connection so that Close can end it; false
// (and the connection closed) when the proxier is closed already.
func (p *Proxier) track(c *net.TCPConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxier) untrack(c *net.TCPConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close() // closing twice only returns an error
}

// handle forwards one accepted connection to an endpoint of sp, trying up
// to maxDialAttempts endpoints; with none left it resets the client.
func (p *Proxier) handle(sp *servicePort, client *net.TCPConn) {
	defer p.wg.Done()
	defer p.untrack(client)
	sp.m.accepted.Inc()
	var clientIP netip.Addr
	if a, ok := client.RemoteAddr().(*net.TCPAddr); ok {
		clientIP = a.AddrPort().Addr().Unmap()
	}
	var tried []string
	for range maxDialAttempts {
		ep, ok := sp.lb.Next(clientIP, p.now(), tried)
		if !ok {
			break
		}
		backend, err := p.dial(ep)
		if err != nil {
			sp.m.dialErrors.Inc()
			p.log.Debug("dial to endpoint failed", "service", sp.name, "endpoint", ep, "error", err)
			tried = append(tried, ep)
			continue
		}
		if !p.track(backend) {
			return
		}
		defer p.untrack(backend)
		sp.m.active.Inc()
		defer sp.m.active.Dec()
		splice(client, backend)
		return
	}
	sp.m.refused.Inc()
	// A reset rather than a clean close: the client must not mistake the
	// refusal for an empty answer.
	_ = client.SetLinger(0)
}

func (p *Proxier) dial(endpoint string) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: p.dialTimeout}
	c, err := d.DialContext(p.ctx, "tcp", endpoint)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	return c.(*net.TCPConn), nil
}

// splice copies both ways until both directions are done. io.Copy
// between two *net.TCPConn uses splice(2) on Linux: the bytes move
// kernel to kernel, no per-byte work here. A clean end of one direction
// is passed on as a half-close (the other direction keeps flowing); an
// error (a reset) ends both.
func splice(a, b *net.TCPConn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	<-done
}

// copyHalf copies src to dst; then it half-closes dst, or on an error
// closes both so that the other direction stops too.
func copyHalf(dst, src *net.TCPConn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = src.Close()
		_ = dst.Close()
		return
	}
	if err := dst.CloseWrite(); err != nil {
		_ = src.Close()
		_ = dst.Close()
	}
}
