package proxier

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func service(spec *kplanev1.ServiceSpec) *kplanev1.Service {
	return &kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: spec}
}

func subset(ports []*kplanev1.EndpointPort, ready []string, notReady ...string) *kplanev1.EndpointSubset {
	ss := &kplanev1.EndpointSubset{Ports: ports}
	for _, ip := range ready {
		ss.Addresses = append(ss.Addresses, &kplanev1.EndpointAddress{Ip: ip})
	}
	for _, ip := range notReady {
		ss.NotReadyAddresses = append(ss.NotReadyAddresses, &kplanev1.EndpointAddress{Ip: ip})
	}
	return ss
}

func TestPlan(t *testing.T) {
	tcp := kplanev1.ProtocolTCP
	twoPorts := []*kplanev1.ServicePort{
		{Name: "http", Protocol: tcp, Port: 80, TargetPort: kplanev1.IntOrStringFromInt32(8080)},
		{Name: "metrics", Protocol: tcp, Port: 9090, TargetPort: kplanev1.IntOrStringFromInt32(9090)},
	}
	eps := &kplanev1.Endpoints{Subsets: []*kplanev1.EndpointSubset{
		subset([]*kplanev1.EndpointPort{{Name: "http", Port: 8080, Protocol: tcp}, {Name: "metrics", Port: 9091}},
			[]string{"127.64.0.3", "127.64.0.2", "127.64.0.3"}, "127.64.0.9"),
		subset([]*kplanev1.EndpointPort{{Name: "http", Port: 8081, Protocol: tcp}}, []string{"127.64.1.2"}),
		// No port of the service's names: contributes nothing.
		subset([]*kplanev1.EndpointPort{{Name: "other", Port: 1}}, []string{"127.64.2.2"}),
	}}
	cases := []struct {
		name    string
		svc     *kplanev1.Service
		ep      *kplanev1.Endpoints
		nodeIP  netip.Addr
		want    []PortPlan
		ignored int
	}{
		{
			name: "named ports match the Endpoints ports of the same name; not-ready addresses are left out",
			svc:  service(&kplanev1.ServiceSpec{ClusterIp: "127.16.0.10", Ports: twoPorts}),
			ep:   eps,
			want: []PortPlan{
				{Name: "ns/web:http", Listen: []string{"127.16.0.10:80"}, Endpoints: []string{"127.64.0.2:8080", "127.64.0.3:8080", "127.64.1.2:8081"}},
				{Name: "ns/web:metrics", Listen: []string{"127.16.0.10:9090"}, Endpoints: []string{"127.64.0.2:9091", "127.64.0.3:9091"}},
			},
		},
		{
			name: "an unnamed port matches the unnamed Endpoints port",
			svc:  service(&kplanev1.ServiceSpec{ClusterIp: "127.16.0.10", Ports: []*kplanev1.ServicePort{{Port: 80, TargetPort: kplanev1.IntOrStringFromInt32(8080)}}}),
			ep: &kplanev1.Endpoints{Subsets: []*kplanev1.EndpointSubset{
				subset([]*kplanev1.EndpointPort{{Port: 8080}}, []string{"127.64.0.2"}),
			}},
			want: []PortPlan{{Name: "ns/web", Listen: []string{"127.16.0.10:80"}, Endpoints: []string{"127.64.0.2:8080"}}},
		},
		{
			name: "no Endpoints yet: listen, no endpoints",
			svc:  service(&kplanev1.ServiceSpec{ClusterIp: "127.16.0.10", Ports: twoPorts[:1]}),
			want: []PortPlan{{Name: "ns/web:http", Listen: []string{"127.16.0.10:80"}}},
		},
		{
			name: "ClientIP affinity has Kubernetes' default timeout",
			svc:  service(&kplanev1.ServiceSpec{ClusterIp: "127.16.0.10", SessionAffinity: kplanev1.ServiceAffinityClientIP, Ports: twoPorts[:1]}),
			want: []PortPlan{{Name: "ns/web:http", Listen: []string{"127.16.0.10:80"}, AffinityTimeout: 10800 * time.Second}},
		},
		{
			name:   "NodePort listens on the node IP too",
			svc:    service(&kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeNodePort, ClusterIp: "127.16.0.10", Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}}),
			nodeIP: netip.MustParseAddr("10.213.0.11"),
			want:   []PortPlan{{Name: "ns/web:http", Listen: []string{"127.16.0.10:80", "10.213.0.11:30080"}}},
		},
		{
			name: "NodePort without a node IP listens on every address",
			svc:  service(&kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeNodePort, ClusterIp: "127.16.0.10", Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}}),
			want: []PortPlan{{Name: "ns/web:http", Listen: []string{"127.16.0.10:80", ":30080"}}},
		},
		{
			name: "a nodePort on a ClusterIP service is not listened on",
			svc:  service(&kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeClusterIP, ClusterIp: "127.16.0.10", Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}}),
			want: []PortPlan{{Name: "ns/web:http", Listen: []string{"127.16.0.10:80"}}},
		},
		{
			name: "every cluster IP, once",
			svc:  service(&kplanev1.ServiceSpec{ClusterIp: "127.16.0.10", ClusterIps: []string{"127.16.0.10", "::1", "127.16.0.10"}, Ports: twoPorts[:1]}),
			want: []PortPlan{{Name: "ns/web:http", Listen: []string{"127.16.0.10:80", "[::1]:80"}}},
		},
		{
			name: "UDP ports match UDP Endpoints ports; SCTP ports are not proxied",
			svc: service(&kplanev1.ServiceSpec{ClusterIp: "127.16.0.10", Ports: []*kplanev1.ServicePort{
				{Name: "dns", Protocol: kplanev1.ProtocolUDP, Port: 53},
				{Name: "dns-tcp", Port: 53},
				{Name: "sig", Protocol: kplanev1.ProtocolSCTP, Port: 99},
			}}),
			ep: &kplanev1.Endpoints{Subsets: []*kplanev1.EndpointSubset{
				subset([]*kplanev1.EndpointPort{{Name: "dns", Port: 5353, Protocol: kplanev1.ProtocolUDP}, {Name: "dns-tcp", Port: 5354}}, []string{"127.64.0.2"}),
				// A TCP port named like the UDP one does not serve it.
				subset([]*kplanev1.EndpointPort{{Name: "dns", Port: 5355}}, []string{"127.64.0.3"}),
			}},
			want: []PortPlan{
				{Protocol: kplanev1.ProtocolUDP, Name: "ns/web:dns", Listen: []string{"127.16.0.10:53"}, Endpoints: []string{"127.64.0.2:5353"}},
				{Name: "ns/web:dns-tcp", Listen: []string{"127.16.0.10:53"}, Endpoints: []string{"127.64.0.2:5354"}},
			},
			ignored: 1,
		},
		{name: "headless", svc: service(&kplanev1.ServiceSpec{ClusterIp: kplanev1.ClusterIPNone, Ports: twoPorts}), ep: eps},
		{name: "no cluster IP yet", svc: service(&kplanev1.ServiceSpec{Ports: twoPorts}), ep: eps},
		{name: "ExternalName", svc: service(&kplanev1.ServiceSpec{Type: kplanev1.ServiceTypeExternalName, ExternalName: "example.com", ClusterIp: "127.16.0.10"})},
		{name: "no spec", svc: service(nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.want {
				if tc.want[i].Protocol == "" {
					tc.want[i].Protocol = kplanev1.ProtocolTCP
				}
			}
			got, ignored := Plan(tc.svc, tc.ep, tc.nodeIP)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Plan =\n%+v\nwant\n%+v", got, tc.want)
			}
			if len(ignored) != tc.ignored {
				t.Errorf("ignored = %q, want %d entries", ignored, tc.ignored)
			}
		})
	}
}
