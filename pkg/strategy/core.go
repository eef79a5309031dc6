package strategy

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// ---- Namespace

// prepareNamespace marks a new namespace Active (deletion moves it to
// Terminating).
func prepareNamespace(ns *kplanev1.Namespace) {
	if ns.Status == nil {
		ns.Status = &kplanev1.NamespaceStatus{}
	}
	if ns.Status.Phase == "" {
		ns.Status.Phase = "Active"
	}
}

func validateNamespace(ns *kplanev1.Namespace) validation.ErrorList {
	var errs validation.ErrorList
	for i, f := range ns.GetSpec().GetFinalizers() {
		errs.InvalidMsgs(index("spec.finalizers", i), f, validation.IsQualifiedName(f))
	}
	if ph := ns.GetStatus().GetPhase(); ph != "" {
		oneOf(&errs, "status.phase", ph, "Active", "Terminating")
	}
	return errs
}

// ---- Node

var nodeAddressTypes = []string{"InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS"}

func defaultNode(n *kplanev1.Node) {
	if s := n.GetSpec(); s != nil {
		syncFirst(&s.PodCidr, &s.PodCidrs)
	}
}

func validateNode(n *kplanev1.Node) validation.ErrorList {
	var errs validation.ErrorList
	s := n.GetSpec()
	if s.GetPodCidr() != "" {
		errs.InvalidMsgs("spec.podCIDR", s.GetPodCidr(), validation.IsValidCIDR(s.GetPodCidr()))
	}
	validateFirst(&errs, "spec.podCIDR", "spec.podCIDRs", s.GetPodCidr(), s.GetPodCidrs(), validation.IsValidCIDR)
	seen := map[string]bool{}
	for i, t := range s.GetTaints() {
		p := index("spec.taints", i)
		validateName(&errs, child(p, "key"), t.GetKey(), true, validation.IsQualifiedName)
		errs.InvalidMsgs(child(p, "value"), t.GetValue(), validation.IsValidLabelValue(t.GetValue()))
		if t.GetEffect() == "" {
			errs.Required(child(p, "effect"), "")
		} else {
			oneOf(&errs, child(p, "effect"), t.GetEffect(), taintEffects...)
		}
		// A taint is identified by key and effect; two with the same pair
		// would make tolerating one ambiguous.
		id := t.GetKey() + ":" + t.GetEffect()
		if seen[id] {
			errs.Duplicate(p, id)
		}
		seen[id] = true
	}
	st := n.GetStatus()
	validateResourceList(st.GetCapacity(), "status", "capacity", &errs)
	validateResourceList(st.GetAllocatable(), "status", "allocatable", &errs)
	errs.AddAll(validateConditions(st.GetConditions(), "status.conditions"))
	for i, a := range st.GetAddresses() {
		p := index("status.addresses", i)
		oneOf(&errs, child(p, "type"), a.GetType(), nodeAddressTypes...)
		if a.GetAddress() == "" {
			errs.Required(child(p, "address"), "")
		}
	}
	if ep := st.GetDaemonEndpoints().GetKubeletEndpoint(); ep != nil && ep.Port != 0 {
		errs.InvalidMsgs("status.daemonEndpoints.kubeletEndpoint.Port", ep.Port, validation.IsValidPortNum(ep.Port))
	}
	return errs
}

// validateNodeUpdate keeps podCIDR fixed once assigned: pods on the node
// already hold addresses from it.
func validateNodeUpdate(n, old *kplanev1.Node) validation.ErrorList {
	var errs validation.ErrorList
	if o := old.GetSpec().GetPodCidr(); o != "" && n.GetSpec().GetPodCidr() != o {
		errs.Invalid("spec.podCIDR", n.GetSpec().GetPodCidr(), "field is immutable once set")
	}
	if o := old.GetSpec().GetPodCidrs(); len(o) > 0 && !slices.Equal(n.GetSpec().GetPodCidrs(), o) {
		errs.Invalid("spec.podCIDRs", strings.Join(n.GetSpec().GetPodCidrs(), ","), "field is immutable once set")
	}
	return errs
}

// ---- Service

const (
	serviceTypeClusterIP    = "ClusterIP"
	serviceTypeNodePort     = "NodePort"
	serviceTypeLoadBalancer = "LoadBalancer"
	serviceTypeExternalName = "ExternalName"
	clusterIPNone           = "None"
)

func defaultService(svc *kplanev1.Service) {
	if svc.Spec == nil {
		svc.Spec = &kplanev1.ServiceSpec{}
	}
	s := svc.Spec
	if s.Type == "" {
		s.Type = serviceTypeClusterIP
	}
	if s.SessionAffinity == "" {
		s.SessionAffinity = "None"
	}
	switch {
	case s.Type != serviceTypeExternalName:
		syncFirst(&s.ClusterIp, &s.ClusterIps)
	case s.ClusterIp == "":
		// Turning into an ExternalName (which has no cluster IPs) by
		// clearing clusterIP drops the clusterIPs that came with it.
		s.ClusterIps = nil
	}
	for _, p := range s.Ports {
		if p == nil {
			continue
		}
		if p.Protocol == "" {
			p.Protocol = defaultProtocol
		}
		// An unset target port, 0 or "", means the service port, as in Kubernetes.
		if t := p.TargetPort; t == nil || (t.IsString() && t.StrVal == "") || (!t.IsString() && t.IntVal == 0) {
			p.TargetPort = kplanev1.IntOrStringFromInt32(p.Port)
		}
	}
}

func validateService(svc *kplanev1.Service) validation.ErrorList {
	var errs validation.ErrorList
	s := svc.GetSpec()
	if s == nil {
		errs.Required("spec", "")
		return errs
	}
	typeOK := oneOf(&errs, "spec.type", s.Type, serviceTypeClusterIP, serviceTypeNodePort, serviceTypeLoadBalancer, serviceTypeExternalName)
	oneOf(&errs, "spec.sessionAffinity", s.SessionAffinity, "None", "ClientIP")
	switch {
	case s.Type == serviceTypeExternalName:
		validateName(&errs, "spec.externalName", s.ExternalName, true, validation.IsDNS1123Subdomain)
		if s.ClusterIp != "" {
			errs.Forbidden("spec.clusterIP", "may not be set for type 'ExternalName'")
		}
		if len(s.ClusterIps) > 0 {
			errs.Forbidden("spec.clusterIPs", "may not be set for type 'ExternalName'")
		}
	case s.ClusterIp != "" && s.ClusterIp != clusterIPNone:
		errs.InvalidMsgs("spec.clusterIP", s.ClusterIp, validation.IsValidIP(s.ClusterIp))
	}
	if s.Type != serviceTypeExternalName {
		validateFirst(&errs, "spec.clusterIP", "spec.clusterIPs", s.ClusterIp, s.ClusterIps, func(ip string) []string {
			if ip == clusterIPNone {
				return nil
			}
			return validation.IsValidIP(ip)
		})
		if len(s.ClusterIps) > 1 && slices.Contains(s.ClusterIps, clusterIPNone) {
			errs.Invalid("spec.clusterIPs", strings.Join(s.ClusterIps, ","), "'None' must be the only entry")
		}
	}
	headless := s.ClusterIp == clusterIPNone
	if headless && typeOK && s.Type != serviceTypeClusterIP && s.Type != serviceTypeExternalName {
		errs.Invalid("spec.clusterIP", s.ClusterIp, "may only be 'None' for type 'ClusterIP'")
	}
	if len(s.Ports) == 0 && s.Type != serviceTypeExternalName && !headless {
		errs.Required("spec.ports", "")
	}
	names := map[string]bool{}
	portProtos := map[string]bool{}
	for i, p := range s.Ports {
		pp := index("spec.ports", i)
		switch {
		case p.GetName() == "" && len(s.Ports) > 1:
			errs.Required(child(pp, "name"), "when a service has more than one port, every port must be named")
		case p.GetName() != "":
			errs.InvalidMsgs(child(pp, "name"), p.GetName(), validation.IsDNS1123Label(p.GetName()))
			if names[p.GetName()] {
				errs.Duplicate(child(pp, "name"), p.GetName())
			}
			names[p.GetName()] = true
		}
		errs.InvalidMsgs(child(pp, "port"), p.GetPort(), validation.IsValidPortNum(p.GetPort()))
		validatePortNumOrName(&errs, child(pp, "targetPort"), p.GetTargetPort())
		oneOf(&errs, child(pp, "protocol"), p.GetProtocol(), protocols...)
		if np := p.GetNodePort(); np != 0 {
			if s.Type != serviceTypeNodePort && s.Type != serviceTypeLoadBalancer {
				errs.Forbidden(child(pp, "nodePort"), "may not be used when `type` is '"+s.Type+"'")
			} else {
				errs.InvalidMsgs(child(pp, "nodePort"), np, validation.IsValidPortNum(np))
			}
		}
		id := strconv.Itoa(int(p.GetPort())) + "/" + p.GetProtocol()
		if portProtos[id] {
			errs.Duplicate(pp, id)
		}
		portProtos[id] = true
	}
	errs.AddAll(validation.ValidateLabels(s.Selector, "spec.selector"))
	errs.AddAll(validateConditions(svc.GetStatus().GetConditions(), "status.conditions"))
	return errs
}

// validateServiceUpdate keeps an allocated cluster IP, unless the service
// turns into or out of an ExternalName (which has none).
func validateServiceUpdate(svc, old *kplanev1.Service) validation.ErrorList {
	var errs validation.ErrorList
	n, o := svc.GetSpec(), old.GetSpec()
	if o.GetClusterIp() != "" && n.GetClusterIp() != o.GetClusterIp() &&
		n.GetType() != serviceTypeExternalName && o.GetType() != serviceTypeExternalName {
		errs.Immutable("spec.clusterIP", n.GetClusterIp())
	}
	return errs
}

// ---- Endpoints

func defaultEndpoints(ep *kplanev1.Endpoints) {
	for _, ss := range ep.Subsets {
		for _, p := range ss.GetPorts() {
			if p != nil && p.Protocol == "" {
				p.Protocol = defaultProtocol
			}
		}
	}
}

func validateEndpoints(ep *kplanev1.Endpoints) validation.ErrorList {
	var errs validation.ErrorList
	for i, ss := range ep.GetSubsets() {
		p := index("subsets", i)
		if len(ss.GetAddresses()) == 0 && len(ss.GetNotReadyAddresses()) == 0 {
			errs.Required(p, "must specify `addresses` or `notReadyAddresses`")
		}
		for j, a := range ss.GetAddresses() {
			validateEndpointAddress(a, index(child(p, "addresses"), j), &errs)
		}
		for j, a := range ss.GetNotReadyAddresses() {
			validateEndpointAddress(a, index(child(p, "notReadyAddresses"), j), &errs)
		}
		if len(ss.GetPorts()) == 0 {
			errs.Required(child(p, "ports"), "")
		}
		names := map[string]bool{}
		for j, port := range ss.GetPorts() {
			pp := index(child(p, "ports"), j)
			switch {
			case port.GetName() == "" && len(ss.GetPorts()) > 1:
				errs.Required(child(pp, "name"), "when a subset has more than one port, every port must be named")
			case port.GetName() != "":
				errs.InvalidMsgs(child(pp, "name"), port.GetName(), validation.IsDNS1123Label(port.GetName()))
				if names[port.GetName()] {
					errs.Duplicate(child(pp, "name"), port.GetName())
				}
				names[port.GetName()] = true
			}
			errs.InvalidMsgs(child(pp, "port"), port.GetPort(), validation.IsValidPortNum(port.GetPort()))
			oneOf(&errs, child(pp, "protocol"), port.GetProtocol(), protocols...)
		}
	}
	return errs
}

func validateEndpointAddress(a *kplanev1.EndpointAddress, path string, errs *validation.ErrorList) {
	if a.GetIp() == "" {
		errs.Required(child(path, "ip"), "")
	} else {
		errs.InvalidMsgs(child(path, "ip"), a.GetIp(), validation.IsValidIP(a.GetIp()))
	}
	validateName(errs, child(path, "hostname"), a.GetHostname(), false, validation.IsDNS1123Label)
	validateName(errs, child(path, "nodeName"), a.GetNodeName(), false, validation.IsDNS1123Subdomain)
}

// ---- ServiceAccount

func validateServiceAccount(sa *kplanev1.ServiceAccount) validation.ErrorList {
	var errs validation.ErrorList
	for i, s := range sa.GetSecrets() {
		validateName(&errs, child(index("secrets", i), "name"), s.GetName(), true, validation.IsDNS1123Subdomain)
	}
	for i, s := range sa.GetImagePullSecrets() {
		validateName(&errs, child(index("imagePullSecrets", i), "name"), s.GetName(), true, validation.IsDNS1123Subdomain)
	}
	return errs
}

// ---- Secret

// Secret types with required keys, as in Kubernetes.
const (
	secretTypeOpaque           = "Opaque"
	secretTypeSAToken          = "kubernetes.io/service-account-token"
	secretTypeDockercfg        = "kubernetes.io/dockercfg"
	secretTypeDockerConfigJSON = "kubernetes.io/dockerconfigjson"
	secretTypeBasicAuth        = "kubernetes.io/basic-auth"
	secretTypeSSHAuth          = "kubernetes.io/ssh-auth"
	secretTypeTLS              = "kubernetes.io/tls"
	// serviceAccountNameAnnotation names the account a token secret is for.
	serviceAccountNameAnnotation = "kubernetes.io/service-account.name"
	// maxSecretSize bounds the summed size of a secret's data (1 MiB).
	maxSecretSize = 1 << 20
)

// defaultSecret sets type Opaque and folds the write-only stringData into
// data (stringData wins on a shared key), then clears it.
func defaultSecret(s *kplanev1.Secret) {
	if s.Type == "" {
		s.Type = secretTypeOpaque
	}
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = make(map[string][]byte, len(s.StringData))
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
	}
	s.StringData = nil
}

func validateSecret(s *kplanev1.Secret) validation.ErrorList {
	var errs validation.ErrorList
	total := 0
	for _, k := range validation.SortedKeys(s.GetData()) {
		errs.InvalidMsgs("data", k, validation.IsConfigKey(k))
		total += len(s.GetData()[k])
	}
	// stringData is normally merged away by Default; check it in case a
	// caller validates without defaulting.
	for _, k := range validation.SortedKeys(s.GetStringData()) {
		errs.InvalidMsgs("stringData", k, validation.IsConfigKey(k))
		total += len(s.GetStringData()[k])
	}
	if total > maxSecretSize {
		errs.TooLong("data", maxSecretSize)
	}
	has := func(k string) bool {
		_, ok := s.GetData()[k]
		_, ok2 := s.GetStringData()[k]
		return ok || ok2
	}
	requireKey := func(k string) {
		if !has(k) {
			errs.Required(key("data", k), "")
		}
	}
	switch s.GetType() {
	case secretTypeSAToken:
		if s.GetMetadata().GetAnnotations()[serviceAccountNameAnnotation] == "" {
			errs.Required(key("metadata.annotations", serviceAccountNameAnnotation), "")
		}
	case secretTypeDockercfg:
		requireKey(".dockercfg")
		validateJSONKey(s, ".dockercfg", &errs)
	case secretTypeDockerConfigJSON:
		requireKey(".dockerconfigjson")
		validateJSONKey(s, ".dockerconfigjson", &errs)
	case secretTypeBasicAuth:
		if !has("username") && !has("password") {
			errs.Required("data", "must contain `username` or `password`")
		}
	case secretTypeSSHAuth:
		requireKey("ssh-privatekey")
	case secretTypeTLS:
		requireKey("tls.crt")
		requireKey("tls.key")
	}
	return errs
}

func validateJSONKey(s *kplanev1.Secret, k string, errs *validation.ErrorList) {
	if v, ok := s.GetData()[k]; ok && !json.Valid(v) {
		errs.Invalid(key("data", k), "<secret contents redacted>", "must be valid JSON")
	}
}

// validateSecretUpdate keeps the type fixed, and everything but metadata
// fixed once the secret is marked immutable.
func validateSecretUpdate(s, old *kplanev1.Secret) validation.ErrorList {
	var errs validation.ErrorList
	if s.GetType() != old.GetType() {
		errs.Immutable("type", s.GetType())
	}
	if old.GetImmutable() {
		if !s.GetImmutable() {
			errs.Forbidden("immutable", "field is immutable when `immutable` is set")
		}
		if !maps.EqualFunc(s.GetData(), old.GetData(), bytes.Equal) || len(s.GetStringData()) > 0 {
			errs.Forbidden("data", "field is immutable when `immutable` is set")
		}
	}
	return errs
}

// ---- Event

func defaultEvent(e *kplanev1.Event) {
	if e.Type == "" {
		e.Type = "Normal"
	}
	if e.Count == 0 {
		e.Count = 1
	}
}

func validateEvent(e *kplanev1.Event) validation.ErrorList {
	var errs validation.ErrorList
	io := e.GetInvolvedObject()
	if io.GetKind() == "" {
		errs.Required("involvedObject.kind", "")
	}
	if io.GetName() == "" {
		errs.Required("involvedObject.name", "")
	}
	if ns := io.GetNamespace(); ns != "" && ns != e.GetMetadata().GetNamespace() {
		errs.Invalid("involvedObject.namespace", ns, "does not match event.namespace")
	}
	oneOf(&errs, "type", e.GetType(), "Normal", "Warning")
	if e.GetCount() < 0 {
		errs.NonNegative("count", int64(e.GetCount()))
	}
	return errs
}

// ---- Lease

func validateLease(l *kplanev1.Lease) validation.ErrorList {
	var errs validation.ErrorList
	s := l.GetSpec()
	errs.NonNegative("spec.leaseDurationSeconds", int64(s.GetLeaseDurationSeconds()))
	if s.GetHolderIdentity() != "" && s.GetLeaseDurationSeconds() == 0 {
		errs.Add("spec.leaseDurationSeconds", "must be greater than 0 when holderIdentity is set")
	}
	errs.NonNegative("spec.leaseTransitions", int64(s.GetLeaseTransitions()))
	return errs
}

// validatePortNumOrName checks a port given by number (1-65535) or by the
// name of a container port.
func validatePortNumOrName(errs *validation.ErrorList, path string, p *kplanev1.IntOrString) {
	if p.IsString() {
		errs.InvalidMsgs(path, p.GetStrVal(), validation.IsIANASvcName(p.GetStrVal()))
		return
	}
	errs.InvalidMsgs(path, p.GetIntVal(), validation.IsValidPortNum(p.GetIntVal()))
}
