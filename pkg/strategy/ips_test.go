package strategy

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Either the singular field or its plural, written alone, fills the other.
func TestSingularAndPluralIPsKeptInStep(t *testing.T) {
	p := validPod()
	p.Status = &kplanev1.PodStatus{PodIp: "10.0.0.5", HostIps: []*kplanev1.HostIP{{Ip: "192.168.1.2"}}}
	st := defaulted(p).Status
	if got := ipStrings(st.PodIps); !slices.Equal(got, []string{"10.0.0.5"}) || st.HostIp != "192.168.1.2" {
		t.Errorf("pod status after defaulting: podIPs %v, hostIP %q", got, st.HostIp)
	}

	svc := validService()
	svc.Spec.ClusterIp = "None"
	if got := defaulted(svc).Spec.ClusterIps; !slices.Equal(got, []string{"None"}) {
		t.Errorf("headless service: clusterIPs %v, want [None]", got)
	}
	svc = validService()
	svc.Spec.ClusterIps = []string{"10.96.0.10", "fd00::10"}
	if got := defaulted(svc).Spec.ClusterIp; got != "10.96.0.10" {
		t.Errorf("clusterIP from clusterIPs = %q", got)
	}

	n := defaulted(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n"}, Spec: &kplanev1.NodeSpec{PodCidr: "10.244.1.0/24"}})
	if !slices.Equal(n.Spec.PodCidrs, []string{"10.244.1.0/24"}) {
		t.Errorf("podCIDRs = %v", n.Spec.PodCidrs)
	}
}

func TestPluralIPsValidated(t *testing.T) {
	checkValidate(t, "Pod", validPod, []tc[*kplanev1.Pod]{
		{"podIPs start with podIP", func(p *kplanev1.Pod) {
			p.Status = &kplanev1.PodStatus{PodIp: "10.0.0.5", PodIps: []*kplanev1.PodIP{{Ip: "10.0.0.6"}}}
		}, []string{"status.podIPs[0]: Invalid value: \"10.0.0.6\": must match `status.podIP`"}},
		{"dual stack", func(p *kplanev1.Pod) {
			p.Status = &kplanev1.PodStatus{PodIp: "10.0.0.5", PodIps: []*kplanev1.PodIP{{Ip: "10.0.0.5"}, {Ip: "fd00::5"}}}
		}, nil},
		{"three pod IPs", func(p *kplanev1.Pod) {
			p.Status = &kplanev1.PodStatus{PodIps: []*kplanev1.PodIP{{Ip: "10.0.0.5"}, {Ip: "fd00::5"}, {Ip: "10.0.0.7"}}}
		}, []string{`status.podIPs: Invalid value: "10.0.0.5,fd00::5,10.0.0.7": may hold at most two entries, one per IP family`}},
		{"bad host IP", func(p *kplanev1.Pod) {
			p.Status = &kplanev1.PodStatus{HostIp: "192.168.1.2", HostIps: []*kplanev1.HostIP{{Ip: "192.168.1.2"}, {Ip: "node-1"}}}
		}, []string{`status.hostIPs[1]: Invalid value: "node-1": must be a valid IP address...`}},
	})
	checkValidate(t, "Service", validService, []tc[*kplanev1.Service]{
		{"None with another IP", func(s *kplanev1.Service) { s.Spec.ClusterIps = []string{"None", "10.96.0.10"} },
			[]string{`spec.clusterIPs: Invalid value: "None,10.96.0.10": 'None' must be the only entry`}},
		{"repeated cluster IP", func(s *kplanev1.Service) { s.Spec.ClusterIps = []string{"10.96.0.10", "10.96.0.10"} },
			[]string{`spec.clusterIPs[1]: Duplicate value: "10.96.0.10"`}},
		{"cluster IPs on ExternalName", func(s *kplanev1.Service) {
			s.Spec.Type, s.Spec.ExternalName, s.Spec.Ports = "ExternalName", "db.example.com", nil
			s.Spec.ClusterIp, s.Spec.ClusterIps = "10.96.0.10", []string{"10.96.0.10"}
		}, []string{"spec.clusterIP: Forbidden: may not be set for type 'ExternalName'",
			"spec.clusterIPs: Forbidden: may not be set for type 'ExternalName'"}},
	})
}

func TestPodCIDRsImmutableOnceSet(t *testing.T) {
	s := For("Node")
	old := kplanev1.MustWrap(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n"}, Spec: &kplanev1.NodeSpec{PodCidr: "10.244.1.0/24"}})
	s.Default(old)
	obj := proto.Clone(old).(*kplanev1.Object)
	obj.GetNode().Spec.PodCidrs = append(obj.GetNode().Spec.PodCidrs, "fd00:1::/64")
	s.Default(obj)
	assertErrors(t, s.ValidateUpdate(obj, old), []string{`spec.podCIDRs: Invalid value: "10.244.1.0/24,fd00:1::/64": field is immutable once set`})
}
