// Package printers is kpctl's describe view; the table columns are
// the shared github.com/kplane/kplane/pkg/printers.
package printers

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/manifest"
	cols "github.com/kplane/kplane/pkg/printers"
	"github.com/kplane/kplane/pkg/rollout"
)

// Related is what describe shows besides the object itself.
type Related struct {
	// Events are Event objects whose involvedObject is the described object.
	Events []*kplanev1.Object
	// Endpoints is the Endpoints object of a described Service, if any.
	Endpoints *kplanev1.Endpoints
	// UsedBy are the names of the pods that use a described
	// PersistentVolumeClaim.
	UsedBy []string
	// ReplicaSets are the ReplicaSets a described Deployment controls.
	ReplicaSets []*kplanev1.ReplicaSet
}

// describer collects "Key:<tab>value" lines; a tabwriter aligns them.
type describer struct {
	tw  *tabwriter.Writer
	now time.Time
	// err is the first write error; Describe returns it, so the many
	// printing helpers need not each return one.
	err error
}

func (d *describer) printf(format string, args ...any) {
	if d.err == nil {
		_, d.err = fmt.Fprintf(d.tw, format, args...)
	}
}

func (d *describer) line(level int, key string, format string, args ...any) {
	indent := strings.Repeat("  ", level)
	if key == "" {
		d.printf("%s\t"+format+"\n", append([]any{indent}, args...)...)
		return
	}
	d.printf("%s%s:\t"+format+"\n", append([]any{indent, key}, args...)...)
}

// section starts a heading line without a value, e.g. "Containers:".
func (d *describer) section(level int, key string) {
	d.printf("%s%s:\n", strings.Repeat("  ", level), key)
}

// multi prints one value per line under key, or <cols.None>.
func (d *describer) multi(level int, key string, values []string) {
	if len(values) == 0 {
		d.line(level, key, "%s", cols.None)
		return
	}
	d.line(level, key, "%s", values[0])
	for _, v := range values[1:] {
		d.line(level, "", "%s", v)
	}
}

func (d *describer) kv(level int, key string, m map[string]string) {
	var vals []string
	for _, k := range cols.SortedKeys(m) {
		vals = append(vals, k+"="+m[k])
	}
	d.multi(level, key, vals)
}

// table prints a header, a dashed rule and rows, indented under a section.
func (d *describer) table(level int, headers []string, rows [][]string) {
	indent := strings.Repeat("  ", level)
	rule := make([]string, len(headers))
	for i, h := range headers {
		rule[i] = strings.Repeat("-", len(h))
	}
	d.printf("%s%s\n", indent, strings.Join(headers, "\t"))
	d.printf("%s%s\n", indent, strings.Join(rule, "\t"))
	for _, r := range rows {
		d.printf("%s%s\n", indent, strings.Join(r, "\t"))
	}
}

// withoutLastApplied drops the annotation apply keeps: it is long and
// repeats the object.
func withoutLastApplied(m map[string]string) map[string]string {
	if _, ok := m[manifest.LastAppliedAnnotation]; !ok {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != manifest.LastAppliedAnnotation {
			out[k] = v
		}
	}
	return out
}

// Timestamp formats a time as describe shows it, or <unset>.
func Timestamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "<unset>"
	}
	return ts.AsTime().UTC().Format(time.RFC1123Z)
}

// Describe prints a human-readable report of one object: metadata, the
// kind's notable fields, conditions, and related events.
func Describe(w io.Writer, obj *kplanev1.Object, rel Related, now time.Time) error {
	d := &describer{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0), now: now}
	m := obj.Meta()
	d.line(0, "Name", "%s", m.GetName())
	if obj.Info().Namespaced {
		d.line(0, "Namespace", "%s", m.GetNamespace())
	}
	if n := obj.GetNode(); n != nil {
		d.line(0, "Roles", "%s", cols.NodeRoles(n))
	}
	d.kv(0, "Labels", m.GetLabels())
	d.kv(0, "Annotations", withoutLastApplied(m.GetAnnotations()))
	d.line(0, "CreationTimestamp", "%s", Timestamp(m.GetCreationTimestamp()))
	if m.GetDeletionTimestamp() != nil {
		d.line(0, "DeletionTimestamp", "%s", Timestamp(m.GetDeletionTimestamp()))
	}
	for _, ref := range m.GetOwnerReferences() {
		if ref.GetController() {
			d.line(0, "Controlled By", "%s/%s", ref.GetKind(), ref.GetName())
		}
	}
	if len(m.GetFinalizers()) > 0 {
		d.line(0, "Finalizers", "[%s]", strings.Join(m.GetFinalizers(), " "))
	}
	switch {
	case obj.GetPod() != nil:
		d.pod(obj.GetPod())
	case obj.GetReplicaSet() != nil:
		rs := obj.GetReplicaSet()
		d.line(0, "Selector", "%s", cols.LabelSelector(rs.GetSpec().GetSelector()))
		d.replicas(rs.GetSpec().GetReplicas(), rs.GetStatus(), rs.GetSpec().GetTemplate())
	case obj.GetReplicationController() != nil:
		rc := obj.GetReplicationController()
		d.line(0, "Selector", "%s", cols.MapSelector(rc.GetSpec().GetSelector()))
		d.replicas(rc.GetSpec().GetReplicas(), rc.GetStatus(), rc.GetSpec().GetTemplate())
	case obj.GetDeployment() != nil:
		d.deployment(obj.GetDeployment(), rel.ReplicaSets)
	case obj.GetStatefulSet() != nil:
		d.statefulSet(obj.GetStatefulSet())
	case obj.GetDaemonSet() != nil:
		d.daemonSet(obj.GetDaemonSet())
	case obj.GetNode() != nil:
		d.node(obj.GetNode())
	case obj.GetService() != nil:
		d.service(obj.GetService(), rel.Endpoints)
	case obj.GetJob() != nil:
		d.job(obj.GetJob())
	case obj.GetCronJob() != nil:
		d.cronJob(obj.GetCronJob())
	case obj.GetSecret() != nil:
		d.secret(obj.GetSecret())
	case obj.GetEndpoints() != nil:
		d.endpoints(obj.GetEndpoints())
	case obj.GetPersistentVolume() != nil:
		d.persistentVolume(obj.GetPersistentVolume())
	case obj.GetPersistentVolumeClaim() != nil:
		d.persistentVolumeClaim(obj.GetPersistentVolumeClaim(), rel.UsedBy)
	case obj.GetRole() != nil:
		d.rules(obj.GetRole().GetRules())
	case obj.GetClusterRole() != nil:
		d.rules(obj.GetClusterRole().GetRules())
	case obj.GetRoleBinding() != nil:
		d.binding(obj.GetRoleBinding().GetRoleRef(), obj.GetRoleBinding().GetSubjects())
	case obj.GetClusterRoleBinding() != nil:
		d.binding(obj.GetClusterRoleBinding().GetRoleRef(), obj.GetClusterRoleBinding().GetSubjects())
	default:
		if err := d.generic(obj); err != nil {
			return err
		}
	}
	d.events(rel.Events)
	if d.err != nil {
		return d.err
	}
	return d.tw.Flush()
}

func (d *describer) pod(p *kplanev1.Pod) {
	spec, st := p.GetSpec(), p.GetStatus()
	d.line(0, "Priority", "%d", spec.GetPriority())
	if spec.GetPriorityClassName() != "" {
		d.line(0, "Priority Class Name", "%s", spec.GetPriorityClassName())
	}
	d.line(0, "Service Account", "%s", cols.OrNone(spec.GetServiceAccountName()))
	node := cols.OrNone(spec.GetNodeName())
	if st.GetHostIp() != "" {
		node += "/" + st.GetHostIp()
	}
	d.line(0, "Node", "%s", node)
	d.line(0, "Start Time", "%s", Timestamp(st.GetStartTime()))
	d.line(0, "Status", "%s", cols.PodStatus(p))
	if st.GetReason() != "" {
		d.line(0, "Reason", "%s", st.GetReason())
	}
	if st.GetMessage() != "" {
		d.line(0, "Message", "%s", st.GetMessage())
	}
	d.line(0, "IP", "%s", cols.OrNone(st.GetPodIp()))
	if st.GetNominatedNodeName() != "" {
		d.line(0, "NominatedNodeName", "%s", st.GetNominatedNodeName())
	}
	statuses := map[string]*kplanev1.ContainerStatus{}
	for _, cs := range append(st.GetInitContainerStatuses(), st.GetContainerStatuses()...) {
		statuses[cs.GetName()] = cs
	}
	if len(spec.GetInitContainers()) > 0 {
		d.section(0, "Init Containers")
		for _, c := range spec.GetInitContainers() {
			d.container(1, c, statuses[c.GetName()])
		}
	}
	d.section(0, "Containers")
	for _, c := range spec.GetContainers() {
		d.container(1, c, statuses[c.GetName()])
	}
	d.conditions(st.GetConditions(), false)
	if len(spec.GetVolumes()) > 0 {
		d.section(0, "Volumes")
		for _, v := range spec.GetVolumes() {
			d.section(1, v.GetName())
			switch {
			case v.GetPersistentVolumeClaim() != nil:
				d.line(2, "Type", "PersistentVolumeClaim")
				d.line(2, "ClaimName", "%s", v.GetPersistentVolumeClaim().GetClaimName())
			case v.GetEmptyDir() != nil:
				d.line(2, "Type", "EmptyDir")
				if m := v.GetEmptyDir().GetMedium(); m != "" {
					d.line(2, "Medium", "%s", m)
				}
			case v.GetSecret() != nil:
				d.line(2, "Type", "Secret")
				d.line(2, "SecretName", "%s", v.GetSecret().GetSecretName())
			case v.GetHostPath() != nil:
				d.line(2, "Type", "HostPath")
				d.line(2, "Path", "%s", v.GetHostPath().GetPath())
			}
		}
	}
	d.kv(0, "Node-Selectors", spec.GetNodeSelector())
	var tols []string
	for _, t := range spec.GetTolerations() {
		s := t.GetKey()
		if t.GetOperator() == "Exists" {
			s += " op=Exists"
		} else if t.GetValue() != "" {
			s += "=" + t.GetValue()
		}
		if t.GetEffect() != "" {
			s += ":" + t.GetEffect()
		}
		if t.TolerationSeconds != nil {
			s += fmt.Sprintf(" for %ds", t.GetTolerationSeconds())
		}
		tols = append(tols, s)
	}
	d.multi(0, "Tolerations", tols)
	if a := affinitySummary(spec.GetAffinity()); len(a) > 0 {
		d.multi(0, "Affinity", a)
	}
}

// affinitySummary is one line per affinity rule of a pod (kubectl
// describe does not show affinity; the scheduler's reasons refer to it).
func affinitySummary(a *kplanev1.Affinity) []string {
	var out []string
	terms := func(ts []*kplanev1.NodeSelectorTerm) string {
		var parts []string
		for _, t := range ts {
			parts = append(parts, nodeTerm(t))
		}
		return strings.Join(parts, " or ")
	}
	na := a.GetNodeAffinity()
	if req := na.GetRequiredDuringSchedulingIgnoredDuringExecution(); req != nil {
		out = append(out, "node, required: "+terms(req.GetNodeSelectorTerms()))
	}
	for _, p := range na.GetPreferredDuringSchedulingIgnoredDuringExecution() {
		out = append(out, fmt.Sprintf("node, preferred (weight %d): %s", p.GetWeight(), nodeTerm(p.GetPreference())))
	}
	pod := func(kind string, req []*kplanev1.PodAffinityTerm, pref []*kplanev1.WeightedPodAffinityTerm) {
		for _, t := range req {
			out = append(out, fmt.Sprintf("%s, required: %s", kind, podTerm(t)))
		}
		for _, w := range pref {
			out = append(out, fmt.Sprintf("%s, preferred (weight %d): %s", kind, w.GetWeight(), podTerm(w.GetPodAffinityTerm())))
		}
	}
	pa, anti := a.GetPodAffinity(), a.GetPodAntiAffinity()
	pod("pod affinity", pa.GetRequiredDuringSchedulingIgnoredDuringExecution(), pa.GetPreferredDuringSchedulingIgnoredDuringExecution())
	pod("pod anti-affinity", anti.GetRequiredDuringSchedulingIgnoredDuringExecution(), anti.GetPreferredDuringSchedulingIgnoredDuringExecution())
	return out
}

func nodeTerm(t *kplanev1.NodeSelectorTerm) string {
	var parts []string
	for _, r := range append(t.GetMatchExpressions(), t.GetMatchFields()...) {
		s := r.GetKey() + " " + r.GetOperator()
		if len(r.GetValues()) > 0 {
			s += " [" + strings.Join(r.GetValues(), " ") + "]"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func podTerm(t *kplanev1.PodAffinityTerm) string {
	s := fmt.Sprintf("pods %s by %s", cols.LabelSelector(t.GetLabelSelector()), t.GetTopologyKey())
	if len(t.GetNamespaces()) > 0 {
		s += " in " + strings.Join(t.GetNamespaces(), ",")
	}
	return s
}

func (d *describer) container(level int, c *kplanev1.Container, cs *kplanev1.ContainerStatus) {
	d.section(level, c.GetName())
	level++
	d.line(level, "Image", "%s", c.GetImage())
	var ports []string
	for _, p := range c.GetPorts() {
		proto := p.GetProtocol()
		if proto == "" {
			proto = "TCP"
		}
		ports = append(ports, fmt.Sprintf("%d/%s", p.GetContainerPort(), proto))
	}
	d.line(level, "Port", "%s", cols.OrNone(strings.Join(ports, ", ")))
	if len(c.GetCommand()) > 0 {
		d.multi(level, "Command", c.GetCommand())
	}
	if len(c.GetArgs()) > 0 {
		d.multi(level, "Args", c.GetArgs())
	}
	if cs != nil {
		d.state(level, "State", cs.GetState())
		if ls := cs.GetLastState(); ls.GetRunning() != nil || ls.GetWaiting() != nil || ls.GetTerminated() != nil {
			d.state(level, "Last State", ls)
		}
		d.line(level, "Ready", "%t", cs.GetReady())
		d.line(level, "Restart Count", "%d", cs.GetRestartCount())
	}
	if r := c.GetResources(); len(r.GetLimits()) > 0 || len(r.GetRequests()) > 0 {
		d.kv(level, "Limits", r.GetLimits())
		d.kv(level, "Requests", r.GetRequests())
	}
	var env []string
	for _, e := range c.GetEnv() {
		env = append(env, e.GetName()+"="+e.GetValue())
	}
	d.multi(level, "Environment", env)
	var mounts []string
	for _, m := range c.GetVolumeMounts() {
		mode := "rw"
		if m.GetReadOnly() {
			mode = "ro"
		}
		mounts = append(mounts, fmt.Sprintf("%s from %s (%s)", m.GetMountPath(), m.GetName(), mode))
	}
	d.multi(level, "Mounts", mounts)
}

func (d *describer) state(level int, key string, s *kplanev1.ContainerState) {
	switch {
	case s.GetRunning() != nil:
		d.line(level, key, "Running")
		d.line(level+1, "Started", "%s", Timestamp(s.GetRunning().GetStartedAt()))
	case s.GetTerminated() != nil:
		t := s.GetTerminated()
		d.line(level, key, "Terminated")
		d.line(level+1, "Reason", "%s", t.GetReason())
		d.line(level+1, "Exit Code", "%d", t.GetExitCode())
		d.line(level+1, "Started", "%s", Timestamp(t.GetStartedAt()))
		d.line(level+1, "Finished", "%s", Timestamp(t.GetFinishedAt()))
	case s.GetWaiting() != nil:
		d.line(level, key, "Waiting")
		d.line(level+1, "Reason", "%s", s.GetWaiting().GetReason())
	default:
		d.line(level, key, "Waiting")
	}
}

func (d *describer) replicas(desired int32, st *kplanev1.ReplicaSetStatus, tmpl *kplanev1.PodTemplateSpec) {
	d.line(0, "Replicas", "%d current / %d desired", st.GetReplicas(), desired)
	d.line(0, "Pods Status", "%d Ready / %d Available", st.GetReadyReplicas(), st.GetAvailableReplicas())
	d.template(tmpl)
	d.conditions(st.GetConditions(), false)
}

func (d *describer) template(t *kplanev1.PodTemplateSpec) {
	d.section(0, "Pod Template")
	d.kv(1, "Labels", t.GetMetadata().GetLabels())
	d.section(1, "Containers")
	for _, c := range t.GetSpec().GetContainers() {
		d.container(2, c, nil)
	}
}

func (d *describer) node(n *kplanev1.Node) {
	spec, st := n.GetSpec(), n.GetStatus()
	var taints []string
	for _, t := range spec.GetTaints() {
		s := t.GetKey()
		if t.GetValue() != "" {
			s += "=" + t.GetValue()
		}
		taints = append(taints, s+":"+t.GetEffect())
	}
	d.multi(0, "Taints", taints)
	d.line(0, "Unschedulable", "%t", spec.GetUnschedulable())
	d.conditions(st.GetConditions(), true)
	d.section(0, "Addresses")
	for _, a := range st.GetAddresses() {
		d.line(1, a.GetType(), "%s", a.GetAddress())
	}
	d.kvSection("Capacity", st.GetCapacity())
	d.kvSection("Allocatable", st.GetAllocatable())
	info := st.GetNodeInfo()
	d.section(0, "System Info")
	d.line(1, "Machine ID", "%s", info.GetMachineId())
	d.line(1, "Kernel Version", "%s", info.GetKernelVersion())
	d.line(1, "OS Image", "%s", info.GetOsImage())
	d.line(1, "Operating System", "%s", info.GetOperatingSystem())
	d.line(1, "Architecture", "%s", info.GetArchitecture())
	d.line(1, "Container Runtime Version", "%s", info.GetContainerRuntimeVersion())
	d.line(1, "Kubelet Version", "%s", info.GetKubeletVersion())
	if spec.GetPodCidr() != "" {
		d.line(0, "PodCIDR", "%s", spec.GetPodCidr())
	}
	if len(spec.GetPodCidrs()) > 0 {
		d.line(0, "PodCIDRs", "%s", strings.Join(spec.GetPodCidrs(), ","))
	}
	if spec.GetProviderId() != "" {
		d.line(0, "ProviderID", "%s", spec.GetProviderId())
	}
}

func (d *describer) kvSection(name string, m map[string]string) {
	d.section(0, name)
	for _, k := range cols.SortedKeys(m) {
		d.line(1, k, "%s", m[k])
	}
}

func (d *describer) service(s *kplanev1.Service, ep *kplanev1.Endpoints) {
	spec := s.GetSpec()
	d.line(0, "Selector", "%s", cols.MapSelector(spec.GetSelector()))
	typ := spec.GetType()
	if typ == "" {
		typ = "ClusterIP"
	}
	d.line(0, "Type", "%s", typ)
	d.line(0, "IP", "%s", cols.OrNone(spec.GetClusterIp()))
	if spec.GetExternalName() != "" {
		d.line(0, "External Name", "%s", spec.GetExternalName())
	}
	for _, p := range spec.GetPorts() {
		proto := p.GetProtocol()
		if proto == "" {
			proto = "TCP"
		}
		target := p.GetTargetPort().Text()
		if p.GetTargetPort() == nil {
			target = fmt.Sprint(p.GetPort())
		}
		d.line(0, "Port", "%s  %d/%s", cols.OrNone(p.GetName()), p.GetPort(), proto)
		d.line(0, "TargetPort", "%s/%s", target, proto)
		if p.GetNodePort() != 0 {
			d.line(0, "NodePort", "%s  %d/%s", cols.OrNone(p.GetName()), p.GetNodePort(), proto)
		}
	}
	if ep != nil {
		d.line(0, "Endpoints", "%s", cols.EndpointsSummary(ep, 1<<30))
	} else {
		d.line(0, "Endpoints", "%s", cols.None)
	}
	affinity := spec.GetSessionAffinity()
	if affinity == "" {
		affinity = "None"
	}
	d.line(0, "Session Affinity", "%s", affinity)
}

func (d *describer) job(j *kplanev1.Job) {
	spec, st := j.GetSpec(), j.GetStatus()
	d.line(0, "Selector", "%s", cols.LabelSelector(spec.GetSelector()))
	d.line(0, "Parallelism", "%d", spec.GetParallelism())
	if spec.Completions != nil {
		d.line(0, "Completions", "%d", spec.GetCompletions())
	} else {
		d.line(0, "Completions", "<unset>")
	}
	mode := spec.GetCompletionMode()
	if mode == "" {
		mode = "NonIndexed"
	}
	d.line(0, "Completion Mode", "%s", mode)
	d.line(0, "Suspend", "%t", spec.GetSuspend())
	d.line(0, "Backoff Limit", "%d", spec.GetBackoffLimit())
	d.line(0, "Start Time", "%s", Timestamp(st.GetStartTime()))
	if st.GetCompletionTime() != nil {
		d.line(0, "Completed At", "%s", Timestamp(st.GetCompletionTime()))
		d.line(0, "Duration", "%s", cols.HumanDuration(st.GetCompletionTime().AsTime().Sub(st.GetStartTime().AsTime())))
	}
	if spec.ActiveDeadlineSeconds != nil {
		d.line(0, "Active Deadline Seconds", "%ds", spec.GetActiveDeadlineSeconds())
	}
	d.line(0, "Pods Statuses", "%d Active / %d Succeeded / %d Failed", st.GetActive(), st.GetSucceeded(), st.GetFailed())
	d.template(spec.GetTemplate())
	d.conditions(st.GetConditions(), false)
}

// cronJob prints what kubectl 1.32 does: the schedule, policies and
// limits, the job template, the last run and the active Jobs.
func (d *describer) cronJob(cj *kplanev1.CronJob) {
	spec, st := cj.GetSpec(), cj.GetStatus()
	d.line(0, "Schedule", "%s", spec.GetSchedule())
	d.line(0, "Concurrency Policy", "%s", spec.GetConcurrencyPolicy())
	d.line(0, "Suspend", "%s", cols.BoolPtr(spec.Suspend))
	optional := func(key string, set bool, v int64, unit string) {
		if set {
			d.line(0, key, "%d%s", v, unit)
		} else {
			d.line(0, key, "<unset>")
		}
	}
	optional("Successful Job History Limit", spec.SuccessfulJobsHistoryLimit != nil, int64(spec.GetSuccessfulJobsHistoryLimit()), "")
	optional("Failed Job History Limit", spec.FailedJobsHistoryLimit != nil, int64(spec.GetFailedJobsHistoryLimit()), "")
	optional("Starting Deadline Seconds", spec.StartingDeadlineSeconds != nil, spec.GetStartingDeadlineSeconds(), "s")
	js := spec.GetJobTemplate().GetSpec()
	if js == nil {
		js = &kplanev1.JobSpec{}
	}
	if js.GetSelector() != nil {
		d.line(0, "Selector", "%s", cols.LabelSelector(js.GetSelector()))
	} else {
		d.line(0, "Selector", "<unset>")
	}
	optional("Parallelism", js.Parallelism != nil, int64(js.GetParallelism()), "")
	optional("Completions", js.Completions != nil, int64(js.GetCompletions()), "")
	if js.ActiveDeadlineSeconds != nil {
		d.line(0, "Active Deadline Seconds", "%ds", js.GetActiveDeadlineSeconds())
	}
	d.template(js.GetTemplate())
	if st.GetLastScheduleTime() != nil {
		d.line(0, "Last Schedule Time", "%s", Timestamp(st.GetLastScheduleTime()))
	} else {
		d.line(0, "Last Schedule Time", "<unset>")
	}
	var active []string
	for _, ref := range st.GetActive() {
		active = append(active, ref.GetName())
	}
	d.line(0, "Active Jobs", "%s", cols.OrNone(strings.Join(active, ", ")))
}

// secret shows the sizes of the values, never the values.
func (d *describer) secret(s *kplanev1.Secret) {
	typ := s.GetType()
	if typ == "" {
		typ = "Opaque"
	}
	d.line(0, "Type", "%s", typ)
	d.section(0, "Data")
	for _, k := range cols.SortedKeys(s.GetData()) {
		d.line(0, k, "%d bytes", len(s.GetData()[k]))
	}
}

func (d *describer) endpoints(e *kplanev1.Endpoints) {
	d.section(0, "Subsets")
	for _, ss := range e.GetSubsets() {
		ips := func(as []*kplanev1.EndpointAddress) string {
			var out []string
			for _, a := range as {
				out = append(out, a.GetIp())
			}
			return cols.OrNone(strings.Join(out, ","))
		}
		d.line(1, "Addresses", "%s", ips(ss.GetAddresses()))
		d.line(1, "NotReadyAddresses", "%s", ips(ss.GetNotReadyAddresses()))
		d.section(1, "Ports")
		var rows [][]string
		for _, p := range ss.GetPorts() {
			proto := p.GetProtocol()
			if proto == "" {
				proto = "TCP"
			}
			rows = append(rows, []string{cols.OrNone(p.GetName()), fmt.Sprint(p.GetPort()), proto})
		}
		d.table(2, []string{"Name", "Port", "Protocol"}, rows)
	}
}

func (d *describer) persistentVolume(pv *kplanev1.PersistentVolume) {
	spec, st := pv.GetSpec(), pv.GetStatus()
	d.line(0, "StorageClass", "%s", spec.GetStorageClassName())
	d.line(0, "Status", "%s", st.GetPhase())
	claim := ""
	if ref := spec.GetClaimRef(); ref.GetName() != "" {
		claim = ref.GetNamespace() + "/" + ref.GetName()
	}
	d.line(0, "Claim", "%s", claim)
	policy := spec.GetPersistentVolumeReclaimPolicy()
	if policy == "" {
		policy = "Retain"
	}
	d.line(0, "Reclaim Policy", "%s", policy)
	d.line(0, "Access Modes", "%s", cols.AccessModes(spec.GetAccessModes()))
	d.line(0, "VolumeMode", "%s", cols.VolumeMode(spec.GetVolumeMode()))
	d.line(0, "Capacity", "%s", spec.GetCapacity()["storage"])
	if terms := spec.GetNodeAffinity().GetRequired().GetNodeSelectorTerms(); len(terms) > 0 {
		d.section(0, "Node Affinity")
		d.section(1, "Required Terms")
		for i, term := range terms {
			var reqs []string
			for _, r := range append(slices.Clone(term.GetMatchExpressions()), term.GetMatchFields()...) {
				req := r.GetKey() + " " + strings.ToLower(r.GetOperator())
				if len(r.GetValues()) > 0 {
					req += " [" + strings.Join(r.GetValues(), ", ") + "]"
				}
				reqs = append(reqs, req)
			}
			d.line(2, fmt.Sprintf("Term %d", i), "%s", strings.Join(reqs, ", "))
		}
	} else {
		d.line(0, "Node Affinity", "%s", cols.None)
	}
	d.line(0, "Message", "%s", st.GetMessage())
	if hp := spec.GetHostPath(); hp != nil {
		d.section(0, "Source")
		d.line(1, "Type", "HostPath (bare host directory volume)")
		d.line(1, "Path", "%s", hp.GetPath())
		d.line(1, "HostPathType", "%s", hp.GetType())
	}
}

func (d *describer) persistentVolumeClaim(pvc *kplanev1.PersistentVolumeClaim, usedBy []string) {
	spec, st := pvc.GetSpec(), pvc.GetStatus()
	class := "<unset>"
	if spec.StorageClassName != nil {
		class = spec.GetStorageClassName()
	}
	phase := st.GetPhase()
	if phase == "" {
		phase = "Pending"
	}
	d.line(0, "StorageClass", "%s", class)
	d.line(0, "Status", "%s", phase)
	d.line(0, "Volume", "%s", spec.GetVolumeName())
	d.line(0, "Capacity", "%s", st.GetCapacity()["storage"])
	d.line(0, "Access Modes", "%s", cols.AccessModes(st.GetAccessModes()))
	d.line(0, "VolumeMode", "%s", cols.VolumeMode(spec.GetVolumeMode()))
	d.kv(0, "Requests", spec.GetResources().GetRequests())
	d.multi(0, "Used By", usedBy)
	d.conditions(st.GetConditions(), false)
}

// generic renders every field other than metadata as an indented tree, so
// kinds without a describer of their own still read well.
func (d *describer) generic(obj *kplanev1.Object) error {
	m, err := manifest.ToMap(obj)
	if err != nil {
		return err
	}
	delete(m, "apiVersion")
	delete(m, "kind")
	delete(m, "metadata")
	d.tree(0, m)
	return nil
}

func (d *describer) tree(level int, m map[string]any) {
	for _, k := range cols.SortedKeys(m) {
		key := title(k)
		switch v := m[k].(type) {
		case map[string]any:
			d.section(level, key)
			d.tree(level+1, v)
		case []any:
			if scalars(v) {
				parts := make([]string, len(v))
				for i, e := range v {
					parts[i] = fmt.Sprint(e)
				}
				d.line(level, key, "%s", cols.OrNone(strings.Join(parts, ", ")))
				continue
			}
			d.section(level, key)
			for i, e := range v {
				idx := fmt.Sprintf("[%d]", i)
				if em, ok := e.(map[string]any); ok {
					d.section(level+1, idx)
					d.tree(level+2, em)
				} else {
					d.line(level+1, idx, "%v", e)
				}
			}
		default:
			d.line(level, key, "%v", v)
		}
	}
}

func scalars(list []any) bool {
	for _, e := range list {
		switch e.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return true
}

// title capitalises a JSON field name: "volumeBindingMode" -> "VolumeBindingMode".
func title(s string) string {
	r := []rune(s)
	if len(r) == 0 {
		return s
	}
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func (d *describer) conditions(conds []*kplanev1.Condition, heartbeat bool) {
	if len(conds) == 0 {
		return
	}
	d.section(0, "Conditions")
	var rows [][]string
	headers := []string{"Type", "Status", "LastTransitionTime", "Reason", "Message"}
	if heartbeat {
		headers = []string{"Type", "Status", "LastHeartbeatTime", "LastTransitionTime", "Reason", "Message"}
	}
	for _, c := range conds {
		r := []string{c.GetType(), c.GetStatus()}
		if heartbeat {
			r = append(r, Timestamp(c.GetLastHeartbeatTime()))
		}
		rows = append(rows, append(r, Timestamp(c.GetLastTransitionTime()), c.GetReason(), c.GetMessage()))
	}
	d.table(1, headers, rows)
}

func (d *describer) events(events []*kplanev1.Object) {
	if len(events) == 0 {
		d.line(0, "Events", "%s", cols.None)
		return
	}
	sort.SliceStable(events, func(i, j int) bool {
		return eventTime(events[i]).Before(eventTime(events[j]))
	})
	d.section(0, "Events")
	var rows [][]string
	for _, o := range events {
		e := o.GetEvent()
		age := cols.HumanDuration(d.now.Sub(eventTime(o)))
		if e.GetCount() > 1 {
			age = fmt.Sprintf("%s (x%d over %s)", age, e.GetCount(), cols.Age(e.GetFirstTimestamp(), d.now))
		}
		from := e.GetSource().GetComponent()
		if from == "" {
			from = e.GetReportingComponent()
		}
		rows = append(rows, []string{e.GetType(), e.GetReason(), age, from, e.GetMessage()})
	}
	d.table(1, []string{"Type", "Reason", "Age", "From", "Message"}, rows)
}

func eventTime(o *kplanev1.Object) time.Time {
	e := o.GetEvent()
	for _, ts := range []*timestamppb.Timestamp{e.GetLastTimestamp(), e.GetFirstTimestamp(), e.GetMetadata().GetCreationTimestamp()} {
		if ts != nil {
			return ts.AsTime()
		}
	}
	return time.Time{}
}

// deployment prints what kubectl 1.32 does: the replica counts, the
// strategy, the template, the conditions (type, status, reason) and the
// old and new ReplicaSets.
func (d *describer) deployment(dp *kplanev1.Deployment, sets []*kplanev1.ReplicaSet) {
	spec, st := dp.GetSpec(), dp.GetStatus()
	d.line(0, "Selector", "%s", cols.LabelSelector(spec.GetSelector()))
	d.line(0, "Replicas", "%d desired | %d updated | %d total | %d available | %d unavailable",
		spec.GetReplicas(), st.GetUpdatedReplicas(), st.GetReplicas(), st.GetAvailableReplicas(), st.GetUnavailableReplicas())
	d.line(0, "StrategyType", "%s", spec.GetStrategy().GetType())
	d.line(0, "MinReadySeconds", "%d", spec.GetMinReadySeconds())
	if ru := spec.GetStrategy().GetRollingUpdate(); ru != nil {
		d.line(0, "RollingUpdateStrategy", "%s max unavailable, %s max surge", ru.GetMaxUnavailable().Text(), ru.GetMaxSurge().Text())
	}
	d.template(spec.GetTemplate())
	if conds := st.GetConditions(); len(conds) > 0 {
		d.section(0, "Conditions")
		var rows [][]string
		for _, c := range conds {
			rows = append(rows, []string{c.GetType(), c.GetStatus(), c.GetReason()})
		}
		d.table(1, []string{"Type", "Status", "Reason"}, rows)
	}
	var olds []string
	newSet := cols.None
	for _, rs := range sets {
		desc := fmt.Sprintf("%s (%d/%d replicas created)", rs.GetMetadata().GetName(), rs.GetStatus().GetReplicas(), rs.GetSpec().GetReplicas())
		if rollout.TemplatesEqual(rs.GetSpec().GetTemplate(), spec.GetTemplate()) {
			newSet = desc
		} else if rs.GetSpec().GetReplicas() > 0 || rs.GetStatus().GetReplicas() > 0 {
			olds = append(olds, desc)
		}
	}
	d.line(0, "OldReplicaSets", "%s", cols.OrNone(strings.Join(olds, ", ")))
	d.line(0, "NewReplicaSet", "%s", newSet)
}

// statefulSet prints kubectl's StatefulSet fields: replicas, the update
// strategy, the template and the volume claim templates.
func (d *describer) statefulSet(ss *kplanev1.StatefulSet) {
	spec, st := ss.GetSpec(), ss.GetStatus()
	d.line(0, "Selector", "%s", cols.LabelSelector(spec.GetSelector()))
	d.line(0, "Replicas", "%d desired | %d total", spec.GetReplicas(), st.GetReplicas())
	d.line(0, "Update Strategy", "%s", spec.GetUpdateStrategy().GetType())
	if ru := spec.GetUpdateStrategy().GetRollingUpdate(); ru != nil {
		d.line(1, "Partition", "%d", ru.GetPartition())
	}
	d.line(0, "Pods Status", "%d Ready / %d Current / %d Updated", st.GetReadyReplicas(), st.GetCurrentReplicas(), st.GetUpdatedReplicas())
	d.template(spec.GetTemplate())
	if cts := spec.GetVolumeClaimTemplates(); len(cts) > 0 {
		d.section(0, "Volume Claims")
		for _, ct := range cts {
			d.line(1, "Name", "%s", ct.GetMetadata().GetName())
			d.line(1, "StorageClass", "%s", ct.GetSpec().GetStorageClassName())
			d.line(1, "Labels", "%s", cols.OrNone(cols.MapSelector(ct.GetMetadata().GetLabels())))
			d.line(1, "Capacity", "%s", cols.OrNone(ct.GetSpec().GetResources().GetRequests()["storage"]))
			d.line(1, "Access Modes", "[%s]", strings.Join(ct.GetSpec().GetAccessModes(), " "))
		}
	} else {
		d.line(0, "Volume Claims", "%s", cols.None)
	}
}

// daemonSet prints kubectl's DaemonSet fields: the node counts, the
// update strategy and the template.
func (d *describer) daemonSet(ds *kplanev1.DaemonSet) {
	spec, st := ds.GetSpec(), ds.GetStatus()
	d.line(0, "Selector", "%s", cols.LabelSelector(spec.GetSelector()))
	d.line(0, "Node-Selector", "%s", cols.MapSelector(spec.GetTemplate().GetSpec().GetNodeSelector()))
	d.line(0, "Desired Number of Nodes Scheduled", "%d", st.GetDesiredNumberScheduled())
	d.line(0, "Current Number of Nodes Scheduled", "%d", st.GetCurrentNumberScheduled())
	d.line(0, "Number of Nodes Scheduled with Up-to-date Pods", "%d", st.GetUpdatedNumberScheduled())
	d.line(0, "Number of Nodes Scheduled with Available Pods", "%d", st.GetNumberAvailable())
	d.line(0, "Number of Nodes Misscheduled", "%d", st.GetNumberMisscheduled())
	d.line(0, "Pods Status", "%d Ready / %d Unavailable", st.GetNumberReady(), st.GetNumberUnavailable())
	d.line(0, "Update Strategy", "%s", spec.GetUpdateStrategy().GetType())
	if ru := spec.GetUpdateStrategy().GetRollingUpdate(); ru != nil {
		d.line(0, "RollingUpdateStrategy", "%s max unavailable, %s max surge", ru.GetMaxUnavailable().Text(), ru.GetMaxSurge().Text())
	}
	d.template(spec.GetTemplate())
}

// Template prints a pod template as describe does (kpctl rollout history
// --revision shows one).
func Template(w io.Writer, t *kplanev1.PodTemplateSpec, now time.Time) error {
	d := &describer{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0), now: now}
	d.template(t)
	if d.err != nil {
		return d.err
	}
	return d.tw.Flush()
}

// rules prints a role's rules as kubectl does: one row per rule, the
// resources qualified by their group ("deployments.apps").
func (d *describer) rules(rules []*kplanev1.PolicyRule) {
	d.section(0, "PolicyRule")
	var rows [][]string
	list := func(v []string) string { return "[" + strings.Join(v, " ") + "]" }
	for _, r := range rules {
		var res []string
		for _, g := range r.GetApiGroups() {
			for _, x := range r.GetResources() {
				if g == "" {
					res = append(res, x)
				} else {
					res = append(res, x+"."+g)
				}
			}
		}
		rows = append(rows, []string{strings.Join(res, ", "), list(r.GetNonResourceUrls()), list(r.GetResourceNames()), list(r.GetVerbs())})
	}
	d.table(1, []string{"Resources", "Non-Resource URLs", "Resource Names", "Verbs"}, rows)
}

// binding prints the role a binding grants and its subjects.
func (d *describer) binding(ref *kplanev1.RoleRef, subjects []*kplanev1.Subject) {
	d.section(0, "Role")
	d.line(1, "Kind", "%s", ref.GetKind())
	d.line(1, "Name", "%s", ref.GetName())
	d.section(0, "Subjects")
	var rows [][]string
	for _, s := range subjects {
		rows = append(rows, []string{s.GetKind(), s.GetName(), s.GetNamespace()})
	}
	d.table(1, []string{"Kind", "Name", "Namespace"}, rows)
}
