// Package printerstest holds the objects the table and describe golden
// tests of kpctl and pkg/printers render.
package printerstest

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Now is the fixed clock of the golden tests.
var Now = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// Ago is the time d before Now.
func Ago(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(Now.Add(-d)) }

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }

func meta(ns, name string, age time.Duration) *kplanev1.ObjectMeta {
	return &kplanev1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: Ago(age), Uid: "uid-" + name}
}

func container(name, image string) *kplanev1.Container {
	return &kplanev1.Container{Name: name, Image: image}
}

func running(name string, ready bool, restarts int32) *kplanev1.ContainerStatus {
	return &kplanev1.ContainerStatus{Name: name, Ready: ready, RestartCount: restarts,
		State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: Ago(time.Hour)}}}
}

// Fixtures holds, per kind, objects that exercise the interesting cells
// of its table: defaults, pending and finished states, long lists.
func Fixtures() map[string][]*kplanev1.Object {
	template := &kplanev1.PodTemplateSpec{
		Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("http", "python:3.12-slim"), container("sidecar", "busybox:1.36")}},
	}
	return map[string][]*kplanev1.Object{
		"Pod": {
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "web-1", 3*time.Hour+20*time.Minute),
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("http", "python:3.12-slim"), container("log", "busybox")}, NodeName: "node-1"},
				Status: &kplanev1.PodStatus{Phase: "Running", PodIp: "10.0.0.5", ContainerStatuses: []*kplanev1.ContainerStatus{
					running("http", true, 2), running("log", true, 1)}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "crashy", 90*time.Second),
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("app", "busybox")}, NodeName: "node-2"},
				Status: &kplanev1.PodStatus{Phase: "Running", PodIp: "10.0.0.6", ContainerStatuses: []*kplanev1.ContainerStatus{{
					Name: "app", RestartCount: 7,
					State: &kplanev1.ContainerState{Waiting: &kplanev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("jobs", "countdown-abcde", 26*time.Hour),
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("c", "busybox")}},
				Status: &kplanev1.PodStatus{Phase: "Succeeded", ContainerStatuses: []*kplanev1.ContainerStatus{{
					Name: "c", State: &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{Reason: "Completed"}}}}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "pending", 5*time.Second),
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("c", "busybox")}},
				Status:   &kplanev1.PodStatus{Phase: "Pending", NominatedNodeName: "node-3"},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: func() *kplanev1.ObjectMeta {
					m := meta("default", "leaving", 10*24*time.Hour)
					m.DeletionTimestamp = Ago(time.Second)
					return m
				}(),
				Spec:   &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("c", "busybox")}, NodeName: "node-1"},
				Status: &kplanev1.PodStatus{Phase: "Running", ContainerStatuses: []*kplanev1.ContainerStatus{running("c", true, 0)}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "init", time.Minute),
				Spec: &kplanev1.PodSpec{InitContainers: []*kplanev1.Container{container("setup", "busybox"), container("migrate", "busybox")},
					Containers: []*kplanev1.Container{container("c", "busybox")}},
				Status: &kplanev1.PodStatus{Phase: "Pending", InitContainerStatuses: []*kplanev1.ContainerStatus{
					{Name: "setup", State: &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{ExitCode: 0}}},
					{Name: "migrate", State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{}}},
				}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "sidecar", time.Minute),
				Spec: &kplanev1.PodSpec{InitContainers: []*kplanev1.Container{func() *kplanev1.Container {
					c := container("proxy", "envoy")
					c.RestartPolicy = Ptr("Always")
					return c
				}()}, Containers: []*kplanev1.Container{container("c", "busybox")}},
				Status: &kplanev1.PodStatus{Phase: "Running", InitContainerStatuses: []*kplanev1.ContainerStatus{
					{Name: "proxy", Ready: true, Started: Ptr(true), RestartCount: 2, State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{}}},
				}, ContainerStatuses: []*kplanev1.ContainerStatus{running("c", true, 1)}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "init-crash", time.Minute),
				Spec: &kplanev1.PodSpec{InitContainers: []*kplanev1.Container{container("setup", "busybox")},
					Containers: []*kplanev1.Container{container("c", "busybox")}},
				Status: &kplanev1.PodStatus{Phase: "Pending", InitContainerStatuses: []*kplanev1.ContainerStatus{
					{Name: "setup", RestartCount: 3, State: &kplanev1.ContainerState{Waiting: &kplanev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
				}},
			}),
			kplanev1.MustWrap(&kplanev1.Pod{
				Metadata: meta("default", "oom", 2*time.Minute+5*time.Second),
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{container("c", "busybox")}},
				Status: &kplanev1.PodStatus{Phase: "Failed", ContainerStatuses: []*kplanev1.ContainerStatus{{
					Name: "c", State: &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{ExitCode: 137, Signal: 9}}}}},
			}),
		},
		"ReplicaSet": {
			kplanev1.MustWrap(&kplanev1.ReplicaSet{
				Metadata: meta("default", "frontend", 45*time.Minute),
				Spec: &kplanev1.ReplicaSetSpec{Replicas: Ptr[int32](3), Template: template, Selector: &kplanev1.LabelSelector{
					MatchLabels:      map[string]string{"app": "web"},
					MatchExpressions: []*kplanev1.LabelSelectorRequirement{{Key: "tier", Operator: "In", Values: []string{"fe", "edge"}}, {Key: "legacy", Operator: "DoesNotExist"}},
				}},
				Status: &kplanev1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 2},
			}),
			kplanev1.MustWrap(&kplanev1.ReplicaSet{
				Metadata: meta("default", "empty", 400*24*time.Hour),
				Spec:     &kplanev1.ReplicaSetSpec{Replicas: Ptr[int32](0), Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
			}),
		},
		"ReplicationController": {
			kplanev1.MustWrap(&kplanev1.ReplicationController{
				Metadata: meta("default", "echo", 9*time.Minute+30*time.Second),
				Spec:     &kplanev1.ReplicationControllerSpec{Replicas: Ptr[int32](2), Selector: map[string]string{"app": "echo", "tier": "be"}, Template: template},
				Status:   &kplanev1.ReplicaSetStatus{Replicas: 2, ReadyReplicas: 2},
			}),
		},
		"Node": {
			kplanev1.MustWrap(&kplanev1.Node{
				Metadata: func() *kplanev1.ObjectMeta {
					m := meta("", "node-1", 30*24*time.Hour)
					m.Labels = map[string]string{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/ingress": ""}
					return m
				}(),
				Status: &kplanev1.NodeStatus{
					Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}},
					Addresses:  []*kplanev1.NodeAddress{{Type: "InternalIP", Address: "192.168.1.10"}, {Type: "Hostname", Address: "node-1"}},
					NodeInfo:   &kplanev1.NodeSystemInfo{KubeletVersion: "v0.1.0", OsImage: "Debian GNU/Linux 12", KernelVersion: "6.1.0", ContainerRuntimeVersion: "kplane-process://0.1"},
				},
			}),
			kplanev1.MustWrap(&kplanev1.Node{
				Metadata: meta("", "node-2", 2*time.Hour),
				Spec:     &kplanev1.NodeSpec{Unschedulable: true},
				Status:   &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "False"}}},
			}),
			// No Ready condition yet: Unknown, as kubectl prints it.
			kplanev1.MustWrap(&kplanev1.Node{Metadata: meta("", "node-3", 5*time.Minute)}),
			// Silent past the grace period (nodectl set Ready Unknown): NotReady.
			kplanev1.MustWrap(&kplanev1.Node{
				Metadata: meta("", "node-4", 3*time.Hour),
				Status:   &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "Unknown"}}},
			}),
			kplanev1.MustWrap(&kplanev1.Node{
				Metadata: meta("", "node-5", 4*time.Hour),
				Spec:     &kplanev1.NodeSpec{Unschedulable: true},
				Status:   &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}},
			}),
		},
		"Service": {
			kplanev1.MustWrap(&kplanev1.Service{
				Metadata: meta("default", "web", 24*time.Hour),
				Spec: &kplanev1.ServiceSpec{Type: "ClusterIP", ClusterIp: "10.96.0.12", Selector: map[string]string{"app": "web"},
					Ports: []*kplanev1.ServicePort{{Name: "http", Port: 80, TargetPort: kplanev1.IntOrStringFromInt32(8080), Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}}},
			}),
			kplanev1.MustWrap(&kplanev1.Service{
				Metadata: meta("default", "edge", time.Hour),
				Spec:     &kplanev1.ServiceSpec{Type: "NodePort", ClusterIp: "10.96.0.13", Ports: []*kplanev1.ServicePort{{Port: 443, NodePort: 30443}}},
			}),
			kplanev1.MustWrap(&kplanev1.Service{
				Metadata: meta("default", "db", time.Hour),
				Spec:     &kplanev1.ServiceSpec{Type: "ExternalName", ExternalName: "db.example.com"},
			}),
		},
		"Endpoints": {
			kplanev1.MustWrap(&kplanev1.Endpoints{
				Metadata: meta("default", "web", 24*time.Hour),
				Subsets: []*kplanev1.EndpointSubset{{
					Addresses: []*kplanev1.EndpointAddress{{Ip: "10.0.0.5"}, {Ip: "10.0.0.6"}, {Ip: "10.0.0.7"}},
					Ports:     []*kplanev1.EndpointPort{{Port: 8080}, {Port: 9090}},
				}},
			}),
			kplanev1.MustWrap(&kplanev1.Endpoints{Metadata: meta("default", "none", time.Minute)}),
		},
		"Job": {
			kplanev1.MustWrap(&kplanev1.Job{
				Metadata: meta("default", "countdown", 2*time.Hour),
				Spec:     &kplanev1.JobSpec{Completions: Ptr[int32](3), Parallelism: Ptr[int32](2), Template: template, Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/job-name": "countdown"}}},
				Status: &kplanev1.JobStatus{Succeeded: 3, StartTime: Ago(2 * time.Hour), CompletionTime: Ago(2*time.Hour - 47*time.Second),
					Conditions: []*kplanev1.Condition{{Type: "Complete", Status: "True"}}},
			}),
			kplanev1.MustWrap(&kplanev1.Job{
				Metadata: meta("default", "work-queue", 10*time.Minute),
				Spec:     &kplanev1.JobSpec{Parallelism: Ptr[int32](4)},
				Status:   &kplanev1.JobStatus{Active: 4, StartTime: Ago(8 * time.Minute)},
			}),
			kplanev1.MustWrap(&kplanev1.Job{
				Metadata: meta("default", "broken", time.Hour),
				Spec:     &kplanev1.JobSpec{Completions: Ptr[int32](1)},
				Status: &kplanev1.JobStatus{Failed: 6, StartTime: Ago(time.Hour), Conditions: []*kplanev1.Condition{
					{Type: "Failed", Status: "True", Reason: "BackoffLimitExceeded"}}},
			}),
		},
		"Deployment": {
			kplanev1.MustWrap(&kplanev1.Deployment{
				Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "web", CreationTimestamp: Ago(2 * time.Hour),
					Annotations: map[string]string{"deployment.kubernetes.io/revision": "2"}},
				Spec: &kplanev1.DeploymentSpec{Replicas: Ptr[int32](3), Template: template,
					Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Strategy: &kplanev1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDeployment{
						MaxUnavailable: kplanev1.IntOrStringFromString("25%"), MaxSurge: kplanev1.IntOrStringFromInt32(1)}}},
				Status: &kplanev1.DeploymentStatus{Replicas: 4, UpdatedReplicas: 2, ReadyReplicas: 3, AvailableReplicas: 3, UnavailableReplicas: 0,
					Conditions: []*kplanev1.Condition{
						{Type: "Available", Status: "True", Reason: "MinimumReplicasAvailable"},
						{Type: "Progressing", Status: "True", Reason: "ReplicaSetUpdated"}}},
			}),
			kplanev1.MustWrap(&kplanev1.Deployment{
				Metadata: meta("default", "db", 30*time.Second),
				Spec:     &kplanev1.DeploymentSpec{Replicas: Ptr[int32](1), Strategy: &kplanev1.DeploymentStrategy{Type: "Recreate"}},
			}),
		},
		"StatefulSet": {
			kplanev1.MustWrap(&kplanev1.StatefulSet{
				Metadata: meta("default", "db", 3*time.Hour),
				Spec: &kplanev1.StatefulSetSpec{Replicas: Ptr[int32](3), Template: template, ServiceName: "db",
					Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					UpdateStrategy: &kplanev1.StatefulSetUpdateStrategy{Type: "RollingUpdate",
						RollingUpdate: &kplanev1.RollingUpdateStatefulSetStrategy{Partition: Ptr[int32](1), MaxUnavailable: kplanev1.IntOrStringFromInt32(1)}},
					VolumeClaimTemplates: []*kplanev1.PersistentVolumeClaim{{Metadata: &kplanev1.ObjectMeta{Name: "data"},
						Spec: &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"}, StorageClassName: Ptr("local"),
							Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}}}}},
				Status: &kplanev1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, CurrentReplicas: 3, UpdatedReplicas: 3,
					CurrentRevision: "db-6c9f8b7d4", UpdateRevision: "db-6c9f8b7d4"},
			}),
			kplanev1.MustWrap(&kplanev1.StatefulSet{
				Metadata: meta("default", "empty", 20*time.Second),
				Spec:     &kplanev1.StatefulSetSpec{Replicas: Ptr[int32](0)},
			}),
		},
		"DaemonSet": {
			kplanev1.MustWrap(&kplanev1.DaemonSet{
				Metadata: meta("kube-system", "log-tailer", 26*time.Hour),
				Spec: &kplanev1.DaemonSetSpec{Template: template,
					Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					UpdateStrategy: &kplanev1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDaemonSet{
						MaxUnavailable: kplanev1.IntOrStringFromInt32(1), MaxSurge: kplanev1.IntOrStringFromInt32(0)}}},
				Status: &kplanev1.DaemonSetStatus{DesiredNumberScheduled: 5, CurrentNumberScheduled: 5, NumberReady: 4,
					UpdatedNumberScheduled: 3, NumberAvailable: 4},
			}),
			kplanev1.MustWrap(&kplanev1.DaemonSet{
				Metadata: meta("kube-system", "gpu-agent", 5*time.Minute),
				Spec: &kplanev1.DaemonSetSpec{Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{
					NodeSelector: map[string]string{"gpu": "true"}, Containers: []*kplanev1.Container{{Name: "agent", Image: "agent:1"}}}}},
			}),
		},
		"ControllerRevision": {
			kplanev1.MustWrap(&kplanev1.ControllerRevision{
				Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "db-6c9f8b7d4", CreationTimestamp: Ago(3 * time.Hour),
					OwnerReferences: []*kplanev1.OwnerReference{{ApiVersion: "apps/v1", Kind: "StatefulSet", Name: "db", Controller: true}}},
				Revision: 2,
			}),
			kplanev1.MustWrap(&kplanev1.ControllerRevision{Metadata: meta("default", "orphan-1", time.Minute), Revision: 1}),
		},
		"CronJob": {
			kplanev1.MustWrap(&kplanev1.CronJob{
				Metadata: meta("default", "nightly", 3*24*time.Hour),
				Spec: &kplanev1.CronJobSpec{Schedule: "0 3 * * *", TimeZone: Ptr("Europe/Berlin"), ConcurrencyPolicy: "Forbid",
					Suspend: Ptr(false), SuccessfulJobsHistoryLimit: Ptr[int32](3), FailedJobsHistoryLimit: Ptr[int32](1),
					StartingDeadlineSeconds: Ptr[int64](200),
					JobTemplate:             &kplanev1.JobTemplateSpec{Spec: &kplanev1.JobSpec{Completions: Ptr[int32](2), Template: template}}},
				Status: &kplanev1.CronJobStatus{LastScheduleTime: Ago(5 * time.Hour), LastSuccessfulTime: Ago(5*time.Hour - 40*time.Second),
					Active: []*kplanev1.ObjectReference{{Kind: "Job", Namespace: "default", Name: "nightly-29410020"}}},
			}),
			kplanev1.MustWrap(&kplanev1.CronJob{
				Metadata: meta("default", "every-minute", 30*time.Second),
				Spec:     &kplanev1.CronJobSpec{Schedule: "*/1 * * * *", Suspend: Ptr(true)},
			}),
		},
		"PersistentVolume": {
			kplanev1.MustWrap(&kplanev1.PersistentVolume{
				Metadata: meta("", "pv-1", 3*24*time.Hour),
				Spec: &kplanev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{"ReadWriteOnce", "ReadOnlyMany"},
					PersistentVolumeReclaimPolicy: "Delete", StorageClassName: "manual",
					ClaimRef: &kplanev1.ObjectReference{Namespace: "default", Name: "data"},
					NodeAffinity: &kplanev1.VolumeNodeAffinity{Required: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{
						MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: "In", Values: []string{"node-2"}}},
						MatchFields:      []*kplanev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{"node-2"}}},
					}}}}},
				Status: &kplanev1.PersistentVolumeStatus{Phase: "Bound"},
			}),
			kplanev1.MustWrap(&kplanev1.PersistentVolume{
				Metadata: meta("", "pv-2", time.Hour),
				Spec:     &kplanev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": "500Mi"}, AccessModes: []string{"ReadWriteMany"}, VolumeMode: "Block"},
				Status:   &kplanev1.PersistentVolumeStatus{Phase: "Failed", Reason: "RecycleFailed"},
			}),
		},
		"PersistentVolumeClaim": {
			kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{
				Metadata: meta("default", "data", 3*24*time.Hour),
				Spec:     &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"}, StorageClassName: Ptr("manual"), VolumeName: "pv-1"},
				Status:   &kplanev1.PersistentVolumeClaimStatus{Phase: "Bound", AccessModes: []string{"ReadWriteOnce"}, Capacity: map[string]string{"storage": "1Gi"}},
			}),
			kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{
				Metadata: meta("default", "scratch", 30*time.Second),
				Spec:     &kplanev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"}},
			}),
		},
		"StorageClass": {
			kplanev1.MustWrap(&kplanev1.StorageClass{
				Metadata: func() *kplanev1.ObjectMeta {
					m := meta("", "standard", 100*24*time.Hour)
					m.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
					return m
				}(),
				Provisioner: "kplane.io/hostpath", AllowVolumeExpansion: Ptr(true),
			}),
			kplanev1.MustWrap(&kplanev1.StorageClass{
				Metadata: meta("", "manual", time.Hour), Provisioner: "kubernetes.io/no-provisioner",
				ReclaimPolicy: "Retain", VolumeBindingMode: "WaitForFirstConsumer",
			}),
		},
		"PodDisruptionBudget": {
			kplanev1.MustWrap(&kplanev1.PodDisruptionBudget{Metadata: meta("default", "web", 2*time.Hour),
				Spec:   &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(2)},
				Status: &kplanev1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}}),
			kplanev1.MustWrap(&kplanev1.PodDisruptionBudget{Metadata: meta("default", "db", time.Hour),
				Spec: &kplanev1.PodDisruptionBudgetSpec{MaxUnavailable: kplanev1.IntOrStringFromString("25%")}}),
		},
		"PriorityClass": {
			kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: meta("", "high-priority", 3*24*time.Hour), Value: 1000000, GlobalDefault: false}),
			kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: meta("", "batch", time.Hour), Value: -10, GlobalDefault: true, PreemptionPolicy: Ptr("Never")}),
		},
		"ServiceAccount": {
			kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: meta("default", "default", 50*24*time.Hour)}),
			kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: meta("default", "builder", time.Hour),
				Secrets: []*kplanev1.ObjectReference{{Name: "builder-token"}}}),
		},
		"Secret": {
			kplanev1.MustWrap(&kplanev1.Secret{Metadata: meta("default", "db-credentials", time.Hour),
				Data: map[string][]byte{"username": []byte("app"), "password": []byte("pw")}}),
			kplanev1.MustWrap(&kplanev1.Secret{Metadata: meta("default", "builder-token", time.Hour),
				Type: "kubernetes.io/service-account-token", Data: map[string][]byte{"token": []byte("t")}}),
		},
		"Lease": {
			kplanev1.MustWrap(&kplanev1.Lease{Metadata: meta("kplane-system", "replicactl", 6*time.Hour),
				Spec: &kplanev1.LeaseSpec{HolderIdentity: "host-a_1234", LeaseDurationSeconds: 15}}),
			kplanev1.MustWrap(&kplanev1.Lease{Metadata: meta("kplane-node-lease", "node-1", 6*time.Hour)}),
		},
		"Role": {
			kplanev1.MustWrap(&kplanev1.Role{Metadata: meta("default", "pod-reader", 2*time.Hour),
				Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}),
		},
		"ClusterRole": {
			kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: meta("", "cluster-admin", 90*24*time.Hour),
				Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}),
			kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: meta("", "system:kplane:replicactl", 90*24*time.Hour)}),
		},
		"RoleBinding": {
			kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: meta("default", "read-pods", time.Hour),
				RoleRef: &kplanev1.RoleRef{Kind: "Role", Name: "pod-reader"},
				Subjects: []*kplanev1.Subject{{Kind: "User", Name: "alice"}, {Kind: "Group", Name: "devs"},
					{Kind: "ServiceAccount", Namespace: "default", Name: "builder"}}}),
		},
		"ClusterRoleBinding": {
			kplanev1.MustWrap(&kplanev1.ClusterRoleBinding{Metadata: meta("", "cluster-admin", 90*24*time.Hour),
				RoleRef: &kplanev1.RoleRef{Kind: "ClusterRole", Name: "cluster-admin"}, Subjects: []*kplanev1.Subject{{Kind: "Group", Name: "system:masters"}}}),
		},
		"Namespace": {
			kplanev1.MustWrap(&kplanev1.Namespace{Metadata: meta("", "default", 90*24*time.Hour), Status: &kplanev1.NamespaceStatus{Phase: "Active"}}),
			kplanev1.MustWrap(&kplanev1.Namespace{Metadata: meta("", "old-team", 3*365*24*time.Hour), Status: &kplanev1.NamespaceStatus{Phase: "Terminating"}}),
		},
		"Event": {
			kplanev1.MustWrap(&kplanev1.Event{
				Metadata:       meta("default", "web-1.17a", 5*time.Minute),
				InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Name: "web-1", Namespace: "default", Uid: "uid-web-1"},
				Reason:         "Scheduled", Message: "Successfully assigned default/web-1 to node-1", Type: "Normal",
				Source: &kplanev1.EventSource{Component: "scheduler"}, FirstTimestamp: Ago(5 * time.Minute), LastTimestamp: Ago(5 * time.Minute), Count: 1,
			}),
			kplanev1.MustWrap(&kplanev1.Event{
				Metadata:       meta("default", "web-1.17b", 4*time.Minute),
				InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Name: "web-1", Namespace: "default"},
				Reason:         "BackOff", Message: "Back-off restarting failed container", Type: "Warning",
				Source: &kplanev1.EventSource{Component: "nodeagent", Host: "node-1"}, FirstTimestamp: Ago(4 * time.Minute), LastTimestamp: Ago(20 * time.Second), Count: 5,
			}),
		},
	}
}
