package strategy

import (
	"strings"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/quantity"
	"github.com/kplane/kplane/pkg/validation"
)

// Pod defaults, as in Kubernetes.
const (
	defaultRestartPolicy          = "Always"
	defaultTerminationGracePeriod = 30
	defaultSchedulerName          = "default-scheduler"
	defaultServiceAccountName     = "default"
	defaultProtocol               = kplanev1.ProtocolTCP
)

var (
	restartPolicies   = []string{"Always", "OnFailure", "Never"}
	protocols         = []string{kplanev1.ProtocolTCP, kplanev1.ProtocolUDP, kplanev1.ProtocolSCTP}
	pullPolicies      = []string{"Always", "IfNotPresent", "Never"}
	taintEffects      = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}
	tolerationOps     = []string{"Exists", "Equal"}
	hostPathTypes     = []string{"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"}
	emptyDirMedia     = []string{"", "Memory"}
	httpSchemes       = []string{"HTTP", "HTTPS"}
	podPhases         = []string{"Pending", "Running", "Succeeded", "Failed", "Unknown"}
	conditionStatuses = []string{"True", "False", "Unknown"}
)

func defaultPod(p *kplanev1.Pod) {
	if p.Spec == nil {
		p.Spec = &kplanev1.PodSpec{}
	}
	defaultPodSpec(p.Spec)
	syncPodStatusIPs(p.Status)
}

// preparePod starts a new pod Pending (until a node agent reports
// otherwise) with the QoS class its resources give; both only when unset.
// The QoS class never changes later because container resources are
// immutable.
func preparePod(p *kplanev1.Pod) {
	if p.Status == nil {
		p.Status = &kplanev1.PodStatus{}
	}
	if p.Status.Phase == "" {
		p.Status.Phase = "Pending"
	}
	if p.Status.QosClass == "" {
		// Requests default from limits; classify the defaulted spec.
		spec := proto.Clone(p.GetSpec()).(*kplanev1.PodSpec)
		if spec == nil {
			spec = &kplanev1.PodSpec{}
		}
		defaultPodSpec(spec)
		p.Status.QosClass = qosClass(spec)
	}
}

// defaultPodSpec fills a pod spec (of a pod or of a template).
func defaultPodSpec(s *kplanev1.PodSpec) {
	if s.RestartPolicy == "" {
		s.RestartPolicy = defaultRestartPolicy
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr[int64](defaultTerminationGracePeriod)
	}
	if s.SchedulerName == "" {
		s.SchedulerName = defaultSchedulerName
	}
	// Kubernetes' service-account admission does this on every pod.
	if s.ServiceAccountName == "" {
		s.ServiceAccountName = defaultServiceAccountName
	}
	for _, c := range s.Containers {
		defaultContainer(c)
	}
	for _, c := range s.InitContainers {
		defaultContainer(c)
	}
}

func defaultContainer(c *kplanev1.Container) {
	if c == nil {
		return
	}
	for _, p := range c.Ports {
		if p != nil && p.Protocol == "" {
			p.Protocol = defaultProtocol
		}
	}
	if c.ImagePullPolicy == "" && c.Image != "" {
		c.ImagePullPolicy = pullPolicyFor(c.Image)
	}
	// A limit without a request requests the limit.
	if r := c.Resources; r != nil {
		for k, v := range r.Limits {
			if _, ok := r.Requests[k]; !ok {
				if r.Requests == nil {
					r.Requests = map[string]string{}
				}
				r.Requests[k] = v
			}
		}
	}
	defaultProbe(c.ReadinessProbe)
	defaultProbe(c.LivenessProbe)
}

// pullPolicyFor returns Always for an image without a tag or tagged
// "latest" (it may change under the same name), IfNotPresent otherwise.
func pullPolicyFor(image string) string {
	if strings.Contains(image, "@") {
		return "IfNotPresent"
	}
	name := image
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	i := strings.LastIndexByte(name, ':')
	if i < 0 || name[i+1:] == "latest" {
		return "Always"
	}
	return "IfNotPresent"
}

func defaultProbe(p *kplanev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if h := p.HttpGet; h != nil {
		if h.Path == "" {
			h.Path = "/"
		}
		if h.Scheme == "" {
			h.Scheme = "HTTP"
		}
	}
}

// qosClass classifies a pod as Kubernetes does: Guaranteed when every
// container limits cpu and memory and requests equal limits, BestEffort
// when nothing is requested or limited, Burstable otherwise.
func qosClass(s *kplanev1.PodSpec) string {
	all := append(append([]*kplanev1.Container(nil), s.GetContainers()...), s.GetInitContainers()...)
	any, guaranteed := false, true
	for _, c := range all {
		req, lim := c.GetResources().GetRequests(), c.GetResources().GetLimits()
		if len(req) > 0 || len(lim) > 0 {
			any = true
		}
		for _, r := range []string{resourceCPU, resourceMemory} {
			l, ok := lim[r]
			if !ok {
				guaranteed = false
				continue
			}
			rq, ok := req[r]
			if !ok {
				rq = l
			}
			lq, err1 := quantity.Parse(l)
			rqq, err2 := quantity.Parse(rq)
			if err1 != nil || err2 != nil || lq.Cmp(rqq) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return "BestEffort"
	case guaranteed:
		return "Guaranteed"
	}
	return "Burstable"
}

func validatePod(p *kplanev1.Pod) validation.ErrorList {
	var errs validation.ErrorList
	if p.Spec == nil {
		errs.Required("spec", "")
		return errs
	}
	errs.AddAll(validatePodSpec(p.Spec, "spec"))
	if st := p.Status; st != nil {
		if st.Phase != "" {
			oneOf(&errs, "status.phase", st.Phase, podPhases...)
		}
		errs.AddAll(validateConditions(st.Conditions, "status.conditions"))
		if st.PodIp != "" {
			errs.InvalidMsgs("status.podIP", st.PodIp, validation.IsValidIP(st.PodIp))
		}
		if st.HostIp != "" {
			errs.InvalidMsgs("status.hostIP", st.HostIp, validation.IsValidIP(st.HostIp))
		}
		validatePodStatusIPs(&errs, st)
	}
	return errs
}

func validateConditions(conds []*kplanev1.Condition, path string) validation.ErrorList {
	var errs validation.ErrorList
	for i, c := range conds {
		p := index(path, i)
		if c.GetType() == "" {
			errs.Required(child(p, "type"), "")
		}
		oneOf(&errs, child(p, "status"), c.GetStatus(), conditionStatuses...)
	}
	return errs
}

// validatePodSpec checks a pod spec (of a pod or a template) at path.
func validatePodSpec(s *kplanev1.PodSpec, path string) validation.ErrorList {
	var errs validation.ErrorList
	volumes := validateVolumes(s.Volumes, child(path, "volumes"), &errs)

	if len(s.Containers) == 0 {
		errs.Required(child(path, "containers"), "")
	}
	names := map[string]bool{}
	for i, c := range s.Containers {
		validateContainer(c, index(child(path, "containers"), i), names, volumes, false, &errs)
	}
	for i, c := range s.InitContainers {
		validateContainer(c, index(child(path, "initContainers"), i), names, volumes, true, &errs)
	}

	oneOf(&errs, child(path, "restartPolicy"), s.RestartPolicy, restartPolicies...)
	if s.TerminationGracePeriodSeconds != nil {
		errs.NonNegative(child(path, "terminationGracePeriodSeconds"), *s.TerminationGracePeriodSeconds)
	}
	if s.ActiveDeadlineSeconds != nil {
		errs.Positive(child(path, "activeDeadlineSeconds"), *s.ActiveDeadlineSeconds)
	}
	errs.AddAll(validation.ValidateLabels(s.NodeSelector, child(path, "nodeSelector")))
	validateName(&errs, child(path, "nodeName"), s.NodeName, false, validation.IsDNS1123Subdomain)
	validateName(&errs, child(path, "serviceAccountName"), s.ServiceAccountName, false, validation.IsDNS1123Subdomain)
	validateName(&errs, child(path, "schedulerName"), s.SchedulerName, false, validation.IsDNS1123Subdomain)
	validateName(&errs, child(path, "hostname"), s.Hostname, false, validation.IsDNS1123Label)
	validateName(&errs, child(path, "subdomain"), s.Subdomain, false, validation.IsDNS1123Label)
	for i, t := range s.Tolerations {
		validateToleration(t, index(child(path, "tolerations"), i), &errs)
	}
	validateName(&errs, child(path, "priorityClassName"), s.PriorityClassName, false, validation.IsDNS1123Subdomain)
	if s.PreemptionPolicy != nil {
		oneOf(&errs, child(path, "preemptionPolicy"), s.GetPreemptionPolicy(), preemptionPolicies...)
	}
	validateAffinity(s.Affinity, child(path, "affinity"), &errs)
	validateTopologySpread(s.TopologySpreadConstraints, child(path, "topologySpreadConstraints"), &errs)
	return errs
}

// validateVolumes checks the pod's volumes and returns the declared names.
func validateVolumes(vols []*kplanev1.Volume, path string, errs *validation.ErrorList) map[string]bool {
	names := map[string]bool{}
	for i, v := range vols {
		p := index(path, i)
		switch {
		case v.GetName() == "":
			errs.Required(child(p, "name"), "")
		case names[v.GetName()]:
			errs.Duplicate(child(p, "name"), v.GetName())
		default:
			errs.InvalidMsgs(child(p, "name"), v.GetName(), validation.IsDNS1123Label(v.GetName()))
		}
		names[v.GetName()] = true
		sources := 0
		if src := v.GetPersistentVolumeClaim(); src != nil {
			sources++
			validateName(errs, child(p, "persistentVolumeClaim.claimName"), src.ClaimName, true, validation.IsDNS1123Subdomain)
		}
		if src := v.GetEmptyDir(); src != nil {
			sources++
			oneOf(errs, child(p, "emptyDir.medium"), src.Medium, emptyDirMedia...)
			if src.SizeLimit != "" {
				validateQuantity(src.SizeLimit, child(p, "emptyDir.sizeLimit"), errs)
			}
		}
		if src := v.GetSecret(); src != nil {
			sources++
			validateName(errs, child(p, "secret.secretName"), src.SecretName, true, validation.IsDNS1123Subdomain)
			if m := src.DefaultMode; m != nil && (*m < 0 || *m > 0o777) {
				errs.Invalid(child(p, "secret.defaultMode"), *m, "must be a number between 0 and 0777 (octal), both inclusive")
			}
		}
		if src := v.GetHostPath(); src != nil {
			sources++
			validateHostPath(src, child(p, "hostPath"), errs)
		}
		switch {
		case sources == 0:
			errs.Required(p, "must specify a volume type")
		case sources > 1:
			errs.Forbidden(p, "may not specify more than 1 volume type")
		}
	}
	return names
}

func validateHostPath(src *kplanev1.HostPathVolumeSource, path string, errs *validation.ErrorList) {
	if src.Path == "" {
		errs.Required(child(path, "path"), "")
	}
	oneOf(errs, child(path, "type"), src.Type, hostPathTypes...)
}

// validateContainer checks one container; names collects container names
// across containers and init containers, which share one namespace.
func validateContainer(c *kplanev1.Container, path string, names, volumes map[string]bool, init bool, errs *validation.ErrorList) {
	if c == nil {
		errs.Required(path, "")
		return
	}
	switch {
	case c.Name == "":
		errs.Required(child(path, "name"), "")
	case names[c.Name]:
		errs.Duplicate(child(path, "name"), c.Name)
	default:
		errs.InvalidMsgs(child(path, "name"), c.Name, validation.IsDNS1123Label(c.Name))
	}
	names[c.Name] = true
	if strings.TrimSpace(c.Image) == "" {
		errs.Required(child(path, "image"), "")
	}
	if c.ImagePullPolicy != "" {
		oneOf(errs, child(path, "imagePullPolicy"), c.ImagePullPolicy, pullPolicies...)
	}

	portNames := map[string]bool{}
	for i, p := range c.Ports {
		pp := index(child(path, "ports"), i)
		if p.GetName() != "" {
			errs.InvalidMsgs(child(pp, "name"), p.GetName(), validation.IsIANASvcName(p.GetName()))
			if portNames[p.GetName()] {
				errs.Duplicate(child(pp, "name"), p.GetName())
			}
			portNames[p.GetName()] = true
		}
		errs.InvalidMsgs(child(pp, "containerPort"), p.GetContainerPort(), validation.IsValidPortNum(p.GetContainerPort()))
		if p.GetHostPort() != 0 {
			errs.InvalidMsgs(child(pp, "hostPort"), p.GetHostPort(), validation.IsValidPortNum(p.GetHostPort()))
		}
		oneOf(errs, child(pp, "protocol"), p.GetProtocol(), protocols...)
	}

	// Duplicate names are allowed, as in Kubernetes: the last one wins.
	for i, e := range c.Env {
		ep := child(index(child(path, "env"), i), "name")
		if e.GetName() == "" {
			errs.Required(ep, "")
		} else {
			errs.InvalidMsgs(ep, e.GetName(), validation.IsEnvVarName(e.GetName()))
		}
	}

	validateContainerResources(c.Resources, child(path, "resources"), errs)

	if init {
		if c.ReadinessProbe != nil {
			errs.Forbidden(child(path, "readinessProbe"), "may not be set for init containers")
		}
		if c.LivenessProbe != nil {
			errs.Forbidden(child(path, "livenessProbe"), "may not be set for init containers")
		}
	} else {
		validateProbe(c.ReadinessProbe, child(path, "readinessProbe"), false, errs)
		validateProbe(c.LivenessProbe, child(path, "livenessProbe"), true, errs)
	}

	mountPaths := map[string]bool{}
	for i, m := range c.VolumeMounts {
		mp := index(child(path, "volumeMounts"), i)
		switch {
		case m.GetName() == "":
			errs.Required(child(mp, "name"), "")
		case !volumes[m.GetName()]:
			errs.NotFound(child(mp, "name"), m.GetName())
		}
		switch {
		case m.GetMountPath() == "":
			errs.Required(child(mp, "mountPath"), "")
		case mountPaths[m.GetMountPath()]:
			errs.Invalid(child(mp, "mountPath"), m.GetMountPath(), "must be unique")
		}
		mountPaths[m.GetMountPath()] = true
		validateSubPath(m.GetSubPath(), child(mp, "subPath"), errs)
	}
}

// validateSubPath keeps a volume mount's subPath inside its volume: a
// relative path with no ".." element.
func validateSubPath(sub, path string, errs *validation.ErrorList) {
	if sub == "" {
		return
	}
	if strings.HasPrefix(sub, "/") {
		errs.Invalid(path, sub, "must be a relative path")
	}
	for _, el := range strings.Split(sub, "/") {
		if el == ".." {
			errs.Invalid(path, sub, "must not contain '..'")
			break
		}
	}
}

// validateContainerResources checks names and amounts, and that no request
// exceeds its limit.
func validateContainerResources(r *kplanev1.ResourceRequirements, path string, errs *validation.ErrorList) {
	if r == nil {
		return
	}
	limits := validateResourceList(r.Limits, child(path, "limits"), errs)
	requests := validateResourceList(r.Requests, child(path, "requests"), errs)
	for _, name := range validation.SortedKeys(requests) {
		l, ok := limits[name]
		if ok && requests[name].Cmp(l) > 0 {
			errs.Invalid(key(child(path, "requests"), name), r.Requests[name],
				"must be less than or equal to "+name+" limit of "+r.Limits[name])
		}
	}
}

func validateProbe(p *kplanev1.Probe, path string, liveness bool, errs *validation.ErrorList) {
	if p == nil {
		return
	}
	handlers := 0
	if p.Exec != nil {
		handlers++
		if len(p.Exec.Command) == 0 {
			errs.Required(child(path, "exec.command"), "")
		}
	}
	if p.TcpSocket != nil {
		handlers++
		validatePortNumOrName(errs, child(path, "tcpSocket.port"), p.TcpSocket.Port)
	}
	if h := p.HttpGet; h != nil {
		handlers++
		validatePortNumOrName(errs, child(path, "httpGet.port"), h.Port)
		if h.Scheme != "" {
			oneOf(errs, child(path, "httpGet.scheme"), h.Scheme, httpSchemes...)
		}
	}
	switch {
	case handlers == 0:
		errs.Required(path, "must specify a handler type")
	case handlers > 1:
		errs.Forbidden(path, "may not specify more than 1 handler type")
	}
	errs.NonNegative(child(path, "initialDelaySeconds"), int64(p.InitialDelaySeconds))
	errs.NonNegative(child(path, "timeoutSeconds"), int64(p.TimeoutSeconds))
	errs.NonNegative(child(path, "periodSeconds"), int64(p.PeriodSeconds))
	errs.NonNegative(child(path, "successThreshold"), int64(p.SuccessThreshold))
	errs.NonNegative(child(path, "failureThreshold"), int64(p.FailureThreshold))
	if liveness && p.SuccessThreshold > 1 {
		errs.Invalid(child(path, "successThreshold"), p.SuccessThreshold, "must be 1")
	}
}

func validateToleration(t *kplanev1.Toleration, path string, errs *validation.ErrorList) {
	if t.GetKey() != "" {
		errs.InvalidMsgs(child(path, "key"), t.GetKey(), validation.IsQualifiedName(t.GetKey()))
	}
	switch t.GetOperator() {
	case "", "Equal":
		if t.GetKey() == "" {
			errs.Invalid(child(path, "operator"), t.GetOperator(), "operator must be Exists when `key` is empty (which matches every taint)")
		}
		errs.InvalidMsgs(child(path, "value"), t.GetValue(), validation.IsValidLabelValue(t.GetValue()))
	case "Exists":
		if t.GetValue() != "" {
			errs.Invalid(child(path, "value"), t.GetValue(), "value must be empty when `operator` is 'Exists'")
		}
	default:
		errs.NotSupported(child(path, "operator"), t.GetOperator(), tolerationOps)
	}
	if t.GetEffect() != "" {
		oneOf(errs, child(path, "effect"), t.GetEffect(), taintEffects...)
	}
	if t != nil && t.TolerationSeconds != nil && t.GetEffect() != "NoExecute" {
		errs.Invalid(child(path, "tolerationSeconds"), *t.TolerationSeconds, "may only be set when `effect` is 'NoExecute'")
	}
}

// validatePodUpdate enforces Kubernetes' pod immutability: only container
// images, activeDeadlineSeconds (set, or lowered), added tolerations and a
// first nodeName (binding) may change.
func validatePodUpdate(p, old *kplanev1.Pod) validation.ErrorList {
	var errs validation.ErrorList
	ns, os := p.GetSpec(), old.GetSpec()
	if ns == nil {
		ns = &kplanev1.PodSpec{}
	}
	if os == nil {
		os = &kplanev1.PodSpec{}
	}
	if os.GetNodeName() != "" && ns.GetNodeName() != os.GetNodeName() {
		errs.Invalid("spec.nodeName", ns.GetNodeName(), "field is immutable once set")
	}
	if ad := ns.ActiveDeadlineSeconds; os.ActiveDeadlineSeconds != nil {
		if ad == nil {
			errs.Invalid("spec.activeDeadlineSeconds", "null", "must not be removed once set")
		} else if *ad > *os.ActiveDeadlineSeconds {
			errs.Invalid("spec.activeDeadlineSeconds", *ad, "may only be lowered")
		}
	}
	oldTols := os.GetTolerations()
	if len(ns.GetTolerations()) < len(oldTols) {
		errs.Forbidden("spec.tolerations", "existing tolerations may not be removed")
	} else {
		for i, t := range oldTols {
			if !proto.Equal(t, ns.GetTolerations()[i]) {
				errs.Forbidden(index("spec.tolerations", i), "existing tolerations may not be changed; only additions are allowed")
			}
		}
	}

	// Compare everything else: copy the mutable fields from new into a
	// clone of old; any remaining difference is a forbidden change.
	mutable := proto.Clone(os).(*kplanev1.PodSpec)
	copyImages(mutable.Containers, ns.Containers)
	copyImages(mutable.InitContainers, ns.InitContainers)
	mutable.ActiveDeadlineSeconds = ns.ActiveDeadlineSeconds
	mutable.Tolerations = ns.Tolerations
	if os.GetNodeName() == "" {
		mutable.NodeName = ns.NodeName
	}
	if !proto.Equal(mutable, ns) && len(errs) == 0 {
		errs.Forbidden("spec", "pod updates may not change fields other than spec.containers[*].image, "+
			"spec.initContainers[*].image, spec.activeDeadlineSeconds, spec.tolerations (additions only) "+
			"and spec.nodeName (once, when unset)")
	}
	return errs
}

// copyImages copies images from src into dst where both lists hold a
// container at the same index.
func copyImages(dst, src []*kplanev1.Container) {
	for i := range dst {
		if i < len(src) && dst[i] != nil && src[i] != nil {
			dst[i].Image = src[i].Image
		}
	}
}
