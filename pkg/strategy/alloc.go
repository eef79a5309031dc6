package strategy

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strconv"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// Allocation: some fields hold values that must be unique in the cluster
// and are drawn from a range when the user leaves them empty (a Service's
// clusterIP from --service-cluster-ip-range, its nodePorts from
// --service-node-port-range). A kind with such fields implements
// Allocator; the store then writes one etcd key per held value (a Claim)
// in the object's own create, update and delete transactions, created
// only where absent, so no two objects can ever hold the same value.

// DefaultServiceClusterIPRange is kplane's --service-cluster-ip-range:
// inside 127.0.0.0/8, so every host's and container's loopback answers
// it without privileges, and clear of the pod range 127.64.0.0/10.
var DefaultServiceClusterIPRange = netip.MustParsePrefix("127.16.0.0/12")

// DefaultServiceNodePortRange is Kubernetes' --service-node-port-range.
var DefaultServiceNodePortRange = PortRange{Base: 30000, Size: 2768}

// PortRange is a range of ports: Base, Base+1, ..., Base+Size-1.
type PortRange struct {
	Base, Size int
}

// ParsePortRange parses "30000-32767" (both ends included) or a single port.
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, found := strings.Cut(strings.TrimSpace(s), "-")
	if !found {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil {
		return PortRange{}, fmt.Errorf("%q: must be a port range such as 30000-32767", s)
	}
	if a < 1 || b > 65535 || a > b {
		return PortRange{}, fmt.Errorf("%q: must be FIRST-LAST with 1 <= FIRST <= LAST <= 65535", s)
	}
	return PortRange{Base: a, Size: b - a + 1}, nil
}

// Contains reports whether port p is in the range.
func (r PortRange) Contains(p int) bool { return p >= r.Base && p < r.Base+r.Size }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Base, r.Base+r.Size-1) }

// ValidateServiceClusterIPRange checks a --service-cluster-ip-range: an
// IPv4 prefix with room for at least one service.
func ValidateServiceClusterIPRange(p netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is4() {
		return fmt.Errorf("%s: must be an IPv4 CIDR", p)
	}
	if p.Masked() != p {
		return fmt.Errorf("%s: must be a network address (%s)", p, p.Masked())
	}
	if p.Bits() > 30 {
		return fmt.Errorf("%s: too small: at most /30, so it holds at least two addresses besides network and broadcast", p)
	}
	return nil
}

// Pool is a range values are drawn from, numbered 0..Size()-1.
type Pool interface {
	// Name is the pool's key segment ("serviceips", "servicenodeports").
	Name() string
	// Size is how many values the pool holds.
	Size() uint64
	// At is the i'th value in canonical form.
	At(i uint64) string
	// String describes the range for errors ("127.16.0.0/12").
	String() string
}

// ErrPoolFull is returned (wrapped) by a Picker when every value of a
// pool is held.
var ErrPoolFull = errors.New("range is full")

// Picker draws free values from pools; the store implements it.
type Picker interface {
	// Pick returns a value of pool that no object holds as far as the
	// picker knows (the transaction makes sure), or ErrPoolFull.
	Pick(pool Pool) (string, error)
}

// Claim is one held value: the pool it belongs to, the value, and the
// path of the field that holds it (for errors).
type Claim struct {
	Pool  string
	Value string
	Field string
}

// Allocator is implemented by kinds whose objects hold values drawn from
// ranges. The store calls KeepAllocated on updates before validation,
// Allocate after validation, and Claims to know which keys to write and
// remove.
type Allocator interface {
	// KeepAllocated carries the values of old (the stored object) into
	// an update that left them empty, and drops those the update no
	// longer has room for (a type change), as Kubernetes does.
	KeepAllocated(obj, old *kplanev1.Object)
	// Allocate checks user-given values against the ranges of cfg and
	// fills empty ones from pick. Values old (the stored object; nil on
	// create) already holds are not checked again, so a changed range
	// does not make existing objects unwritable. A picker's error is
	// returned as err; field errors as errs.
	Allocate(obj, old *kplanev1.Object, cfg Config, pick Picker) (errs validation.ErrorList, err error)
	// Claims lists the values obj holds.
	Claims(obj *kplanev1.Object) []Claim
	// AlreadyAllocated is the field error for a user-given claim that
	// another object holds.
	AlreadyAllocated(c Claim) validation.ErrorList
}

// ---- pools

// ipPool is an IPv4 prefix without its network and broadcast addresses.
type ipPool struct {
	prefix netip.Prefix
}

// ServiceIPPool is the pool of cluster IPs for prefix.
func ServiceIPPool(prefix netip.Prefix) Pool { return ipPool{prefix: prefix} }

func (p ipPool) Name() string { return "serviceips" }

func (p ipPool) Size() uint64 {
	host := 32 - p.prefix.Bits()
	if host < 2 {
		return 0
	}
	return 1<<host - 2
}

func (p ipPool) At(i uint64) string {
	base := new(big.Int).SetBytes(p.prefix.Masked().Addr().AsSlice())
	base.Add(base, new(big.Int).SetUint64(i+1))
	var b [4]byte
	base.FillBytes(b[:])
	return netip.AddrFrom4(b).String()
}

func (p ipPool) String() string { return p.prefix.String() }

// contains reports whether ip is an allocatable address of the pool.
func (p ipPool) contains(ip netip.Addr) bool {
	if !p.prefix.Contains(ip) {
		return false
	}
	first := p.prefix.Masked().Addr()
	return ip != first && ip != lastAddr(p.prefix)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

type portPool struct{ r PortRange }

// NodePortPool is the pool of node ports for r.
func NodePortPool(r PortRange) Pool { return portPool{r: r} }

func (p portPool) Name() string       { return "servicenodeports" }
func (p portPool) Size() uint64       { return uint64(p.r.Size) }
func (p portPool) At(i uint64) string { return strconv.Itoa(p.r.Base + int(i)) }
func (p portPool) String() string     { return p.r.String() }

func (c Config) clusterIPRange() netip.Prefix {
	if c.ServiceClusterIPRange.IsValid() {
		return c.ServiceClusterIPRange
	}
	return DefaultServiceClusterIPRange
}

func (c Config) nodePortRange() PortRange {
	if c.ServiceNodePortRange.Size > 0 {
		return c.ServiceNodePortRange
	}
	return DefaultServiceNodePortRange
}

// ---- Service: clusterIP and nodePorts

type serviceStrategy struct{ *typed[*kplanev1.Service] }

// needsClusterIP: every type but ExternalName, unless headless.
func needsClusterIP(s *kplanev1.ServiceSpec) bool {
	return s.GetType() != serviceTypeExternalName && s.GetClusterIp() != clusterIPNone
}

func needsNodePorts(s *kplanev1.ServiceSpec) bool {
	return s.GetType() == serviceTypeNodePort || s.GetType() == serviceTypeLoadBalancer
}

// KeepAllocated implements Allocator: an update that omits clusterIP or
// a port's nodePort keeps the stored one (clients that write back a
// manifest do not know them); a change to ExternalName drops the cluster
// IPs, and a change to ClusterIP (or ExternalName) the node ports the
// update still carries from the stored object.
func (serviceStrategy) KeepAllocated(obj, old *kplanev1.Object) {
	n, o := obj.GetService().GetSpec(), old.GetService().GetSpec()
	if n == nil || o == nil {
		return
	}
	switch {
	case n.Type == serviceTypeExternalName:
		if n.ClusterIp == o.ClusterIp {
			n.ClusterIp, n.ClusterIps = "", nil
		}
	case n.ClusterIp == "" && len(n.ClusterIps) == 0 && o.Type != serviceTypeExternalName && o.ClusterIp != "":
		n.ClusterIp, n.ClusterIps = o.ClusterIp, append([]string(nil), o.ClusterIps...)
	}
	oldPorts := map[string]int32{}
	for _, p := range o.Ports {
		if p.GetNodePort() != 0 {
			oldPorts[portID(p)] = p.GetNodePort()
		}
	}
	for _, p := range n.Ports {
		if p == nil {
			continue
		}
		old, had := oldPorts[portID(p)]
		switch {
		case !needsNodePorts(n):
			if had && p.NodePort == old {
				p.NodePort = 0
			}
		case p.NodePort == 0 && had && needsNodePorts(o):
			p.NodePort = old
		}
	}
}

// portID identifies a service port across an update: its name, or its
// number and protocol when unnamed.
func portID(p *kplanev1.ServicePort) string {
	if p.GetName() != "" {
		return "name:" + p.GetName()
	}
	proto := p.GetProtocol()
	if proto == "" {
		proto = defaultProtocol
	}
	return fmt.Sprintf("%d/%s", p.GetPort(), proto)
}

// Allocate implements Allocator.
func (st serviceStrategy) Allocate(obj, old *kplanev1.Object, cfg Config, pick Picker) (validation.ErrorList, error) {
	var errs validation.ErrorList
	s := obj.GetService().GetSpec()
	if s == nil {
		return nil, nil
	}
	held := map[string]bool{}
	if old != nil {
		for _, c := range st.Claims(old) {
			held[c.Pool+"/"+c.Value] = true
		}
	}
	ipRange := cfg.clusterIPRange()
	if needsClusterIP(s) {
		if len(s.ClusterIps) > 1 {
			errs.Invalid("spec.clusterIPs", strings.Join(s.ClusterIps, ","), "may hold one IP: this cluster is single-stack IPv4")
		}
		if s.ClusterIp == "" {
			ip, err := pick.Pick(ServiceIPPool(ipRange))
			if err != nil {
				return nil, fmt.Errorf("spec.clusterIPs: failed to allocate a service IP: %w", err)
			}
			s.ClusterIp, s.ClusterIps = ip, []string{ip}
		} else if ip, err := netip.ParseAddr(s.ClusterIp); err == nil && !held[ipPool{}.Name()+"/"+ip.String()] && !(ipPool{ipRange}).contains(ip) {
			errs.Invalid("spec.clusterIPs", s.ClusterIp, fmt.Sprintf(
				"failed to allocate IP %s: provided IP is not in the valid range. The range of valid IPs is %s", s.ClusterIp, ipRange))
		}
	}
	if needsNodePorts(s) {
		ports := cfg.nodePortRange()
		seen := map[int32]bool{}
		for i, p := range s.Ports {
			if p == nil {
				continue
			}
			path := child(index("spec.ports", i), "nodePort")
			if p.NodePort == 0 {
				continue // allocated below, once every user-given port is known
			}
			if !held[portPool{}.Name()+"/"+strconv.Itoa(int(p.NodePort))] && !ports.Contains(int(p.NodePort)) {
				errs.Invalid(path, p.NodePort, "provided port is not in the valid range. The range of valid ports is "+ports.String())
			}
			if seen[p.NodePort] {
				errs.Duplicate(path, p.NodePort)
			}
			seen[p.NodePort] = true
		}
		for _, p := range s.Ports {
			if p == nil || p.NodePort != 0 {
				continue
			}
			v, err := pick.Pick(NodePortPool(ports))
			if err != nil {
				return nil, fmt.Errorf("spec.ports: failed to allocate a node port: %w", err)
			}
			n, _ := strconv.Atoi(v) // the pool's own canonical form
			p.NodePort = int32(n)
		}
	}
	return errs, nil
}

// Claims implements Allocator: the cluster IP (unless headless or an
// ExternalName) and each node port.
func (serviceStrategy) Claims(obj *kplanev1.Object) []Claim {
	s := obj.GetService().GetSpec()
	var out []Claim
	if needsClusterIP(s) && s.GetClusterIp() != "" {
		if ip, err := netip.ParseAddr(s.ClusterIp); err == nil {
			out = append(out, Claim{Pool: ipPool{}.Name(), Value: ip.String(), Field: "spec.clusterIPs"})
		}
	}
	if needsNodePorts(s) {
		for i, p := range s.GetPorts() {
			if p.GetNodePort() != 0 {
				out = append(out, Claim{Pool: portPool{}.Name(), Value: strconv.Itoa(int(p.GetNodePort())),
					Field: child(index("spec.ports", i), "nodePort")})
			}
		}
	}
	return out
}

// AlreadyAllocated implements Allocator.
func (serviceStrategy) AlreadyAllocated(c Claim) validation.ErrorList {
	var errs validation.ErrorList
	if c.Pool == (ipPool{}).Name() {
		errs.Invalid(c.Field, c.Value, "failed to allocate IP "+c.Value+": provided IP is already allocated")
	} else {
		errs.Invalid(c.Field, c.Value, "provided port is already allocated")
	}
	return errs
}
