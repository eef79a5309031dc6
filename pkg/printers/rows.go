package printers

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// None is what a table shows for an empty cell.
const None = "<none>"

// OrNone is s, or None when s is empty.
func OrNone(s string) string {
	if s == "" {
		return None
	}
	return s
}

func podRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	p := o.GetPod()
	ready, restarts := 0, int32(0)
	for _, cs := range p.GetStatus().GetContainerStatuses() {
		if cs.GetReady() {
			ready++
		}
		restarts += cs.GetRestartCount()
	}
	// Sidecars (restartable init containers) count as containers, as in
	// kubectl; every init container's restarts count.
	total := len(p.GetSpec().GetContainers())
	sidecars := sidecarNames(p)
	for _, cs := range p.GetStatus().GetInitContainerStatuses() {
		restarts += cs.GetRestartCount()
		if sidecars[cs.GetName()] && cs.GetReady() {
			ready++
		}
	}
	total += len(sidecars)
	cells := []string{
		p.GetMetadata().GetName(),
		fmt.Sprintf("%d/%d", ready, total),
		PodStatus(p),
		strconv.Itoa(int(restarts)),
		Age(p.GetMetadata().GetCreationTimestamp(), now),
	}
	return cells, []string{OrNone(p.GetStatus().GetPodIp()), OrNone(p.GetSpec().GetNodeName()), OrNone(p.GetStatus().GetNominatedNodeName())}
}

// PodStatus is the one-word state kubectl shows for a pod: the most telling
// of deletion, a waiting or failed container, an init step, or the phase.
func PodStatus(p *kplanev1.Pod) string {
	st := p.GetStatus()
	reason := st.GetPhase()
	if st.GetReason() != "" {
		reason = st.GetReason()
	}
	if reason == "" {
		reason = "Pending"
	}
	initializing := false
	inits := st.GetInitContainerStatuses()
	sidecars := sidecarNames(p)
	for i, cs := range inits {
		if t := cs.GetState().GetTerminated(); t != nil && t.GetExitCode() == 0 {
			continue
		}
		if sidecars[cs.GetName()] && cs.GetStarted() {
			continue // a started sidecar lets initialization go on
		}
		initializing = true
		switch {
		case cs.GetState().GetTerminated() != nil:
			reason = "Init:" + terminatedReason(cs.GetState().GetTerminated())
		case cs.GetState().GetWaiting().GetReason() != "" && cs.GetState().GetWaiting().GetReason() != "PodInitializing":
			reason = "Init:" + cs.GetState().GetWaiting().GetReason()
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.GetSpec().GetInitContainers()))
		}
		break
	}
	if !initializing {
		running := false
		css := st.GetContainerStatuses()
		// The last container with something to say wins, as in kubectl.
		for i := len(css) - 1; i >= 0; i-- {
			s := css[i].GetState()
			switch {
			case s.GetWaiting().GetReason() != "":
				reason = s.GetWaiting().GetReason()
			case s.GetTerminated() != nil:
				reason = terminatedReason(s.GetTerminated())
			case s.GetRunning() != nil && css[i].GetReady():
				running = true
			}
		}
		if reason == "Completed" && running {
			reason = "Running"
		}
	}
	if p.GetMetadata().GetDeletionTimestamp() != nil {
		reason = "Terminating"
	}
	return reason
}

// sidecarNames are the pod's init containers with restartPolicy Always.
func sidecarNames(p *kplanev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, c := range p.GetSpec().GetInitContainers() {
		if c.GetRestartPolicy() == "Always" {
			out[c.GetName()] = true
		}
	}
	return out
}

func terminatedReason(t *kplanev1.ContainerStateTerminated) string {
	switch {
	case t.GetReason() != "":
		return t.GetReason()
	case t.GetSignal() != 0:
		return fmt.Sprintf("Signal:%d", t.GetSignal())
	default:
		return fmt.Sprintf("ExitCode:%d", t.GetExitCode())
	}
}

func replicaSetRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	rs := o.GetReplicaSet()
	return replicasRow(rs.GetMetadata(), rs.GetSpec().GetReplicas(), rs.GetStatus(), rs.GetSpec().GetTemplate(), LabelSelector(rs.GetSpec().GetSelector()), now)
}

// deploymentRow is kubectl's: READY ready/desired, UP-TO-DATE, AVAILABLE.
func deploymentRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	d := o.GetDeployment()
	st := d.GetStatus()
	cells := []string{
		d.GetMetadata().GetName(),
		fmt.Sprintf("%d/%d", st.GetReadyReplicas(), d.GetSpec().GetReplicas()),
		strconv.Itoa(int(st.GetUpdatedReplicas())),
		strconv.Itoa(int(st.GetAvailableReplicas())),
		Age(d.GetMetadata().GetCreationTimestamp(), now),
	}
	names, images := containers(d.GetSpec().GetTemplate().GetSpec())
	return cells, []string{names, images, LabelSelector(d.GetSpec().GetSelector())}
}

func statefulSetRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	ss := o.GetStatefulSet()
	cells := []string{
		ss.GetMetadata().GetName(),
		fmt.Sprintf("%d/%d", ss.GetStatus().GetReadyReplicas(), ss.GetSpec().GetReplicas()),
		Age(ss.GetMetadata().GetCreationTimestamp(), now),
	}
	names, images := containers(ss.GetSpec().GetTemplate().GetSpec())
	return cells, []string{names, images}
}

func daemonSetRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	ds := o.GetDaemonSet()
	st := ds.GetStatus()
	cells := []string{
		ds.GetMetadata().GetName(),
		strconv.Itoa(int(st.GetDesiredNumberScheduled())),
		strconv.Itoa(int(st.GetCurrentNumberScheduled())),
		strconv.Itoa(int(st.GetNumberReady())),
		strconv.Itoa(int(st.GetUpdatedNumberScheduled())),
		strconv.Itoa(int(st.GetNumberAvailable())),
		MapSelector(ds.GetSpec().GetTemplate().GetSpec().GetNodeSelector()),
		Age(ds.GetMetadata().GetCreationTimestamp(), now),
	}
	names, images := containers(ds.GetSpec().GetTemplate().GetSpec())
	return cells, []string{names, images, LabelSelector(ds.GetSpec().GetSelector())}
}

// controllerRevisionRow names the revision's controller as kubectl does:
// lower-case kind, group, name ("statefulset.apps/db").
func controllerRevisionRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	cr := o.GetControllerRevision()
	owner := "<none>"
	for _, r := range cr.GetMetadata().GetOwnerReferences() {
		if r.GetController() {
			kind := strings.ToLower(r.GetKind())
			if g, _, ok := strings.Cut(r.GetApiVersion(), "/"); ok {
				kind += "." + g
			}
			owner = kind + "/" + r.GetName()
		}
	}
	return []string{cr.GetMetadata().GetName(), owner, strconv.FormatInt(cr.GetRevision(), 10),
		Age(cr.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func replicationControllerRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	rc := o.GetReplicationController()
	return replicasRow(rc.GetMetadata(), rc.GetSpec().GetReplicas(), rc.GetStatus(), rc.GetSpec().GetTemplate(), MapSelector(rc.GetSpec().GetSelector()), now)
}

func replicasRow(m *kplanev1.ObjectMeta, desired int32, st *kplanev1.ReplicaSetStatus, tmpl *kplanev1.PodTemplateSpec, selector string, now time.Time) ([]string, []string) {
	cells := []string{
		m.GetName(),
		strconv.Itoa(int(desired)),
		strconv.Itoa(int(st.GetReplicas())),
		strconv.Itoa(int(st.GetReadyReplicas())),
		Age(m.GetCreationTimestamp(), now),
	}
	names, images := containers(tmpl.GetSpec())
	return cells, []string{names, images, selector}
}

func containers(spec *kplanev1.PodSpec) (names, images string) {
	var n, i []string
	for _, c := range spec.GetContainers() {
		n = append(n, c.GetName())
		i = append(i, c.GetImage())
	}
	return OrNone(strings.Join(n, ",")), OrNone(strings.Join(i, ","))
}

// LabelSelector formats a set-based selector in the selector syntax,
// "app=web,tier in (a,b),!legacy", or "<none>" when it is empty.
func LabelSelector(s *kplanev1.LabelSelector) string {
	var parts []string
	keys := SortedKeys(s.GetMatchLabels())
	for _, k := range keys {
		parts = append(parts, k+"="+s.GetMatchLabels()[k])
	}
	for _, r := range s.GetMatchExpressions() {
		switch r.GetOperator() {
		case "In":
			parts = append(parts, fmt.Sprintf("%s in (%s)", r.GetKey(), strings.Join(r.GetValues(), ",")))
		case "NotIn":
			parts = append(parts, fmt.Sprintf("%s notin (%s)", r.GetKey(), strings.Join(r.GetValues(), ",")))
		case "Exists":
			parts = append(parts, r.GetKey())
		case "DoesNotExist":
			parts = append(parts, "!"+r.GetKey())
		default:
			parts = append(parts, fmt.Sprintf("%s %s (%s)", r.GetKey(), r.GetOperator(), strings.Join(r.GetValues(), ",")))
		}
	}
	return OrNone(strings.Join(parts, ","))
}

// MapSelector formats an equality selector or label map as "k=v,k2=v2"
// (sorted), or "<none>" when empty.
func MapSelector(m map[string]string) string {
	var parts []string
	for _, k := range SortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return OrNone(strings.Join(parts, ","))
}

// SortedKeys returns the keys of m in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func nodeRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	n := o.GetNode()
	info := n.GetStatus().GetNodeInfo()
	cells := []string{n.GetMetadata().GetName(), NodeStatus(n), NodeRoles(n), Age(n.GetMetadata().GetCreationTimestamp(), now), OrNone(info.GetKubeletVersion())}
	var internal, external []string
	for _, a := range n.GetStatus().GetAddresses() {
		switch a.GetType() {
		case "InternalIP":
			internal = append(internal, a.GetAddress())
		case "ExternalIP":
			external = append(external, a.GetAddress())
		}
	}
	return cells, []string{
		OrNone(strings.Join(internal, ",")), OrNone(strings.Join(external, ",")),
		OrNone(info.GetOsImage()), OrNone(info.GetKernelVersion()), OrNone(info.GetContainerRuntimeVersion()),
	}
}

// NodeStatus is, as in kubectl, Ready when the Ready condition is True,
// NotReady when it is False or Unknown (a silent node), and Unknown only
// without a Ready condition; ",SchedulingDisabled" marks a cordoned node.
func NodeStatus(n *kplanev1.Node) string {
	s := "Unknown"
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() != "Ready" {
			continue
		}
		if c.GetStatus() == "True" {
			s = "Ready"
		} else {
			s = "NotReady"
		}
	}
	if n.GetSpec().GetUnschedulable() {
		s += ",SchedulingDisabled"
	}
	return s
}

// NodeRoles lists the roles named by node-role.kubernetes.io/<role> labels.
func NodeRoles(n *kplanev1.Node) string {
	var roles []string
	for _, k := range SortedKeys(n.GetMetadata().GetLabels()) {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	if r := n.GetMetadata().GetLabels()["kubernetes.io/role"]; r != "" {
		roles = append(roles, r)
	}
	return OrNone(strings.Join(roles, ","))
}

func serviceRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	s := o.GetService()
	spec := s.GetSpec()
	typ := spec.GetType()
	if typ == "" {
		typ = "ClusterIP"
	}
	external := None
	switch typ {
	case "ExternalName":
		external = spec.GetExternalName()
	case "LoadBalancer":
		// The load balancer's addresses once the cloud controller wrote
		// them, as kubectl prints them.
		var addrs []string
		for _, in := range s.GetStatus().GetLoadBalancer().GetIngress() {
			if in.GetIp() != "" {
				addrs = append(addrs, in.GetIp())
			} else if in.GetHostname() != "" {
				addrs = append(addrs, in.GetHostname())
			}
		}
		external = "<pending>"
		if len(addrs) > 0 {
			external = strings.Join(addrs, ",")
		}
	}
	cells := []string{s.GetMetadata().GetName(), typ, OrNone(spec.GetClusterIp()), external, ServicePorts(spec.GetPorts()), Age(s.GetMetadata().GetCreationTimestamp(), now)}
	return cells, []string{MapSelector(spec.GetSelector())}
}

// ServicePorts formats ports as "80/TCP,443:30443/TCP".
func ServicePorts(ports []*kplanev1.ServicePort) string {
	var out []string
	for _, p := range ports {
		proto := p.GetProtocol()
		if proto == "" {
			proto = "TCP"
		}
		if p.GetNodePort() != 0 {
			out = append(out, fmt.Sprintf("%d:%d/%s", p.GetPort(), p.GetNodePort(), proto))
		} else {
			out = append(out, fmt.Sprintf("%d/%s", p.GetPort(), proto))
		}
	}
	return OrNone(strings.Join(out, ","))
}

func endpointsRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	e := o.GetEndpoints()
	return []string{e.GetMetadata().GetName(), EndpointsSummary(e, 3), Age(e.GetMetadata().GetCreationTimestamp(), now)}, nil
}

// EndpointsSummary lists up to max ready "ip:port" pairs, then "+ N more...".
func EndpointsSummary(e *kplanev1.Endpoints, max int) string {
	var all []string
	for _, ss := range e.GetSubsets() {
		for _, a := range ss.GetAddresses() {
			if len(ss.GetPorts()) == 0 {
				all = append(all, a.GetIp())
				continue
			}
			for _, p := range ss.GetPorts() {
				all = append(all, fmt.Sprintf("%s:%d", a.GetIp(), p.GetPort()))
			}
		}
	}
	if len(all) > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(all[:max], ","), len(all)-max)
	}
	return OrNone(strings.Join(all, ","))
}

func jobRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	j := o.GetJob()
	spec, st := j.GetSpec(), j.GetStatus()
	var completions string
	switch {
	case spec.Completions != nil:
		completions = fmt.Sprintf("%d/%d", st.GetSucceeded(), spec.GetCompletions())
	case spec.GetParallelism() > 1:
		completions = fmt.Sprintf("%d/1 of %d", st.GetSucceeded(), spec.GetParallelism())
	default:
		completions = fmt.Sprintf("%d/1", st.GetSucceeded())
	}
	var duration string
	if st.GetStartTime() != nil {
		end := now
		if st.GetCompletionTime() != nil {
			end = st.GetCompletionTime().AsTime()
		}
		duration = HumanDuration(end.Sub(st.GetStartTime().AsTime()))
	}
	cells := []string{j.GetMetadata().GetName(), JobStatus(j), completions, duration, Age(j.GetMetadata().GetCreationTimestamp(), now)}
	names, images := containers(spec.GetTemplate().GetSpec())
	return cells, []string{names, images, LabelSelector(spec.GetSelector())}
}

// JobStatus is the one word kubectl 1.32 shows for a Job: Complete or
// Failed once finished, Terminating while deleted, else Suspended,
// FailureTarget or SuccessCriteriaMet from the conditions, else Running.
func JobStatus(j *kplanev1.Job) string {
	has := func(typ string) bool {
		for _, c := range j.GetStatus().GetConditions() {
			if c.GetType() == typ && c.GetStatus() == kplanev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	switch {
	case has(kplanev1.JobComplete):
		return kplanev1.JobComplete
	case has(kplanev1.JobFailed):
		return kplanev1.JobFailed
	case j.GetMetadata().GetDeletionTimestamp() != nil:
		return "Terminating"
	case has(kplanev1.JobSuspended):
		return kplanev1.JobSuspended
	case has(kplanev1.JobFailureTarget):
		return kplanev1.JobFailureTarget
	case has(kplanev1.JobSuccessCriteriaMet):
		return kplanev1.JobSuccessCriteriaMet
	}
	return "Running"
}

func cronJobRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	cj := o.GetCronJob()
	spec, st := cj.GetSpec(), cj.GetStatus()
	tz := None
	if spec.TimeZone != nil {
		tz = spec.GetTimeZone()
	}
	last := None
	if st.GetLastScheduleTime() != nil {
		last = Age(st.GetLastScheduleTime(), now)
	}
	cells := []string{cj.GetMetadata().GetName(), spec.GetSchedule(), tz, BoolPtr(spec.Suspend),
		strconv.Itoa(len(st.GetActive())), last, Age(cj.GetMetadata().GetCreationTimestamp(), now)}
	js := spec.GetJobTemplate().GetSpec()
	names, images := containers(js.GetTemplate().GetSpec())
	return cells, []string{names, images, LabelSelector(js.GetSelector())}
}

// BoolPtr prints an optional bool as kubectl does: True, False or <unset>.
func BoolPtr(b *bool) string {
	switch {
	case b == nil:
		return "<unset>"
	case *b:
		return "True"
	}
	return "False"
}

// AccessModes abbreviates access modes as kubectl does: "RWO,ROX".
func AccessModes(modes []string) string {
	short := map[string]string{"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
	out := make([]string, 0, len(modes))
	for _, m := range modes {
		if s, ok := short[m]; ok {
			m = s
		}
		out = append(out, m)
	}
	return strings.Join(out, ",")
}

func pvRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	pv := o.GetPersistentVolume()
	spec := pv.GetSpec()
	claim := ""
	if ref := spec.GetClaimRef(); ref != nil && ref.GetName() != "" {
		claim = ref.GetNamespace() + "/" + ref.GetName()
	}
	policy := spec.GetPersistentVolumeReclaimPolicy()
	if policy == "" {
		policy = "Retain"
	}
	cells := []string{
		pv.GetMetadata().GetName(), spec.GetCapacity()["storage"], AccessModes(spec.GetAccessModes()), policy,
		pv.GetStatus().GetPhase(), claim, spec.GetStorageClassName(), pv.GetStatus().GetReason(),
		Age(pv.GetMetadata().GetCreationTimestamp(), now),
	}
	return cells, []string{VolumeMode(spec.GetVolumeMode())}
}

// VolumeMode shows a volumeMode, Filesystem when unset.
func VolumeMode(m string) string {
	if m == "" {
		return "Filesystem"
	}
	return m
}

func pvcRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	pvc := o.GetPersistentVolumeClaim()
	spec, st := pvc.GetSpec(), pvc.GetStatus()
	class := "<unset>"
	if spec.StorageClassName != nil {
		class = spec.GetStorageClassName()
	}
	phase := st.GetPhase()
	if phase == "" {
		phase = "Pending"
	}
	cells := []string{
		pvc.GetMetadata().GetName(), phase, spec.GetVolumeName(), st.GetCapacity()["storage"],
		AccessModes(st.GetAccessModes()), class, Age(pvc.GetMetadata().GetCreationTimestamp(), now),
	}
	return cells, []string{VolumeMode(spec.GetVolumeMode())}
}

func storageClassRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	sc := o.GetStorageClass()
	name := sc.GetMetadata().GetName()
	if sc.GetMetadata().GetAnnotations()["storageclass.kubernetes.io/is-default-class"] == "true" {
		name += " (default)"
	}
	policy, mode := sc.GetReclaimPolicy(), sc.GetVolumeBindingMode()
	if policy == "" {
		policy = "Delete"
	}
	if mode == "" {
		mode = "Immediate"
	}
	return []string{name, sc.GetProvisioner(), policy, mode, strconv.FormatBool(sc.GetAllowVolumeExpansion()), Age(sc.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func priorityClassRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	pc := o.GetPriorityClass()
	policy := pc.GetPreemptionPolicy()
	if policy == "" {
		policy = kplanev1.PreemptLowerPriority
	}
	return []string{pc.GetMetadata().GetName(), strconv.Itoa(int(pc.GetValue())), strconv.FormatBool(pc.GetGlobalDefault()),
		Age(pc.GetMetadata().GetCreationTimestamp(), now), policy}, nil
}

// podDisruptionBudgetRow prints as kubectl does: N/A for the bound not
// set, and the disruptions the budget allows now.
func podDisruptionBudgetRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	pdb := o.GetPodDisruptionBudget()
	minAvailable, maxUnavailable := "N/A", "N/A"
	if v := pdb.GetSpec().GetMinAvailable(); v != nil {
		minAvailable = v.Text()
	}
	if v := pdb.GetSpec().GetMaxUnavailable(); v != nil {
		maxUnavailable = v.Text()
	}
	return []string{pdb.GetMetadata().GetName(), minAvailable, maxUnavailable,
		strconv.Itoa(int(pdb.GetStatus().GetDisruptionsAllowed())), Age(pdb.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func serviceAccountRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	sa := o.GetServiceAccount()
	return []string{sa.GetMetadata().GetName(), strconv.Itoa(len(sa.GetSecrets())), Age(sa.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func secretRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	s := o.GetSecret()
	keys := map[string]bool{}
	for k := range s.GetData() {
		keys[k] = true
	}
	for k := range s.GetStringData() {
		keys[k] = true
	}
	typ := s.GetType()
	if typ == "" {
		typ = "Opaque"
	}
	return []string{s.GetMetadata().GetName(), typ, strconv.Itoa(len(keys)), Age(s.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func leaseRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	l := o.GetLease()
	return []string{l.GetMetadata().GetName(), l.GetSpec().GetHolderIdentity(), Age(l.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func namespaceRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	ns := o.GetNamespace()
	phase := ns.GetStatus().GetPhase()
	if phase == "" {
		phase = "Active"
	}
	return []string{ns.GetMetadata().GetName(), phase, Age(ns.GetMetadata().GetCreationTimestamp(), now)}, nil
}

func eventRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	e := o.GetEvent()
	last := e.GetLastTimestamp()
	if last == nil {
		last = e.GetFirstTimestamp()
	}
	if last == nil {
		last = e.GetMetadata().GetCreationTimestamp()
	}
	ref := e.GetInvolvedObject()
	object := strings.ToLower(ref.GetKind()) + "/" + ref.GetName()
	count := e.GetCount()
	if count == 0 {
		count = 1
	}
	source := e.GetSource().GetComponent()
	if h := e.GetSource().GetHost(); h != "" {
		source += ", " + h
	}
	if source == "" {
		source = e.GetReportingComponent()
	}
	cells := []string{Age(last, now), e.GetType(), e.GetReason(), object, e.GetMessage()}
	return cells, []string{source, Age(e.GetFirstTimestamp(), now), strconv.Itoa(int(count)), e.GetMetadata().GetName()}
}

// roleRow is a Role's or ClusterRole's: kubectl shows the creation time
// itself rather than an age.
func roleRow(o *kplanev1.Object, _ time.Time) ([]string, []string) {
	m := o.Meta()
	created := "<unknown>"
	if ts := m.GetCreationTimestamp(); ts != nil {
		created = ts.AsTime().UTC().Format(time.RFC3339)
	}
	return []string{m.GetName(), created}, nil
}

// bindingRow is a RoleBinding's or ClusterRoleBinding's: the role as
// Kind/name and, wide, its subjects by kind.
func bindingRow(o *kplanev1.Object, now time.Time) ([]string, []string) {
	var ref *kplanev1.RoleRef
	var subjects []*kplanev1.Subject
	if b := o.GetRoleBinding(); b != nil {
		ref, subjects = b.GetRoleRef(), b.GetSubjects()
	} else {
		b := o.GetClusterRoleBinding()
		ref, subjects = b.GetRoleRef(), b.GetSubjects()
	}
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.GetKind() {
		case "User":
			users = append(users, s.GetName())
		case "Group":
			groups = append(groups, s.GetName())
		case "ServiceAccount":
			sas = append(sas, s.GetNamespace()+"/"+s.GetName())
		}
	}
	m := o.Meta()
	return []string{m.GetName(), ref.GetKind() + "/" + ref.GetName(), Age(m.GetCreationTimestamp(), now)},
		[]string{strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}
