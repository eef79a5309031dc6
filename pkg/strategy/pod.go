package strategy

import (
	"slices"
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
		// qosClass reads a missing request as its limit, as defaulting
		// will write it, so the spec need not be defaulted first.
		p.Status.QosClass = qosClass(p.GetSpec())
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
	defaultProbe(c.StartupProbe)
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = defaultTerminationMessagePath
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = terminationMessageFile
	}
	if l := c.Lifecycle; l != nil {
		defaultHTTPGet(l.PostStart.GetHttpGet())
		defaultHTTPGet(l.PreStop.GetHttpGet())
	}
}

// Termination message defaults and policies, as in Kubernetes.
const (
	defaultTerminationMessagePath = "/dev/termination-log"
	terminationMessageFile        = "File"
	terminationMessageFallback    = "FallbackToLogsOnError"
)

func defaultHTTPGet(h *kplanev1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = "HTTP"
	}
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
	defaultHTTPGet(p.HttpGet)
}

// qosClass classifies a pod as Kubernetes does: Guaranteed when every
// container limits cpu and memory and requests equal limits, BestEffort
// when nothing is requested or limited, Burstable otherwise.
func qosClass(s *kplanev1.PodSpec) string {
	any, guaranteed := false, true
	classify := func(c *kplanev1.Container) {
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
			if !ok || rq == l {
				continue // the request is the limit
			}
			lq, err1 := quantity.Parse(l)
			rqq, err2 := quantity.Parse(rq)
			if err1 != nil || err2 != nil || lq.Cmp(rqq) != 0 {
				guaranteed = false
			}
		}
	}
	for _, c := range s.GetContainers() {
		classify(c)
	}
	for _, c := range s.GetInitContainers() {
		classify(c)
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
	// A resourceFieldRef may name any container of the pod.
	for _, group := range []struct {
		field string
		list  []*kplanev1.Container
	}{{"containers", s.Containers}, {"initContainers", s.InitContainers}} {
		for i, c := range group.list {
			for j, e := range c.GetEnv() {
				if n := e.GetValueFrom().GetResourceFieldRef().GetContainerName(); n != "" && !names[n] {
					errs.NotFound(child(index(child(index(child(path, group.field), i), "env"), j), "valueFrom.resourceFieldRef.containerName"), n)
				}
			}
		}
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
		ep := index(child(path, "env"), i)
		if e.GetName() == "" {
			errs.Required(child(ep, "name"), "")
		} else {
			errs.InvalidMsgs(child(ep, "name"), e.GetName(), validation.IsEnvVarName(e.GetName()))
		}
		if e.ValueFrom != nil {
			validateEnvSource(e, child(ep, "valueFrom"), errs)
		}
	}
	for i, from := range c.EnvFrom {
		fp := index(child(path, "envFrom"), i)
		if from.GetPrefix() != "" {
			errs.InvalidMsgs(child(fp, "prefix"), from.GetPrefix(), validation.IsEnvVarName(from.GetPrefix()))
		}
		if from.SecretRef == nil {
			errs.Required(fp, "must specify one of: `configMapRef` or `secretRef`")
			continue
		}
		if from.SecretRef.GetName() == "" {
			errs.Required(child(fp, "secretRef.name"), "")
		} else {
			errs.InvalidMsgs(child(fp, "secretRef.name"), from.SecretRef.GetName(), validation.IsDNS1123Subdomain(from.SecretRef.GetName()))
		}
	}

	validateContainerResources(c.Resources, child(path, "resources"), errs)

	sidecar := init && c.GetRestartPolicy() == defaultRestartPolicy
	if c.RestartPolicy != nil {
		switch {
		case !init:
			errs.Forbidden(child(path, "restartPolicy"), "may not be set for non-init containers")
		case !sidecar:
			errs.NotSupported(child(path, "restartPolicy"), c.GetRestartPolicy(), []string{defaultRestartPolicy})
		}
	}
	if c.TerminationMessagePath != "" {
		tp := c.TerminationMessagePath
		if !strings.HasPrefix(tp, "/") || slices.Contains(strings.Split(tp, "/"), "..") {
			errs.Invalid(child(path, "terminationMessagePath"), tp, "must be an absolute path without '..'")
		}
	}
	if c.TerminationMessagePolicy != "" {
		oneOf(errs, child(path, "terminationMessagePolicy"), c.TerminationMessagePolicy, terminationMessageFile, terminationMessageFallback)
	}
	if l := c.Lifecycle; l != nil {
		if init && !sidecar {
			errs.Forbidden(child(path, "lifecycle"), "may not be set for init containers without restartPolicy=Always")
		}
		validateHandler(l.PostStart, child(path, "lifecycle.postStart"), errs)
		validateHandler(l.PreStop, child(path, "lifecycle.preStop"), errs)
	}

	if init && !sidecar {
		if c.ReadinessProbe != nil {
			errs.Forbidden(child(path, "readinessProbe"), "may not be set for init containers")
		}
		if c.LivenessProbe != nil {
			errs.Forbidden(child(path, "livenessProbe"), "may not be set for init containers")
		}
		if c.StartupProbe != nil {
			errs.Forbidden(child(path, "startupProbe"), "may not be set for init containers")
		}
	} else {
		validateProbe(c.ReadinessProbe, child(path, "readinessProbe"), false, errs)
		validateProbe(c.LivenessProbe, child(path, "livenessProbe"), true, errs)
		validateProbe(c.StartupProbe, child(path, "startupProbe"), true, errs)
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
	validateResourceList(r.Limits, path, "limits", errs)
	validateResourceList(r.Requests, path, "requests", errs)
	var buf [8]string
	for _, name := range validation.AppendSortedKeys(buf[:0], r.Requests) {
		l, ok := r.Limits[name]
		if !ok || l == r.Requests[name] {
			continue // no limit, or the request is the limit
		}
		rq, okR := resourceAmount(name, r.Requests[name])
		lq, okL := resourceAmount(name, l)
		if okR && okL && rq.Cmp(lq) > 0 {
			errs.Invalid(key(child(path, "requests"), name), r.Requests[name],
				"must be less than or equal to "+name+" limit of "+l)
		}
	}
}

// validateHandler checks a lifecycle hook: one action, well formed.
func validateHandler(h *kplanev1.LifecycleHandler, path string, errs *validation.ErrorList) {
	if h == nil {
		return
	}
	n := 0
	if h.Exec != nil {
		n++
		if len(h.Exec.Command) == 0 {
			errs.Required(child(path, "exec.command"), "")
		}
	}
	if g := h.HttpGet; g != nil {
		n++
		validatePortNumOrName(errs, child(path, "httpGet.port"), g.Port)
		if g.Scheme != "" {
			oneOf(errs, child(path, "httpGet.scheme"), g.Scheme, httpSchemes...)
		}
		for i, hd := range g.HttpHeaders {
			hp := index(child(path, "httpGet.httpHeaders"), i)
			if hd.GetName() == "" {
				errs.Required(child(hp, "name"), "")
				continue
			}
			errs.InvalidMsgs(child(hp, "name"), hd.GetName(), validation.IsHTTPHeaderName(hd.GetName()))
		}
	}
	switch {
	case n == 0:
		errs.Required(path, "must specify a handler type")
	case n > 1:
		errs.Forbidden(path, "may not specify more than 1 handler type")
	}
}

// Downward-API fields an env var may take, and resources a
// resourceFieldRef may read, as the node agent supports them.
var (
	envFieldPaths     = []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}
	envResourceFields = []string{"limits.cpu", "limits.memory", "requests.cpu", "requests.memory"}
)

// validateEnvSource checks env[i].valueFrom: one source, and a value
// beside it is an error.
func validateEnvSource(e *kplanev1.EnvVar, path string, errs *validation.ErrorList) {
	src := e.ValueFrom
	if e.GetValue() != "" {
		errs.Invalid(path, "", "may not be specified when `value` is not empty")
	}
	n := 0
	if f := src.FieldRef; f != nil {
		n++
		fp := child(path, "fieldRef.fieldPath")
		if v := f.GetApiVersion(); v != "" && v != "v1" {
			errs.NotSupported(child(path, "fieldRef.apiVersion"), v, []string{"v1"})
		}
		p := f.GetFieldPath()
		switch base, rest, subscripted := strings.Cut(p, "['"); {
		case p == "":
			errs.Required(fp, "")
		case subscripted && (base == "metadata.labels" || base == "metadata.annotations"):
			key, ok := strings.CutSuffix(rest, "']")
			if !ok {
				errs.Invalid(fp, p, "a subscript must look like ['key']")
				break
			}
			errs.InvalidMsgs(fp, key, validation.IsQualifiedName(key))
		case p == "metadata.labels" || p == "metadata.annotations" || !slices.Contains(envFieldPaths, p):
			errs.NotSupported(fp, p, envFieldPaths)
		}
	}
	if r := src.ResourceFieldRef; r != nil {
		n++
		if r.GetResource() == "" {
			errs.Required(child(path, "resourceFieldRef.resource"), "")
		} else {
			oneOf(errs, child(path, "resourceFieldRef.resource"), r.GetResource(), envResourceFields...)
		}
		if d := r.GetDivisor(); d != "" {
			if q, ok := validateQuantity(d, child(path, "resourceFieldRef.divisor"), errs); ok && q.MilliValue() <= 0 {
				errs.Invalid(child(path, "resourceFieldRef.divisor"), d, "must be at least 1m")
			}
		}
	}
	if s := src.SecretKeyRef; s != nil {
		n++
		if s.GetName() == "" {
			errs.Required(child(path, "secretKeyRef.name"), "")
		} else {
			errs.InvalidMsgs(child(path, "secretKeyRef.name"), s.GetName(), validation.IsDNS1123Subdomain(s.GetName()))
		}
		if s.GetKey() == "" {
			errs.Required(child(path, "secretKeyRef.key"), "")
		} else {
			errs.InvalidMsgs(child(path, "secretKeyRef.key"), s.GetKey(), validation.IsConfigKey(s.GetKey()))
		}
	}
	switch {
	case n == 0:
		errs.Invalid(path, "", "must specify one of: `fieldRef`, `resourceFieldRef` or `secretKeyRef`")
	case n > 1:
		errs.Invalid(path, "", "may not have more than one field specified at a time")
	}
}

// validateProbe checks one probe; restarts is true for the probes whose
// failure restarts the container (liveness, startup), which must succeed
// once to count and may carry their own grace period.
func validateProbe(p *kplanev1.Probe, path string, restarts bool, errs *validation.ErrorList) {
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
		for i, hd := range h.HttpHeaders {
			hp := index(child(path, "httpGet.httpHeaders"), i)
			if hd.GetName() == "" {
				errs.Required(child(hp, "name"), "")
				continue
			}
			errs.InvalidMsgs(child(hp, "name"), hd.GetName(), validation.IsHTTPHeaderName(hd.GetName()))
		}
	}
	if g := p.Grpc; g != nil {
		handlers++
		errs.InvalidMsgs(child(path, "grpc.port"), g.GetPort(), validation.IsValidPortNum(g.GetPort()))
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
	if restarts && p.SuccessThreshold > 1 {
		errs.Invalid(child(path, "successThreshold"), p.SuccessThreshold, "must be 1")
	}
	if p.TerminationGracePeriodSeconds != nil {
		if !restarts {
			errs.Invalid(child(path, "terminationGracePeriodSeconds"), p.GetTerminationGracePeriodSeconds(), "must not be set for readinessProbes")
		} else {
			errs.Positive(child(path, "terminationGracePeriodSeconds"), p.GetTerminationGracePeriodSeconds())
		}
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
