package strategy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestParsePortRange(t *testing.T) {
	for in, want := range map[string]PortRange{"30000-32767": {30000, 2768}, "8080": {8080, 1}, " 1 - 2 ": {1, 2}} {
		got, err := ParsePortRange(in)
		if err != nil || got != want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a-b", "0-10", "10-5", "1-70000", "30000-"} {
		if _, err := ParsePortRange(bad); err == nil {
			t.Errorf("ParsePortRange(%q) accepted", bad)
		}
	}
	if s := DefaultServiceNodePortRange.String(); s != "30000-32767" {
		t.Errorf("default node port range = %s", s)
	}
}

func TestValidateServiceClusterIPRange(t *testing.T) {
	if err := ValidateServiceClusterIPRange(DefaultServiceClusterIPRange); err != nil {
		t.Fatalf("default range refused: %v", err)
	}
	// The default must stay clear of the pod range (ipamctl's --cluster-cidr).
	if pods := netip.MustParsePrefix("127.64.0.0/10"); pods.Overlaps(DefaultServiceClusterIPRange) {
		t.Fatalf("default service range %s overlaps the pod range %s", DefaultServiceClusterIPRange, pods)
	}
	for _, bad := range []string{"10.0.0.1/24", "10.0.0.0/31", "fd00::/64"} {
		if err := ValidateServiceClusterIPRange(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestPools(t *testing.T) {
	p := ServiceIPPool(netip.MustParsePrefix("10.0.0.0/29"))
	if p.Size() != 6 || p.At(0) != "10.0.0.1" || p.At(5) != "10.0.0.6" || p.Name() != "serviceips" {
		t.Fatalf("ip pool: size %d, first %s, last %s", p.Size(), p.At(0), p.At(5))
	}
	big := ServiceIPPool(DefaultServiceClusterIPRange)
	if big.Size() != 1<<20-2 || big.At(big.Size()-1) != "127.31.255.254" {
		t.Fatalf("default pool: size %d, last %s", big.Size(), big.At(big.Size()-1))
	}
	n := NodePortPool(PortRange{Base: 30000, Size: 3})
	if n.Size() != 3 || n.At(2) != "30002" || n.String() != "30000-30002" {
		t.Fatalf("port pool: size %d, last %s, %s", n.Size(), n.At(2), n)
	}
}

// seqPicker hands out a pool's values in order, or fails.
type seqPicker struct {
	next map[string]uint64
	err  error
}

func (s *seqPicker) Pick(p Pool) (string, error) {
	if s.err != nil {
		return "", s.err
	}
	i := s.next[p.Name()]
	s.next[p.Name()]++
	return p.At(i), nil
}

func svc(typ, ip string, nodePorts ...int32) *kplanev1.Object {
	spec := &kplanev1.ServiceSpec{Type: typ, ClusterIp: ip}
	for i, np := range nodePorts {
		spec.Ports = append(spec.Ports, &kplanev1.ServicePort{Name: string(rune('a' + i)), Port: int32(80 + i), NodePort: np})
	}
	return kplanev1.MustWrap(&kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "s"}, Spec: spec})
}

func TestServiceAllocate(t *testing.T) {
	a := For("Service").(Allocator)
	cfg := Config{ServiceClusterIPRange: netip.MustParsePrefix("10.0.0.0/24"), ServiceNodePortRange: PortRange{30000, 10}}

	obj := svc("NodePort", "", 0, 30005, 0)
	errs, err := a.Allocate(obj, nil, cfg, &seqPicker{next: map[string]uint64{}})
	if err != nil || len(errs) > 0 {
		t.Fatalf("allocate: %v %v", errs, err)
	}
	s := obj.GetService().Spec
	if s.ClusterIp != "10.0.0.1" || len(s.ClusterIps) != 1 || s.Ports[0].NodePort != 30000 || s.Ports[1].NodePort != 30005 || s.Ports[2].NodePort != 30001 {
		t.Fatalf("allocated %s %v ports %v", s.ClusterIp, s.ClusterIps, s.Ports)
	}
	claims := a.Claims(obj)
	if len(claims) != 4 || claims[0] != (Claim{Pool: "serviceips", Value: "10.0.0.1", Field: "spec.clusterIPs"}) ||
		claims[2].Field != "spec.ports[1].nodePort" || claims[2].Value != "30005" {
		t.Fatalf("claims = %v", claims)
	}

	// Out-of-range values name their field; values the stored object
	// already holds are not checked against a range that changed since.
	bad := svc("NodePort", "10.1.0.1", 40000, 30001, 30001)
	errs, _ = a.Allocate(bad, nil, cfg, &seqPicker{next: map[string]uint64{}})
	msg := errs.Error()
	for _, want := range []string{"spec.clusterIPs", "provided IP is not in the valid range. The range of valid IPs is 10.0.0.0/24",
		"spec.ports[0].nodePort", "The range of valid ports is 30000-30009", "spec.ports[2].nodePort: Duplicate value"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q lack %q", msg, want)
		}
	}
	kept := svc("NodePort", "10.1.0.1", 40000)
	if errs, _ := a.Allocate(kept, svc("NodePort", "10.1.0.1", 40000), cfg, &seqPicker{next: map[string]uint64{}}); len(errs) > 0 {
		t.Errorf("held values re-checked: %v", errs)
	}

	// A picker's failure is an error, not a field error.
	_, err = a.Allocate(svc("ClusterIP", ""), nil, cfg, &seqPicker{err: ErrPoolFull})
	if !errors.Is(err, ErrPoolFull) || !strings.Contains(err.Error(), "spec.clusterIPs") {
		t.Fatalf("full pool: %v", err)
	}

	// Headless and ExternalName services hold nothing.
	for _, o := range []*kplanev1.Object{svc("ClusterIP", "None"), svc("ExternalName", "")} {
		if errs, err := a.Allocate(o, nil, cfg, &seqPicker{err: ErrPoolFull}); err != nil || len(errs) > 0 || len(a.Claims(o)) > 0 {
			t.Errorf("%v: %v %v claims %v", o.GetService().Spec, errs, err, a.Claims(o))
		}
	}
}

func TestServiceKeepAllocated(t *testing.T) {
	a := For("Service").(Allocator)
	old := svc("NodePort", "10.0.0.5", 30001, 30002)

	n := svc("NodePort", "", 0, 0)
	a.KeepAllocated(n, old)
	if s := n.GetService().Spec; s.ClusterIp != "10.0.0.5" || s.Ports[0].NodePort != 30001 || s.Ports[1].NodePort != 30002 {
		t.Fatalf("kept %s %v", s.ClusterIp, s.Ports)
	}
	n = svc("ClusterIP", "10.0.0.5", 30001, 30002)
	a.KeepAllocated(n, old)
	if s := n.GetService().Spec; s.Ports[0].NodePort != 0 || s.Ports[1].NodePort != 0 {
		t.Fatalf("type ClusterIP kept node ports %v", s.Ports)
	}
	n = svc("ExternalName", "10.0.0.5")
	a.KeepAllocated(n, old)
	if s := n.GetService().Spec; s.ClusterIp != "" || len(s.ClusterIps) != 0 {
		t.Fatalf("ExternalName kept %s %v", s.ClusterIp, s.ClusterIps)
	}
}
