// Package ipam hands out pod IPs from a node's range (its spec.podCIDR),
// so that every pod has its own address and replicas can listen on the
// same port.
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ErrExhausted is returned when every address of the range is in use.
var ErrExhausted = errors.New("ipam: no free address in range")

// Allocator assigns addresses of one IPv4 prefix to owners (pod UIDs).
// The network and broadcast addresses are never handed out. Allocation is
// next-fit, so a released address is reused as late as possible (a client
// holding a stale pod IP is less likely to reach a different pod).
type Allocator struct {
	prefix netip.Prefix
	first  uint32 // first usable address
	size   uint32 // number of usable addresses

	mu     sync.Mutex
	next   uint32 // offset of the next candidate
	byIP   map[netip.Addr]string
	byUser map[string]netip.Addr
}

// New returns an allocator for cidr, e.g. "127.1.0.0/16". The prefix must
// be IPv4 and leave at least one usable address (/30 or larger).
func New(cidr string) (*Allocator, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("ipam: parse %q: %w", cidr, err)
	}
	if !p.Addr().Is4() {
		return nil, fmt.Errorf("ipam: %q: only IPv4 ranges are supported", cidr)
	}
	if p.Bits() > 30 {
		return nil, fmt.Errorf("ipam: %q: range too small (need /30 or larger)", cidr)
	}
	p = p.Masked()
	total := uint32(1) << (32 - p.Bits())
	return &Allocator{
		prefix: p,
		first:  toU32(p.Addr()) + 1,
		size:   total - 2,
		byIP:   map[netip.Addr]string{},
		byUser: map[string]netip.Addr{},
	}, nil
}

// Prefix returns the range.
func (a *Allocator) Prefix() netip.Prefix { return a.prefix }

// Allocate returns owner's address, assigning a free one on first use.
func (a *Allocator) Allocate(owner string) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ip, ok := a.byUser[owner]; ok {
		return ip, nil
	}
	for i := uint32(0); i < a.size; i++ {
		off := (a.next + i) % a.size
		ip := fromU32(a.first + off)
		if _, used := a.byIP[ip]; used {
			continue
		}
		a.next = (off + 1) % a.size
		a.byIP[ip] = owner
		a.byUser[owner] = ip
		return ip, nil
	}
	return netip.Addr{}, ErrExhausted
}

// Reserve records that owner holds ip (e.g. read back from disk after a
// restart). It fails when ip is outside the range or held by someone else.
func (a *Allocator) Reserve(owner string, ip netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.usable(ip) {
		return fmt.Errorf("ipam: %s is not a usable address of %s", ip, a.prefix)
	}
	if cur, ok := a.byIP[ip]; ok && cur != owner {
		return fmt.Errorf("ipam: %s is already held by %s", ip, cur)
	}
	if old, ok := a.byUser[owner]; ok && old != ip {
		delete(a.byIP, old)
	}
	a.byIP[ip] = owner
	a.byUser[owner] = ip
	return nil
}

// Release frees owner's address, if any.
func (a *Allocator) Release(owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ip, ok := a.byUser[owner]; ok {
		delete(a.byUser, owner)
		delete(a.byIP, ip)
	}
}

// Lookup returns owner's address.
func (a *Allocator) Lookup(owner string) (netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ip, ok := a.byUser[owner]
	return ip, ok
}

// Holder returns who holds ip.
func (a *Allocator) Holder(ip netip.Addr) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	owner, ok := a.byIP[ip]
	return owner, ok
}

// InUse is the number of allocated addresses.
func (a *Allocator) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byIP)
}

func (a *Allocator) usable(ip netip.Addr) bool {
	if !ip.Is4() || !a.prefix.Contains(ip) {
		return false
	}
	v := toU32(ip)
	return v >= a.first && v < a.first+a.size
}

func toU32(ip netip.Addr) uint32 {
	b := ip.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromU32(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
