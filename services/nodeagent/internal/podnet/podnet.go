// Package podnet makes pod IPs reachable from other hosts: it adds each
// pod's IP as a /32 address on the interface that carries the node's own
// address (on a shared L2 network, such as a compose network whose subnet
// covers the cluster CIDR, the node then answers ARP for its pods) and
// removes it when the pod is gone. Pod IPs inside 127.0.0.0/8 need
// nothing: the loopback interface answers the whole range already.
package podnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Mode values of the node agent's --pod-address-interface flag.
const (
	// ModeAuto programs nothing for loopback ranges and otherwise uses the
	// interface that carries the node IP.
	ModeAuto = "auto"
	// ModeNone never programs addresses (someone else routes pod IPs).
	ModeNone = "none"
)

// Programmer adds and removes pod addresses on one interface. It is safe
// for concurrent use. The zero of link (no interface) programs nothing.
type Programmer struct {
	link netlink.Link // nil: nothing to program

	mu   sync.Mutex
	have map[netip.Addr]bool // added by this process (or found and kept)
}

// New returns the Programmer for mode (ModeAuto, ModeNone or an interface
// name), the node's IP and the node's pod range.
func New(mode string, nodeIP netip.Addr, podCIDR netip.Prefix) (*Programmer, error) {
	p := &Programmer{have: map[netip.Addr]bool{}}
	switch {
	case mode == ModeNone:
		return p, nil
	case mode == ModeAuto && podCIDR.Addr().IsLoopback():
		return p, nil
	case mode == ModeAuto:
		link, err := linkWithAddr(nodeIP)
		if err != nil {
			return nil, err
		}
		p.link = link
	default:
		link, err := netlink.LinkByName(mode)
		if err != nil {
			return nil, fmt.Errorf("podnet: interface %q: %w", mode, err)
		}
		p.link = link
	}
	return p, nil
}

// Active reports whether addresses are programmed at all.
func (p *Programmer) Active() bool { return p != nil && p.link != nil }

// Interface names the interface programmed ("" when none).
func (p *Programmer) Interface() string {
	if !p.Active() {
		return ""
	}
	return p.link.Attrs().Name
}

func linkWithAddr(ip netip.Addr) (netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("podnet: list interfaces: %w", err)
	}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("podnet: no interface carries the node IP %s (--node-ip); pod addresses need one", ip)
}

func hostAddr(ip netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}}
}

// Add makes ip an address of the interface (idempotent).
func (p *Programmer) Add(ip netip.Addr) error {
	if !p.Active() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.have[ip] {
		return nil
	}
	if err := netlink.AddrReplace(p.link, hostAddr(ip)); err != nil {
		return fmt.Errorf("podnet: add %s to %s: %w", ip, p.Interface(), err)
	}
	p.have[ip] = true
	return nil
}

// Remove takes ip off the interface (idempotent).
func (p *Programmer) Remove(ip netip.Addr) error {
	if !p.Active() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	err := netlink.AddrDel(p.link, hostAddr(ip))
	if err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("podnet: remove %s from %s: %w", ip, p.Interface(), err)
	}
	delete(p.have, ip)
	return nil
}

// Sweep removes the interface's addresses inside podCIDR that keep does
// not want (left by a pod that went while no agent ran) and returns them.
func (p *Programmer) Sweep(podCIDR netip.Prefix, keep func(netip.Addr) bool) ([]netip.Addr, error) {
	if !p.Active() {
		return nil, nil
	}
	addrs, err := netlink.AddrList(p.link, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("podnet: list addresses of %s: %w", p.Interface(), err)
	}
	var removed []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ones, _ := a.Mask.Size(); ones != 32 || !podCIDR.Contains(ip) || keep(ip) {
			continue
		}
		if err := p.Remove(ip); err != nil {
			return removed, err
		}
		removed = append(removed, ip)
	}
	return removed, nil
}
