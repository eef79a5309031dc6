package nodeipam

import (
	"fmt"
	"net/netip"
)

// maxMaskDiff bounds how many node ranges a cluster CIDR is cut into
// (2^16), as kube-controller-manager does: the allocator scans ranges.
const maxMaskDiff = 16

// cidrSet cuts an IPv4 cluster CIDR into equal node ranges, numbered from
// 0 in address order. It holds no allocation state: which ranges are taken
// is read from the Nodes (see controller).
type cidrSet struct {
	cluster netip.Prefix
	mask    int // prefix length of a node range
	count   int // number of node ranges
}

// newCIDRSet validates the flags' values and returns the set.
func newCIDRSet(clusterCIDR string, mask int) (*cidrSet, error) {
	p, err := netip.ParsePrefix(clusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("--cluster-cidr: %q is not a CIDR (e.g. 10.244.0.0/16): %w", clusterCIDR, err)
	}
	if !p.Addr().Is4() {
		return nil, fmt.Errorf("--cluster-cidr: %q: only IPv4 is supported", clusterCIDR)
	}
	if p != p.Masked() {
		return nil, fmt.Errorf("--cluster-cidr: %q has host bits set; did you mean %s?", clusterCIDR, p.Masked())
	}
	switch {
	case mask < p.Bits():
		return nil, fmt.Errorf("--node-cidr-mask-size: /%d is larger than the cluster CIDR %s", mask, p)
	case mask > 30:
		return nil, fmt.Errorf("--node-cidr-mask-size: /%d leaves no usable pod address (at most /30)", mask)
	case mask-p.Bits() > maxMaskDiff:
		return nil, fmt.Errorf("--node-cidr-mask-size: /%d cuts %s into more than 2^%d node ranges", mask, p, maxMaskDiff)
	}
	return &cidrSet{cluster: p, mask: mask, count: 1 << (mask - p.Bits())}, nil
}

// prefix returns node range number i.
func (s *cidrSet) prefix(i int) netip.Prefix {
	base := u32(s.cluster.Addr()) + uint32(i)<<(32-s.mask)
	return netip.PrefixFrom(addr(base), s.mask)
}

// indexes returns the numbers of the node ranges that cidr overlaps (none
// when it lies outside the cluster CIDR or is not an IPv4 CIDR). A range
// set by hand with another mask still blocks every range it touches.
func (s *cidrSet) indexes(cidr string) []int {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || !p.Overlaps(s.cluster) {
		return nil
	}
	p = p.Masked()
	if p.Bits() < s.cluster.Bits() {
		p = s.cluster // covers the whole cluster CIDR
	}
	first := int((u32(p.Addr()) - u32(s.cluster.Addr())) >> (32 - s.mask))
	n := 1
	if p.Bits() < s.mask {
		n = 1 << (s.mask - p.Bits())
	}
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
