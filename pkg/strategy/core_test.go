package strategy

import (
	"slices"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestNamespace(t *testing.T) {
	ns := created(&kplanev1.Namespace{Metadata: meta("", "team-a")})
	if ns.Status.GetPhase() != "Active" {
		t.Errorf("phase = %q", ns.Status.GetPhase())
	}
	checkValidate(t, "Namespace", func() *kplanev1.Namespace { return &kplanev1.Namespace{Metadata: meta("", "team-a")} },
		[]tc[*kplanev1.Namespace]{
			{"subdomain is not a label", func(n *kplanev1.Namespace) { n.Metadata.Name = "team.a" },
				[]string{`metadata.name: Invalid value: "team.a": a lowercase RFC 1123 label...`}},
			{"too long", func(n *kplanev1.Namespace) { n.Metadata.Name = strings.Repeat("a", 64) },
				[]string{`metadata.name: Invalid value: "` + strings.Repeat("a", 64) + `": must be no more than 63 characters`}},
			{"cluster-scoped", func(n *kplanev1.Namespace) { n.Metadata.Namespace = "default" },
				[]string{"metadata.namespace: Forbidden: not allowed on this type"}},
			{"finalizer", func(n *kplanev1.Namespace) { n.Spec = &kplanev1.NamespaceSpec{Finalizers: []string{"a b"}} },
				[]string{`spec.finalizers[0]: Invalid value: "a b": ...`}},
			{"phase", func(n *kplanev1.Namespace) { n.Status = &kplanev1.NamespaceStatus{Phase: "Gone"} },
				[]string{`status.phase: Unsupported value: "Gone": supported values: "Active", "Terminating"`}},
		})
}

func validNode() *kplanev1.Node {
	return &kplanev1.Node{Metadata: meta("", "node-1"),
		Spec: &kplanev1.NodeSpec{PodCidr: "10.244.1.0/24", Taints: []*kplanev1.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"},
			{Key: "dedicated", Value: "db", Effect: "NoExecute"}}},
		Status: &kplanev1.NodeStatus{
			Capacity:    map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
			Allocatable: map[string]string{"cpu": "3800m", "memory": "7Gi", "pods": "110"},
			Conditions:  []*kplanev1.Condition{{Type: "Ready", Status: "True"}},
			Addresses:   []*kplanev1.NodeAddress{{Type: "InternalIP", Address: "10.0.0.1"}},
		}}
}

func TestNode(t *testing.T) {
	checkValidate(t, "Node", validNode, []tc[*kplanev1.Node]{
		{"namespace", func(n *kplanev1.Node) { n.Metadata.Namespace = "x" }, []string{"metadata.namespace: Forbidden: not allowed on this type"}},
		{"taint effect", func(n *kplanev1.Node) { n.Spec.Taints[0].Effect = "NoRun" },
			[]string{`spec.taints[0].effect: Unsupported value: "NoRun": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`}},
		{"taint effect missing", func(n *kplanev1.Node) { n.Spec.Taints[0].Effect = "" }, []string{"spec.taints[0].effect: Required value"}},
		{"taint key missing", func(n *kplanev1.Node) { n.Spec.Taints[0].Key = "" }, []string{"spec.taints[0].key: Required value"}},
		{"taint value", func(n *kplanev1.Node) { n.Spec.Taints[0].Value = "a b" }, []string{`spec.taints[0].value: Invalid value: "a b": ...`}},
		{"duplicate taint", func(n *kplanev1.Node) { n.Spec.Taints[1].Effect = "NoSchedule" },
			[]string{`spec.taints[1]: Duplicate value: "dedicated:NoSchedule"`}},
		{"capacity quantity", func(n *kplanev1.Node) { n.Status.Capacity["memory"] = "8GB" },
			[]string{`status.capacity["memory"]: Invalid value: "8GB": unable to parse quantity's suffix`}},
		{"negative capacity", func(n *kplanev1.Node) { n.Status.Allocatable["cpu"] = "-1" },
			[]string{`status.allocatable["cpu"]: Invalid value: "-1": must be greater than or equal to 0`}},
		{"capacity name", func(n *kplanev1.Node) { n.Status.Capacity["gpus"] = "1" },
			[]string{`status.capacity: Invalid value: "gpus": must be a standard resource name...`}},
		{"extended capacity", func(n *kplanev1.Node) { n.Status.Capacity["example.com/gpu"] = "2" }, nil},
		{"pod CIDR", func(n *kplanev1.Node) { n.Spec.PodCidr = "10.244.1.0" },
			[]string{`spec.podCIDR: Invalid value: "10.244.1.0": must be a valid CIDR value (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{"pod CIDRs differ", func(n *kplanev1.Node) { n.Spec.PodCidrs = []string{"10.244.9.0/24"} },
			[]string{"spec.podCIDRs[0]: Invalid value: \"10.244.9.0/24\": must match `spec.podCIDR`"}},
		{"pod CIDRs", func(n *kplanev1.Node) { n.Spec.PodCidrs = []string{"10.244.1.0/24", "fd00::/64"} }, nil},
		{"too many pod CIDRs", func(n *kplanev1.Node) { n.Spec.PodCidrs = []string{"10.244.1.0/24", "fd00::/64", "fd01::/64"} },
			[]string{`spec.podCIDRs: Invalid value: "10.244.1.0/24,fd00::/64,fd01::/64": may hold at most two entries, one per IP family`}},
		{"condition status", func(n *kplanev1.Node) { n.Status.Conditions[0].Status = "Yes" },
			[]string{`status.conditions[0].status: Unsupported value: "Yes": supported values: "True", "False", "Unknown"`}},
		{"address type", func(n *kplanev1.Node) { n.Status.Addresses[0].Type = "IP" },
			[]string{`status.addresses[0].type: Unsupported value: "IP": ...`}},
	})
	checkUpdate(t, "Node", validNode, []utc[*kplanev1.Node]{
		{"cordon", func(n *kplanev1.Node) { n.Spec.Unschedulable = true }, nil},
		{"taint", func(n *kplanev1.Node) { n.Spec.Taints = nil }, nil},
		{"pod CIDR", func(n *kplanev1.Node) { n.Spec.PodCidr = "10.244.2.0/24" },
			[]string{`spec.podCIDR: Invalid value: "10.244.2.0/24": field is immutable once set`}},
		{"pod CIDRs", func(n *kplanev1.Node) { n.Spec.PodCidr, n.Spec.PodCidrs = "10.244.2.0/24", []string{"10.244.2.0/24"} },
			[]string{`spec.podCIDR: Invalid value: "10.244.2.0/24": field is immutable once set`,
				`spec.podCIDRs: Invalid value: "10.244.2.0/24": field is immutable once set`}},
	})
	// The two fields follow each other.
	n := &kplanev1.Node{Spec: &kplanev1.NodeSpec{PodCidr: "10.244.3.0/24"}}
	defaultNode(n)
	if !slices.Equal(n.Spec.PodCidrs, []string{"10.244.3.0/24"}) {
		t.Errorf("podCIDRs defaulted to %v", n.Spec.PodCidrs)
	}
	n = &kplanev1.Node{Spec: &kplanev1.NodeSpec{PodCidrs: []string{"10.244.4.0/24"}}}
	defaultNode(n)
	if n.Spec.PodCidr != "10.244.4.0/24" {
		t.Errorf("podCIDR defaulted to %q", n.Spec.PodCidr)
	}
}

func validService() *kplanev1.Service {
	return &kplanev1.Service{Metadata: meta("default", "web"), Spec: &kplanev1.ServiceSpec{
		Selector: map[string]string{"app": "web"},
		Ports:    []*kplanev1.ServicePort{{Name: "http", Port: 80, TargetPort: kplanev1.IntOrStringFromInt32(8080)}, {Name: "https", Port: 443}},
	}}
}

func TestServiceDefaults(t *testing.T) {
	svc := defaulted(validService())
	s := svc.Spec
	if s.Type != "ClusterIP" || s.SessionAffinity != "None" || s.Ports[0].Protocol != "TCP" ||
		s.Ports[0].TargetPort.Text() != "8080" || s.Ports[1].TargetPort.IsString() || s.Ports[1].TargetPort.GetIntVal() != 443 {
		t.Errorf("defaults: %v", s)
	}
}

// A headless service (clusterIP: None, as Kubernetes' docs write it) keeps
// its None through defaulting.
func TestHeadlessServiceKeepsNone(t *testing.T) {
	svc := validService()
	svc.Spec.ClusterIp = "None"
	if got := defaulted(svc).Spec.ClusterIp; got != "None" {
		t.Errorf("clusterIP after defaulting = %q, want None", got)
	}
}

func TestService(t *testing.T) {
	checkValidate(t, "Service", validService, []tc[*kplanev1.Service]{
		{"name must be a DNS-1035 label", func(s *kplanev1.Service) { s.Metadata.Name = "1web" },
			[]string{`metadata.name: Invalid value: "1web": a DNS-1035 label...`}},
		{"port zero", func(s *kplanev1.Service) { s.Spec.Ports[0].Port = 0 },
			[]string{"spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"port too big", func(s *kplanev1.Service) { s.Spec.Ports[1].Port = 70000 },
			[]string{"spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
				"spec.ports[1].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive"}},
		{"target port", func(s *kplanev1.Service) { s.Spec.Ports[0].TargetPort = kplanev1.IntOrStringFromInt32(-1) },
			[]string{"spec.ports[0].targetPort: Invalid value: -1: must be between 1 and 65535, inclusive"}},
		{"target port by name", func(s *kplanev1.Service) { s.Spec.Ports[0].TargetPort = kplanev1.IntOrStringFromString("web-http") }, nil},
		{"target port name", func(s *kplanev1.Service) { s.Spec.Ports[0].TargetPort = kplanev1.IntOrStringFromString("HTTP") },
			[]string{`spec.ports[0].targetPort: Invalid value: "HTTP": a port name must consist of lower case alphanumeric characters or '-', contain at least one letter, and must not start or end with '-' or contain '--' (e.g. 'http' or 'web-80')`}},
		{"target port name of digits", func(s *kplanev1.Service) { s.Spec.Ports[0].TargetPort = kplanev1.IntOrStringFromString("8080") },
			[]string{`spec.ports[0].targetPort: Invalid value: "8080": a port name must consist of lower case alphanumeric characters or '-', contain at least one letter, and must not start or end with '-' or contain '--' (e.g. 'http' or 'web-80')`}},
		{"unnamed port among several", func(s *kplanev1.Service) { s.Spec.Ports[1].Name = "" },
			[]string{"spec.ports[1].name: Required value: when a service has more than one port, every port must be named"}},
		{"single unnamed port", func(s *kplanev1.Service) { s.Spec.Ports = s.Spec.Ports[:1]; s.Spec.Ports[0].Name = "" }, nil},
		{"duplicate port name", func(s *kplanev1.Service) { s.Spec.Ports[1].Name = "http" },
			[]string{`spec.ports[1].name: Duplicate value: "http"`}},
		{"duplicate port", func(s *kplanev1.Service) { s.Spec.Ports[1].Port = 80 },
			[]string{`spec.ports[1]: Duplicate value: "80/TCP"`}},
		{"same port other protocol", func(s *kplanev1.Service) { s.Spec.Ports[1].Port = 80; s.Spec.Ports[1].Protocol = "UDP" }, nil},
		{"protocol", func(s *kplanev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" },
			[]string{`spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"`}},
		{"port name format", func(s *kplanev1.Service) { s.Spec.Ports[0].Name = "HTTP" },
			[]string{`spec.ports[0].name: Invalid value: "HTTP": ...`}},
		{"no ports", func(s *kplanev1.Service) { s.Spec.Ports = nil }, []string{"spec.ports: Required value"}},
		{"headless without ports", func(s *kplanev1.Service) { s.Spec.Ports = nil; s.Spec.ClusterIp = "None" }, nil},
		{"headless with ports", func(s *kplanev1.Service) { s.Spec.ClusterIp = "None" }, nil},
		{"headless without a type", func(s *kplanev1.Service) { s.Spec.ClusterIp = "None"; s.Spec.Type = "" }, nil},
		{"type", func(s *kplanev1.Service) { s.Spec.Type = "Internal" },
			[]string{`spec.type: Unsupported value: "Internal": supported values: "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"`}},
		{"external name required", func(s *kplanev1.Service) { s.Spec.Type = "ExternalName"; s.Spec.Ports = nil },
			[]string{"spec.externalName: Required value"}},
		{"external name", func(s *kplanev1.Service) { s.Spec.Type = "ExternalName"; s.Spec.ExternalName = "db.example.com" }, nil},
		{"node port on ClusterIP", func(s *kplanev1.Service) { s.Spec.Ports[0].NodePort = 30080 },
			[]string{"spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"}},
		{"node port", func(s *kplanev1.Service) { s.Spec.Type = "NodePort"; s.Spec.Ports[0].NodePort = 30080 }, nil},
		{"cluster IP", func(s *kplanev1.Service) { s.Spec.ClusterIp = "10.0.0" },
			[]string{`spec.clusterIP: Invalid value: "10.0.0": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"headless NodePort", func(s *kplanev1.Service) { s.Spec.ClusterIp = "None"; s.Spec.Type = "NodePort" },
			[]string{`spec.clusterIP: Invalid value: "None": may only be 'None' for type 'ClusterIP'`}},
		{"session affinity", func(s *kplanev1.Service) { s.Spec.SessionAffinity = "Sticky" },
			[]string{`spec.sessionAffinity: Unsupported value: "Sticky": supported values: "None", "ClientIP"`}},
		{"selector", func(s *kplanev1.Service) { s.Spec.Selector["app"] = "a b" }, []string{`spec.selector["app"]: Invalid value: "a b": ...`}},
	})
	withIP := func() *kplanev1.Service { s := validService(); s.Spec.ClusterIp = "10.96.0.10"; return s }
	checkUpdate(t, "Service", validService, []utc[*kplanev1.Service]{
		{"allocate IP", func(s *kplanev1.Service) { s.Spec.ClusterIp = "10.96.0.10" }, nil},
		{"ports", func(s *kplanev1.Service) { s.Spec.Ports[0].Port = 81 }, nil},
	})
	checkUpdate(t, "Service", withIP, []utc[*kplanev1.Service]{
		{"change IP", func(s *kplanev1.Service) { s.Spec.ClusterIp = "10.96.0.11" },
			[]string{`spec.clusterIP: Invalid value: "10.96.0.11": field is immutable`}},
		{"to ExternalName", func(s *kplanev1.Service) {
			s.Spec.ClusterIp, s.Spec.Type, s.Spec.ExternalName = "", "ExternalName", "db.example.com"
		}, nil},
	})
}

func validEndpoints() *kplanev1.Endpoints {
	return &kplanev1.Endpoints{Metadata: meta("default", "web"), Subsets: []*kplanev1.EndpointSubset{{
		Addresses:         []*kplanev1.EndpointAddress{{Ip: "10.244.1.5", NodeName: "node-1", TargetRef: &kplanev1.ObjectReference{Kind: "Pod", Name: "web-1"}}},
		NotReadyAddresses: []*kplanev1.EndpointAddress{{Ip: "10.244.1.6"}},
		Ports:             []*kplanev1.EndpointPort{{Name: "http", Port: 8080}, {Name: "metrics", Port: 9090}},
	}}}
}

func TestEndpoints(t *testing.T) {
	if ep := defaulted(validEndpoints()); ep.Subsets[0].Ports[0].Protocol != "TCP" {
		t.Error("endpoint port protocol not defaulted")
	}
	checkValidate(t, "Endpoints", validEndpoints, []tc[*kplanev1.Endpoints]{
		{"empty is fine", func(e *kplanev1.Endpoints) { e.Subsets = nil }, nil},
		{"no addresses", func(e *kplanev1.Endpoints) { e.Subsets[0].Addresses, e.Subsets[0].NotReadyAddresses = nil, nil },
			[]string{"subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`"}},
		{"ip missing", func(e *kplanev1.Endpoints) { e.Subsets[0].Addresses[0].Ip = "" }, []string{"subsets[0].addresses[0].ip: Required value"}},
		{"bad ip", func(e *kplanev1.Endpoints) { e.Subsets[0].NotReadyAddresses[0].Ip = "pod-1" },
			[]string{`subsets[0].notReadyAddresses[0].ip: Invalid value: "pod-1": must be a valid IP address...`}},
		{"no ports", func(e *kplanev1.Endpoints) { e.Subsets[0].Ports = nil }, []string{"subsets[0].ports: Required value"}},
		{"port", func(e *kplanev1.Endpoints) { e.Subsets[0].Ports[0].Port = 0 },
			[]string{"subsets[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"unnamed", func(e *kplanev1.Endpoints) { e.Subsets[0].Ports[1].Name = "" },
			[]string{"subsets[0].ports[1].name: Required value: when a subset has more than one port, every port must be named"}},
		{"duplicate name", func(e *kplanev1.Endpoints) { e.Subsets[0].Ports[1].Name = "http" },
			[]string{`subsets[0].ports[1].name: Duplicate value: "http"`}},
		{"protocol", func(e *kplanev1.Endpoints) { e.Subsets[0].Ports[1].Protocol = "QUIC" },
			[]string{`subsets[0].ports[1].protocol: Unsupported value: "QUIC": supported values: "TCP", "UDP", "SCTP"`}},
	})
}

func TestServiceAccount(t *testing.T) {
	checkValidate(t, "ServiceAccount", func() *kplanev1.ServiceAccount {
		return &kplanev1.ServiceAccount{Metadata: meta("default", "default"),
			Secrets: []*kplanev1.ObjectReference{{Name: "default-token"}}}
	}, []tc[*kplanev1.ServiceAccount]{
		{"secret name", func(s *kplanev1.ServiceAccount) { s.Secrets[0].Name = "" }, []string{"secrets[0].name: Required value"}},
		{"pull secret name", func(s *kplanev1.ServiceAccount) {
			s.ImagePullSecrets = []*kplanev1.LocalObjectReference{{Name: "A"}}
		}, []string{`imagePullSecrets[0].name: Invalid value: "A": ...`}},
	})
}

func validSecret() *kplanev1.Secret {
	return &kplanev1.Secret{Metadata: meta("default", "creds"), Data: map[string][]byte{"user": []byte("admin")},
		StringData: map[string]string{"password": "hunter2"}}
}

func TestSecretDefaults(t *testing.T) {
	s := defaulted(&kplanev1.Secret{Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")},
		StringData: map[string]string{"b": "two", "c": "3"}})
	if s.Type != "Opaque" || s.StringData != nil || string(s.Data["a"]) != "1" || string(s.Data["b"]) != "two" || string(s.Data["c"]) != "3" {
		t.Errorf("defaults: type=%q data=%q stringData=%v", s.Type, s.Data, s.StringData)
	}
	s = defaulted(&kplanev1.Secret{StringData: map[string]string{"c": "3"}})
	if string(s.Data["c"]) != "3" {
		t.Errorf("stringData into nil data: %q", s.Data)
	}
}

func TestSecret(t *testing.T) {
	checkValidate(t, "Secret", validSecret, []tc[*kplanev1.Secret]{
		{"key", func(s *kplanev1.Secret) { s.Data["a/b"] = nil }, []string{`data: Invalid value: "a/b": a valid config key...`}},
		{"string data key", func(s *kplanev1.Secret) { s.StringData[".."] = "x" }, []string{`data: Invalid value: "..": ...`}},
		{"too large", func(s *kplanev1.Secret) { s.Data["big"] = make([]byte, 1<<20) },
			[]string{"data: Too long: may not be more than 1048576 bytes"}},
		{"tls", func(s *kplanev1.Secret) { s.Type = "kubernetes.io/tls"; s.Data["tls.crt"] = []byte("c") },
			[]string{`data["tls.key"]: Required value`}},
		{"service account token", func(s *kplanev1.Secret) { s.Type = "kubernetes.io/service-account-token" },
			[]string{`metadata.annotations["kubernetes.io/service-account.name"]: Required value`}},
		{"docker config json", func(s *kplanev1.Secret) {
			s.Type = "kubernetes.io/dockerconfigjson"
			s.Data[".dockerconfigjson"] = []byte("{not json")
		}, []string{`data[".dockerconfigjson"]: Invalid value: "<secret contents redacted>": must be valid JSON`}},
		{"basic auth", func(s *kplanev1.Secret) { s.Type = "kubernetes.io/basic-auth" }, nil},
		{"basic auth without keys", func(s *kplanev1.Secret) {
			s.Type, s.Data, s.StringData = "kubernetes.io/basic-auth", nil, nil
		}, []string{"data: Required value: must contain `username` or `password`"}},
		{"ssh", func(s *kplanev1.Secret) { s.Type = "kubernetes.io/ssh-auth" }, []string{`data["ssh-privatekey"]: Required value`}},
	})
	immutable := func() *kplanev1.Secret { s := validSecret(); s.Immutable = ptr(true); return s }
	checkUpdate(t, "Secret", validSecret, []utc[*kplanev1.Secret]{
		{"data", func(s *kplanev1.Secret) { s.Data["user"] = []byte("root") }, nil},
		{"string data", func(s *kplanev1.Secret) { s.StringData = map[string]string{"user": "root"} }, nil},
		{"make immutable", func(s *kplanev1.Secret) { s.Immutable = ptr(true) }, nil},
		{"type", func(s *kplanev1.Secret) { s.Type = "kubernetes.io/basic-auth" },
			[]string{`type: Invalid value: "kubernetes.io/basic-auth": field is immutable`}},
	})
	checkUpdate(t, "Secret", immutable, []utc[*kplanev1.Secret]{
		{"labels", func(s *kplanev1.Secret) { s.Metadata.Labels = map[string]string{"a": "b"} }, nil},
		{"data", func(s *kplanev1.Secret) { s.Data["user"] = []byte("root") },
			[]string{"data: Forbidden: field is immutable when `immutable` is set"}},
		{"string data", func(s *kplanev1.Secret) { s.StringData = map[string]string{"new": "x"} },
			[]string{"data: Forbidden: field is immutable when `immutable` is set"}},
		{"unset immutable", func(s *kplanev1.Secret) { s.Immutable = ptr(false) },
			[]string{"immutable: Forbidden: field is immutable when `immutable` is set"}},
	})
}

func validEvent() *kplanev1.Event {
	return &kplanev1.Event{Metadata: meta("default", "web-1.17a"), Reason: "Scheduled", Message: "assigned to node-1",
		InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-1"}}
}

func TestEvent(t *testing.T) {
	e := defaulted(validEvent())
	if e.Type != "Normal" || e.Count != 1 {
		t.Errorf("defaults: type=%q count=%d", e.Type, e.Count)
	}
	checkValidate(t, "Event", validEvent, []tc[*kplanev1.Event]{
		{"kind", func(e *kplanev1.Event) { e.InvolvedObject.Kind = "" }, []string{"involvedObject.kind: Required value"}},
		{"name", func(e *kplanev1.Event) { e.InvolvedObject = nil },
			[]string{"involvedObject.kind: Required value", "involvedObject.name: Required value"}},
		{"namespace", func(e *kplanev1.Event) { e.InvolvedObject.Namespace = "other" },
			[]string{`involvedObject.namespace: Invalid value: "other": does not match event.namespace`}},
		{"cluster-scoped object", func(e *kplanev1.Event) { e.InvolvedObject = &kplanev1.ObjectReference{Kind: "Node", Name: "n1"} }, nil},
		{"type", func(e *kplanev1.Event) { e.Type = "Error" },
			[]string{`type: Unsupported value: "Error": supported values: "Normal", "Warning"`}},
		{"count", func(e *kplanev1.Event) { e.Count = -2 }, []string{"count: must be greater than or equal to 0"}},
	})
}

func TestLease(t *testing.T) {
	checkValidate(t, "Lease", func() *kplanev1.Lease {
		return &kplanev1.Lease{Metadata: meta("kplane-node-lease", "node-1"),
			Spec: &kplanev1.LeaseSpec{HolderIdentity: "node-1", LeaseDurationSeconds: 40, LeaseTransitions: 2}}
	}, []tc[*kplanev1.Lease]{
		{"released", func(l *kplanev1.Lease) { l.Spec.HolderIdentity = ""; l.Spec.LeaseDurationSeconds = 0 }, nil},
		{"no spec", func(l *kplanev1.Lease) { l.Spec = nil }, nil},
		{"negative duration", func(l *kplanev1.Lease) { l.Spec.HolderIdentity = ""; l.Spec.LeaseDurationSeconds = -1 },
			[]string{"spec.leaseDurationSeconds: must be greater than or equal to 0"}},
		{"held without duration", func(l *kplanev1.Lease) { l.Spec.LeaseDurationSeconds = 0 },
			[]string{"spec.leaseDurationSeconds: must be greater than 0 when holderIdentity is set"}},
		{"transitions", func(l *kplanev1.Lease) { l.Spec.LeaseTransitions = -1 },
			[]string{"spec.leaseTransitions: must be greater than or equal to 0"}},
		{"namespace", func(l *kplanev1.Lease) { l.Metadata.Namespace = "" }, []string{"metadata.namespace: Required value"}},
	})
}
