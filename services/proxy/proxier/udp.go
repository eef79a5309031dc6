package proxier

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// UDPSessionTimeout ends a UDP session (one client address to one
// endpoint) after this long without a datagram either way, as a
// conntrack entry for UDP expires.
const UDPSessionTimeout = 30 * time.Second

// maxDatagram is the largest UDP payload.
const maxDatagram = 64 << 10

// udpRelay forwards the datagrams arriving on one service address. Each
// client address gets a session: a connected socket to the endpoint the
// balancer picked for it, and a goroutine relaying the endpoint's
// answers back from the service address. With no endpoint the datagram
// is dropped (and counted as refused).
type udpRelay struct {
	p    *Proxier
	sp   *servicePort
	conn *net.UDPConn

	mu       sync.Mutex
	closed   bool
	sessions map[netip.AddrPort]*udpSession
}

type udpSession struct {
	backend  *net.UDPConn
	lastUsed atomic.Int64 // unix nanoseconds of the last datagram either way
}

func newUDPRelay(p *Proxier, sp *servicePort, conn *net.UDPConn) *udpRelay {
	return &udpRelay{p: p, sp: sp, conn: conn, sessions: map[netip.AddrPort]*udpSession{}}
}

// serve reads client datagrams until the relay is closed; it holds one
// count of p.wg.
func (r *udpRelay) serve() {
	defer r.p.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, client, err := r.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || r.isClosed() {
				return
			}
			r.p.log.Debug("udp read failed", "service", r.sp.name, "error", err)
			continue
		}
		s := r.session(client)
		if s == nil {
			r.sp.m.refused.Inc()
			continue
		}
		s.lastUsed.Store(r.p.now().UnixNano())
		if _, err := s.backend.Write(buf[:n]); err != nil {
			r.p.log.Debug("udp write to endpoint failed", "service", r.sp.name, "endpoint", s.backend.RemoteAddr(), "error", err)
		}
	}
}

func (r *udpRelay) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// session returns the client's session, opening one to the endpoint the
// balancer picks (nil when there is none or the relay is closed).
func (r *udpRelay) session(client netip.AddrPort) *udpSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if s := r.sessions[client]; s != nil {
		return s
	}
	var tried []string
	for range maxDialAttempts {
		ep, ok := r.sp.lb.Next(client.Addr().Unmap(), r.p.now(), tried)
		if !ok {
			return nil
		}
		tried = append(tried, ep)
		to, err := netip.ParseAddrPort(ep)
		if err != nil {
			continue
		}
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
		if err != nil {
			r.sp.m.dialErrors.Inc()
			continue
		}
		s := &udpSession{backend: c}
		s.lastUsed.Store(r.p.now().UnixNano())
		r.sessions[client] = s
		r.sp.m.accepted.Inc()
		r.sp.m.active.Inc()
		r.p.wg.Add(1)
		go r.relayAnswers(client, s)
		return s
	}
	return nil
}

// relayAnswers sends the endpoint's datagrams back to client until the
// session has been idle for the session timeout, the endpoint refuses
// (ICMP port unreachable on the connected socket: the next datagram
// opens a session to another endpoint) or the relay closes.
func (r *udpRelay) relayAnswers(client netip.AddrPort, s *udpSession) {
	defer r.p.wg.Done()
	defer func() {
		r.mu.Lock()
		if r.sessions[client] == s {
			delete(r.sessions, client)
		}
		r.mu.Unlock()
		_ = s.backend.Close() // closing twice only returns an error
		r.sp.m.active.Dec()
	}()
	buf := make([]byte, maxDatagram)
	for {
		idleUntil := time.Unix(0, s.lastUsed.Load()).Add(r.p.udpTimeout)
		if !r.p.now().Before(idleUntil) {
			return
		}
		if err := s.backend.SetReadDeadline(idleUntil); err != nil {
			return
		}
		n, err := s.backend.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // the loop checks whether the client kept it alive
			}
			return
		}
		s.lastUsed.Store(r.p.now().UnixNano())
		if _, err := r.conn.WriteToUDPAddrPort(buf[:n], client); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			r.p.log.Debug("udp write to client failed", "service", r.sp.name, "client", client, "error", err)
		}
	}
}

// close stops the relay: the service socket and every session's socket
// close, which ends their goroutines.
func (r *udpRelay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	_ = r.conn.Close() // serve sees net.ErrClosed
	for _, s := range r.sessions {
		_ = s.backend.Close()
	}
}
