package kplanev1

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// kubernetesTypes is the part of Kubernetes' API that kplane supports,
// written from Kubernetes' API reference (the json tags of k8s.io/api
// core/v1, apps/v1, batch/v1, storage/v1, coordination/v1 and
// k8s.io/apimachinery meta/v1 types.go): per type, one "jsonName type"
// per line, in Kubernetes' own spelling. Fields Kubernetes has and kplane
// does not are left out; a field kplane has must be here, spelled and typed
// as Kubernetes does.
//
// Types are Kubernetes' Go types: string, bool, int32, int64, Time (RFC
// 3339 to the second), MicroTime (to the microsecond), Quantity ("128Mi",
// a string in kplane), IntOrString (kplane's IntOrString message, shown
// in JSON as a bare number or string),
// []T, map[string]T, or another type of this table.
var kubernetesTypes = map[string]string{
	// meta/v1
	"ObjectMeta": `
		name string
		generateName string
		namespace string
		uid string
		resourceVersion string
		generation int64
		creationTimestamp Time
		deletionTimestamp Time
		deletionGracePeriodSeconds int64
		labels map[string]string
		annotations map[string]string
		ownerReferences []OwnerReference
		finalizers []string
		managedFields []ManagedFieldsEntry`,
	"ManagedFieldsEntry": `
		manager string
		operation string
		apiVersion string
		time Time
		fieldsType string
		fieldsV1 FieldsV1
		subresource string`,
	"OwnerReference": `
		apiVersion string
		kind string
		name string
		uid string
		controller bool
		blockOwnerDeletion bool`,
	"LabelSelector": `
		matchLabels map[string]string
		matchExpressions []LabelSelectorRequirement`,
	"LabelSelectorRequirement": `
		key string
		operator string
		values []string`,
	"Condition": `
		type string
		status string
		lastTransitionTime Time
		reason string
		message string`,

	// core/v1
	"ObjectReference": `
		kind string
		namespace string
		name string
		uid string
		apiVersion string
		resourceVersion string
		fieldPath string`,
	"LocalObjectReference": `
		name string`,
	"ResourceRequirements": `
		limits map[string]Quantity
		requests map[string]Quantity`,
	"VolumeResourceRequirements": `
		limits map[string]Quantity
		requests map[string]Quantity`,

	"Namespace": `
		metadata ObjectMeta
		spec NamespaceSpec
		status NamespaceStatus`,
	"NamespaceSpec": `
		finalizers []string`,
	"NamespaceStatus": `
		phase string`,

	"Node": `
		metadata ObjectMeta
		spec NodeSpec
		status NodeStatus`,
	"NodeSpec": `
		podCIDR string
		podCIDRs []string
		providerID string
		unschedulable bool
		taints []Taint`,
	"Taint": `
		key string
		value string
		effect string
		timeAdded Time`,
	"NodeStatus": `
		capacity map[string]Quantity
		allocatable map[string]Quantity
		phase string
		conditions []NodeCondition
		addresses []NodeAddress
		daemonEndpoints NodeDaemonEndpoints
		nodeInfo NodeSystemInfo`,
	"NodeCondition": `
		type string
		status string
		lastHeartbeatTime Time
		lastTransitionTime Time
		reason string
		message string`,
	"NodeAddress": `
		type string
		address string`,
	"NodeDaemonEndpoints": `
		kubeletEndpoint DaemonEndpoint`,
	"DaemonEndpoint": `
		Port int32`,
	"NodeSystemInfo": `
		machineID string
		kernelVersion string
		osImage string
		containerRuntimeVersion string
		kubeletVersion string
		operatingSystem string
		architecture string`,

	"Pod": `
		metadata ObjectMeta
		spec PodSpec
		status PodStatus`,
	"PodTemplateSpec": `
		metadata ObjectMeta
		spec PodSpec`,
	"PodSpec": `
		volumes []Volume
		initContainers []Container
		containers []Container
		restartPolicy string
		terminationGracePeriodSeconds int64
		activeDeadlineSeconds int64
		nodeSelector map[string]string
		serviceAccountName string
		automountServiceAccountToken bool
		nodeName string
		hostname string
		subdomain string
		schedulerName string
		tolerations []Toleration
		priority int32
		affinity Affinity
		topologySpreadConstraints []TopologySpreadConstraint
		priorityClassName string
		preemptionPolicy string`,
	"PriorityClass": `
		metadata ObjectMeta
		value int32
		globalDefault bool
		description string
		preemptionPolicy string`,
	"PodDisruptionBudget": `
		metadata ObjectMeta
		spec PodDisruptionBudgetSpec
		status PodDisruptionBudgetStatus`,
	"PodDisruptionBudgetSpec": `
		minAvailable IntOrString
		selector LabelSelector
		maxUnavailable IntOrString
		unhealthyPodEvictionPolicy string`,
	"PodDisruptionBudgetStatus": `
		observedGeneration int64
		disruptedPods map[string]Time
		disruptionsAllowed int32
		currentHealthy int32
		desiredHealthy int32
		expectedPods int32
		conditions []Condition`,
	"Affinity": `
		nodeAffinity NodeAffinity
		podAffinity PodAffinity
		podAntiAffinity PodAntiAffinity`,
	"NodeAffinity": `
		requiredDuringSchedulingIgnoredDuringExecution NodeSelector
		preferredDuringSchedulingIgnoredDuringExecution []PreferredSchedulingTerm`,
	"PreferredSchedulingTerm": `
		weight int32
		preference NodeSelectorTerm`,
	"PodAffinity": `
		requiredDuringSchedulingIgnoredDuringExecution []PodAffinityTerm
		preferredDuringSchedulingIgnoredDuringExecution []WeightedPodAffinityTerm`,
	"PodAntiAffinity": `
		requiredDuringSchedulingIgnoredDuringExecution []PodAffinityTerm
		preferredDuringSchedulingIgnoredDuringExecution []WeightedPodAffinityTerm`,
	"PodAffinityTerm": `
		labelSelector LabelSelector
		namespaces []string
		topologyKey string
		namespaceSelector LabelSelector`,
	"WeightedPodAffinityTerm": `
		weight int32
		podAffinityTerm PodAffinityTerm`,
	"TopologySpreadConstraint": `
		maxSkew int32
		topologyKey string
		whenUnsatisfiable string
		labelSelector LabelSelector
		minDomains int32
		nodeAffinityPolicy string
		nodeTaintsPolicy string
		matchLabelKeys []string`,
	"Toleration": `
		key string
		operator string
		value string
		effect string
		tolerationSeconds int64`,
	"Volume": `
		name string
		hostPath HostPathVolumeSource
		emptyDir EmptyDirVolumeSource
		secret SecretVolumeSource
		persistentVolumeClaim PersistentVolumeClaimVolumeSource`,
	"HostPathVolumeSource": `
		path string
		type string`,
	"EmptyDirVolumeSource": `
		medium string
		sizeLimit Quantity`,
	"SecretVolumeSource": `
		secretName string
		optional bool
		defaultMode int32`,
	"PersistentVolumeClaimVolumeSource": `
		claimName string
		readOnly bool`,
	"Container": `
		name string
		image string
		command []string
		args []string
		workingDir string
		ports []ContainerPort
		env []EnvVar
		resources ResourceRequirements
		volumeMounts []VolumeMount
		livenessProbe Probe
		readinessProbe Probe
		startupProbe Probe
		envFrom []EnvFromSource
		restartPolicy string
		terminationMessagePath string
		terminationMessagePolicy string
		lifecycle Lifecycle
		imagePullPolicy string`,
	"Lifecycle": `
		postStart LifecycleHandler
		preStop LifecycleHandler`,
	"LifecycleHandler": `
		exec ExecAction
		httpGet HTTPGetAction`,
	"ContainerPort": `
		name string
		hostPort int32
		containerPort int32
		protocol string`,
	"EnvVar": `
		name string
		value string
		valueFrom EnvVarSource`,
	"EnvVarSource": `
		fieldRef ObjectFieldSelector
		resourceFieldRef ResourceFieldSelector
		secretKeyRef SecretKeySelector`,
	"ObjectFieldSelector": `
		apiVersion string
		fieldPath string`,
	"ResourceFieldSelector": `
		containerName string
		resource string
		divisor Quantity`,
	"SecretKeySelector": `
		name string
		key string
		optional bool`,
	"EnvFromSource": `
		prefix string
		secretRef SecretEnvSource`,
	"SecretEnvSource": `
		name string
		optional bool`,
	"VolumeMount": `
		name string
		readOnly bool
		mountPath string
		subPath string`,
	"Probe": `
		exec ExecAction
		httpGet HTTPGetAction
		tcpSocket TCPSocketAction
		initialDelaySeconds int32
		timeoutSeconds int32
		periodSeconds int32
		successThreshold int32
		failureThreshold int32
		grpc GRPCAction
		terminationGracePeriodSeconds int64`,
	"GRPCAction": `
		port int32
		service string`,
	"HTTPHeader": `
		name string
		value string`,
	"ExecAction": `
		command []string`,
	"HTTPGetAction": `
		path string
		port IntOrString
		host string
		scheme string
		httpHeaders []HTTPHeader`,
	"TCPSocketAction": `
		port IntOrString
		host string`,
	"PodStatus": `
		phase string
		conditions []PodCondition
		message string
		reason string
		nominatedNodeName string
		hostIP string
		hostIPs []HostIP
		podIP string
		podIPs []PodIP
		startTime Time
		initContainerStatuses []ContainerStatus
		containerStatuses []ContainerStatus
		qosClass string`,
	"PodIP": `
		ip string`,
	"HostIP": `
		ip string`,
	"PodCondition": `
		type string
		status string
		lastProbeTime Time
		lastTransitionTime Time
		reason string
		message string`,
	"ContainerStatus": `
		name string
		state ContainerState
		lastState ContainerState
		ready bool
		restartCount int32
		image string
		imageID string
		containerID string
		started bool`,
	"ContainerState": `
		waiting ContainerStateWaiting
		running ContainerStateRunning
		terminated ContainerStateTerminated`,
	"ContainerStateWaiting": `
		reason string
		message string`,
	"ContainerStateRunning": `
		startedAt Time`,
	"ContainerStateTerminated": `
		exitCode int32
		signal int32
		reason string
		message string
		startedAt Time
		finishedAt Time
		containerID string`,

	"ReplicationController": `
		metadata ObjectMeta
		spec ReplicationControllerSpec
		status ReplicationControllerStatus`,
	"ReplicationControllerSpec": `
		replicas int32
		minReadySeconds int32
		selector map[string]string
		template PodTemplateSpec`,
	"ReplicationControllerStatus": `
		replicas int32
		fullyLabeledReplicas int32
		readyReplicas int32
		availableReplicas int32
		observedGeneration int64
		conditions []ReplicationControllerCondition`,
	"ReplicationControllerCondition": `
		type string
		status string
		lastTransitionTime Time
		reason string
		message string`,

	"Service": `
		metadata ObjectMeta
		spec ServiceSpec
		status ServiceStatus`,
	"ServiceSpec": `
		ports []ServicePort
		selector map[string]string
		clusterIP string
		clusterIPs []string
		type string
		sessionAffinity string
		externalName string
		publishNotReadyAddresses bool`,
	"ServicePort": `
		name string
		protocol string
		port int32
		targetPort IntOrString
		nodePort int32`,
	"ServiceStatus": `
		loadBalancer LoadBalancerStatus
		conditions []Condition`,
	"LoadBalancerStatus": `
		ingress []LoadBalancerIngress`,
	"LoadBalancerIngress": `
		ip string
		hostname string
		ipMode string
		ports []PortStatus`,
	"PortStatus": `
		port int32
		protocol string
		error string`,

	"Endpoints": `
		metadata ObjectMeta
		subsets []EndpointSubset`,
	"EndpointSubset": `
		addresses []EndpointAddress
		notReadyAddresses []EndpointAddress
		ports []EndpointPort`,
	"EndpointAddress": `
		ip string
		hostname string
		nodeName string
		targetRef ObjectReference`,
	"EndpointPort": `
		name string
		port int32
		protocol string`,

	"ServiceAccount": `
		metadata ObjectMeta
		secrets []ObjectReference
		imagePullSecrets []LocalObjectReference
		automountServiceAccountToken bool`,
	"Secret": `
		metadata ObjectMeta
		immutable bool
		data map[string][]byte
		stringData map[string]string
		type string`,

	"Event": `
		metadata ObjectMeta
		involvedObject ObjectReference
		reason string
		message string
		source EventSource
		firstTimestamp Time
		lastTimestamp Time
		count int32
		type string
		eventTime MicroTime
		action string
		reportingComponent string
		reportingInstance string`,
	"EventSource": `
		component string
		host string`,

	"PersistentVolume": `
		metadata ObjectMeta
		spec PersistentVolumeSpec
		status PersistentVolumeStatus`,
	"PersistentVolumeSpec": `
		capacity map[string]Quantity
		hostPath HostPathVolumeSource
		accessModes []string
		claimRef ObjectReference
		persistentVolumeReclaimPolicy string
		storageClassName string
		mountOptions []string
		volumeMode string
		nodeAffinity VolumeNodeAffinity`,
	"VolumeNodeAffinity": `
		required NodeSelector`,
	"NodeSelector": `
		nodeSelectorTerms []NodeSelectorTerm`,
	"NodeSelectorTerm": `
		matchExpressions []NodeSelectorRequirement
		matchFields []NodeSelectorRequirement`,
	"NodeSelectorRequirement": `
		key string
		operator string
		values []string`,
	"PersistentVolumeStatus": `
		phase string
		message string
		reason string`,
	"PersistentVolumeClaim": `
		metadata ObjectMeta
		spec PersistentVolumeClaimSpec
		status PersistentVolumeClaimStatus`,
	"PersistentVolumeClaimSpec": `
		accessModes []string
		selector LabelSelector
		resources VolumeResourceRequirements
		volumeName string
		storageClassName string
		volumeMode string`,
	"PersistentVolumeClaimStatus": `
		phase string
		accessModes []string
		capacity map[string]Quantity
		conditions []PersistentVolumeClaimCondition`,
	"PersistentVolumeClaimCondition": `
		type string
		status string
		lastProbeTime Time
		lastTransitionTime Time
		reason string
		message string`,

	// apps/v1
	"ReplicaSet": `
		metadata ObjectMeta
		spec ReplicaSetSpec
		status ReplicaSetStatus`,
	"ReplicaSetSpec": `
		replicas int32
		minReadySeconds int32
		selector LabelSelector
		template PodTemplateSpec`,
	"ReplicaSetStatus": `
		replicas int32
		fullyLabeledReplicas int32
		readyReplicas int32
		availableReplicas int32
		observedGeneration int64
		conditions []ReplicaSetCondition`,
	"ReplicaSetCondition": `
		type string
		status string
		lastTransitionTime Time
		reason string
		message string`,

	"Deployment": `
		metadata ObjectMeta
		spec DeploymentSpec
		status DeploymentStatus`,
	"DeploymentSpec": `
		replicas int32
		selector LabelSelector
		template PodTemplateSpec
		strategy DeploymentStrategy
		minReadySeconds int32
		revisionHistoryLimit int32
		paused bool
		progressDeadlineSeconds int32`,
	"DeploymentStrategy": `
		type string
		rollingUpdate RollingUpdateDeployment`,
	"RollingUpdateDeployment": `
		maxUnavailable IntOrString
		maxSurge IntOrString`,
	"DeploymentStatus": `
		observedGeneration int64
		replicas int32
		updatedReplicas int32
		readyReplicas int32
		availableReplicas int32
		unavailableReplicas int32
		conditions []DeploymentCondition
		collisionCount int32`,
	"DeploymentCondition": `
		type string
		status string
		lastUpdateTime Time
		lastTransitionTime Time
		reason string
		message string`,

	"ControllerRevision": `
		metadata ObjectMeta
		data RawExtension
		revision int64`,
	"StatefulSet": `
		metadata ObjectMeta
		spec StatefulSetSpec
		status StatefulSetStatus`,
	"StatefulSetSpec": `
		replicas int32
		selector LabelSelector
		template PodTemplateSpec
		volumeClaimTemplates []PersistentVolumeClaim
		serviceName string
		podManagementPolicy string
		updateStrategy StatefulSetUpdateStrategy
		revisionHistoryLimit int32
		minReadySeconds int32
		persistentVolumeClaimRetentionPolicy StatefulSetPersistentVolumeClaimRetentionPolicy`,
	"StatefulSetUpdateStrategy": `
		type string
		rollingUpdate RollingUpdateStatefulSetStrategy`,
	"RollingUpdateStatefulSetStrategy": `
		partition int32
		maxUnavailable IntOrString`,
	"StatefulSetPersistentVolumeClaimRetentionPolicy": `
		whenDeleted string
		whenScaled string`,
	"StatefulSetStatus": `
		observedGeneration int64
		replicas int32
		readyReplicas int32
		currentReplicas int32
		updatedReplicas int32
		currentRevision string
		updateRevision string
		collisionCount int32
		conditions []Condition
		availableReplicas int32`,
	"DaemonSet": `
		metadata ObjectMeta
		spec DaemonSetSpec
		status DaemonSetStatus`,
	"DaemonSetSpec": `
		selector LabelSelector
		template PodTemplateSpec
		updateStrategy DaemonSetUpdateStrategy
		minReadySeconds int32
		revisionHistoryLimit int32`,
	"DaemonSetUpdateStrategy": `
		type string
		rollingUpdate RollingUpdateDaemonSet`,
	"RollingUpdateDaemonSet": `
		maxUnavailable IntOrString
		maxSurge IntOrString`,
	"DaemonSetStatus": `
		currentNumberScheduled int32
		numberMisscheduled int32
		desiredNumberScheduled int32
		numberReady int32
		observedGeneration int64
		updatedNumberScheduled int32
		numberAvailable int32
		numberUnavailable int32
		collisionCount int32
		conditions []Condition`,

	// batch/v1
	"Job": `
		metadata ObjectMeta
		spec JobSpec
		status JobStatus`,
	"JobSpec": `
		parallelism int32
		completions int32
		activeDeadlineSeconds int64
		backoffLimit int32
		selector LabelSelector
		manualSelector bool
		template PodTemplateSpec
		ttlSecondsAfterFinished int32
		completionMode string
		suspend bool
		podFailurePolicy PodFailurePolicy
		backoffLimitPerIndex int32
		maxFailedIndexes int32
		podReplacementPolicy string
		successPolicy SuccessPolicy`,
	"PodFailurePolicy": `
		rules []PodFailurePolicyRule`,
	"PodFailurePolicyRule": `
		action string
		onExitCodes PodFailurePolicyOnExitCodesRequirement
		onPodConditions []PodFailurePolicyOnPodConditionsPattern`,
	"PodFailurePolicyOnExitCodesRequirement": `
		containerName string
		operator string
		values []int32`,
	"PodFailurePolicyOnPodConditionsPattern": `
		type string
		status string`,
	"SuccessPolicy": `
		rules []SuccessPolicyRule`,
	"SuccessPolicyRule": `
		succeededIndexes string
		succeededCount int32`,
	"JobStatus": `
		conditions []JobCondition
		startTime Time
		completionTime Time
		active int32
		succeeded int32
		failed int32
		completedIndexes string
		ready int32
		terminating int32
		failedIndexes string
		uncountedTerminatedPods UncountedTerminatedPods`,
	"UncountedTerminatedPods": `
		succeeded []string
		failed []string`,
	"JobCondition": `
		type string
		status string
		lastProbeTime Time
		lastTransitionTime Time
		reason string
		message string`,

	"CronJob": `
		metadata ObjectMeta
		spec CronJobSpec
		status CronJobStatus`,
	"CronJobSpec": `
		schedule string
		timeZone string
		startingDeadlineSeconds int64
		concurrencyPolicy string
		suspend bool
		jobTemplate JobTemplateSpec
		successfulJobsHistoryLimit int32
		failedJobsHistoryLimit int32`,
	"JobTemplateSpec": `
		metadata ObjectMeta
		spec JobSpec`,
	"CronJobStatus": `
		active []ObjectReference
		lastScheduleTime Time
		lastSuccessfulTime Time`,

	// storage/v1
	"StorageClass": `
		metadata ObjectMeta
		provisioner string
		parameters map[string]string
		reclaimPolicy string
		mountOptions []string
		allowVolumeExpansion bool
		volumeBindingMode string`,

	// coordination/v1
	"Lease": `
		metadata ObjectMeta
		spec LeaseSpec`,
	"LeaseSpec": `
		holderIdentity string
		leaseDurationSeconds int32
		acquireTime MicroTime
		renewTime MicroTime
		leaseTransitions int32`,

	// rbac.authorization.k8s.io/v1
	"Role": `
		metadata ObjectMeta
		rules []PolicyRule`,
	"ClusterRole": `
		metadata ObjectMeta
		rules []PolicyRule`,
	"PolicyRule": `
		verbs []string
		apiGroups []string
		resources []string
		resourceNames []string
		nonResourceURLs []string`,
	"RoleBinding": `
		metadata ObjectMeta
		subjects []Subject
		roleRef RoleRef`,
	"ClusterRoleBinding": `
		metadata ObjectMeta
		subjects []Subject
		roleRef RoleRef`,
	"Subject": `
		kind string
		apiGroup string
		name string
		namespace string`,
	"RoleRef": `
		apiGroup string
		kind string
		name string`,
}

// kplaneLeaf is how kplane's protos hold the Kubernetes types that have no
// proto counterpart.
var kplaneLeaf = map[string]string{
	"Quantity": "string", // resource.Quantity, in its string form
	// runtime.RawExtension: kplane keeps a ControllerRevision's snapshot
	// as the protobuf encoding of the template.
	"RawExtension": "[]byte",
	// FieldsV1, a free-form JSON object: a google.protobuf.Struct.
	"FieldsV1": "Struct",
}

// sharedConditionFields are the fields of kplane's one Condition message
// that a kind's Kubernetes condition type may lack: Kubernetes has a
// condition type per kind (PodCondition has lastProbeTime, NodeCondition
// lastHeartbeatTime, ...), kplane one message for all of them.
var sharedConditionFields = map[string]bool{
	"lastHeartbeatTime": true, "lastProbeTime": true, "lastUpdateTime": true, "lastTransitionTime": true,
}

// kubernetesPaths expands a type of kubernetesTypes into every JSON field
// path below it ("spec.containers[].name") with its leaf type as kplane
// holds it.
func kubernetesPaths(t *testing.T, typ, prefix string, out map[string]string) {
	body, ok := kubernetesTypes[typ]
	if !ok {
		t.Fatalf("kubernetesTypes has no type %s (used at %q)", typ, prefix)
	}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("%s: malformed line %q", typ, line)
		}
		path := f[0]
		if prefix != "" {
			path = prefix + "." + f[0]
		}
		ft, list := strings.CutPrefix(f[1], "[]")
		if _, isType := kubernetesTypes[ft]; isType {
			if list {
				path += "[]"
			}
			kubernetesPaths(t, ft, path, out)
			continue
		}
		out[path] = leaf(f[1])
	}
}

// leaf translates a Kubernetes leaf type into kplane's: map[string]Quantity
// is map[string]string.
func leaf(typ string) string {
	for k, v := range kplaneLeaf {
		typ = strings.ReplaceAll(typ, k, v)
	}
	return typ
}

// protoPaths walks the descriptor md recursively and records every JSON
// field path with its leaf type, in kubernetesTypes' notation.
func protoPaths(md protoreflect.MessageDescriptor, prefix string, out map[string]string, depth int) {
	if depth > 20 {
		panic("descriptor recursion at " + prefix)
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		path := fd.JSONName()
		if prefix != "" {
			path = prefix + "." + path
		}
		switch {
		case fd.IsMap():
			out[path] = "map[string]" + scalar(fd.MapValue())
		case fd.Kind() == protoreflect.MessageKind && fd.Message().Name() == "IntOrString":
			// A leaf in JSON (a bare number or string), as in Kubernetes.
			out[path] = "IntOrString"
			if fd.IsList() {
				out[path] = "[]IntOrString"
			}
		case fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.Struct":
			out[path] = "Struct"
		case fd.Kind() == protoreflect.MessageKind && !isTimestamp(fd):
			if fd.IsList() {
				path += "[]"
			}
			protoPaths(fd.Message(), path, out, depth+1)
		case fd.IsList():
			out[path] = "[]" + scalar(fd)
		default:
			out[path] = scalar(fd)
		}
	}
}

func isTimestamp(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.Timestamp"
}

func scalar(fd protoreflect.FieldDescriptor) string {
	switch {
	case isTimestamp(fd):
		if proto.GetExtension(fd.Options(), E_MicroTime).(bool) {
			return "MicroTime"
		}
		return "Time"
	case fd.Kind() == protoreflect.BytesKind:
		return "[]byte"
	case fd.Kind() == protoreflect.MessageKind:
		return string(fd.Message().Name())
	}
	return fd.Kind().String()
}

// TestJSONNamesAreKubernetes holds every kind's JSON field paths to
// Kubernetes' spelling and types, in both directions: every path kplane
// has is in Kubernetes' API reference (a new field with protojson's
// default "podIp" spelling fails here), and every path the table lists
// exists in kplane.
func TestJSONNamesAreKubernetes(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			want := map[string]string{}
			kubernetesPaths(t, k.Name, "", want)
			got := map[string]string{}
			protoPaths(k.field.Message(), "", got, 0)

			var problems []string
			for _, p := range sortedKeys(got) {
				w, ok := want[p]
				switch {
				case ok && w != got[p]:
					problems = append(problems, fmt.Sprintf("%s: kplane has type %s, Kubernetes %s", p, got[p], w))
				case !ok && isSharedConditionField(p):
					// kplane's shared Condition message; see sharedConditionFields.
				case !ok:
					problems = append(problems, fmt.Sprintf("%s: not a Kubernetes field path of %s (wrong json_name?)", p, k.Name))
				}
			}
			for _, p := range sortedKeys(want) {
				if _, ok := got[p]; !ok {
					problems = append(problems, fmt.Sprintf("%s: in the table but not in kplane's %s", p, k.Name))
				}
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

func isSharedConditionField(path string) bool {
	i := strings.LastIndex(path, "conditions[].")
	return i >= 0 && sharedConditionFields[path[i+len("conditions[]."):]]
}

// TestTableHasNoUnusedTypes keeps the table honest: every type in it is
// reachable from some kind.
func TestTableHasNoUnusedTypes(t *testing.T) {
	used := map[string]bool{}
	var visit func(typ string)
	visit = func(typ string) {
		if used[typ] {
			return
		}
		used[typ] = true
		for _, line := range strings.Split(strings.TrimSpace(kubernetesTypes[typ]), "\n") {
			f := strings.Fields(line)
			if ft := strings.TrimPrefix(f[1], "[]"); kubernetesTypes[ft] != "" {
				visit(ft)
			}
		}
	}
	for _, k := range Kinds() {
		visit(k.Name)
	}
	for typ := range kubernetesTypes {
		if !used[typ] {
			t.Errorf("kubernetesTypes: %s is used by no kind", typ)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
