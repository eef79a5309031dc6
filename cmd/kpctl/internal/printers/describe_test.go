package printers

import (
	"bytes"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/printers/printerstest"
	"github.com/kplane/kplane/pkg/testutil"
)

// TestDescribe renders one object of every kind, the pod with conditions,
// volumes and its events, so each describer (and the generic one) is
// covered by a golden file.
func TestDescribe(t *testing.T) {
	all := fixtures()
	pod := all["Pod"][0]
	p := pod.GetPod()
	p.Metadata.Labels = map[string]string{"app": "web", "tier": "frontend"}
	p.Metadata.Annotations = map[string]string{"note": "hello", "kplane.io/last-applied-configuration": "{}"}
	p.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "web", Controller: true}}
	p.Spec.Containers[0].Command = []string{"python3", "-m", "http.server", "8080"}
	p.Spec.Containers[0].Ports = []*kplanev1.ContainerPort{{ContainerPort: 8080}}
	p.Spec.Containers[0].Env = []*kplanev1.EnvVar{{Name: "PYTHONUNBUFFERED", Value: "1"}}
	p.Spec.Containers[0].VolumeMounts = []*kplanev1.VolumeMount{{Name: "data", MountPath: "/srv", ReadOnly: true}}
	p.Spec.Volumes = []*kplanev1.Volume{{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}
	p.Spec.Tolerations = []*kplanev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ptr[int64](300)}}
	p.Spec.ServiceAccountName = "default"
	p.Spec.Priority = 1000
	p.Spec.PriorityClassName = "high"
	p.Status.NominatedNodeName = "node-2"
	p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	p.Spec.Affinity = &kplanev1.Affinity{
		NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
			{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{"a", "b"}}}}}}},
		PodAntiAffinity: &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{
			{TopologyKey: "kubernetes.io/hostname", LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}},
	}
	p.Status.HostIp = "192.168.1.10"
	p.Status.StartTime = ago(3 * time.Hour)
	p.Status.Conditions = []*kplanev1.Condition{
		{Type: "PodScheduled", Status: "True", LastTransitionTime: ago(3 * time.Hour)},
		{Type: "Ready", Status: "True", LastTransitionTime: ago(time.Hour)},
	}
	p.Status.ContainerStatuses[0].LastState = &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", StartedAt: ago(2 * time.Hour), FinishedAt: ago(time.Hour)}}

	node := all["Node"][0]
	node.GetNode().Spec = &kplanev1.NodeSpec{Taints: []*kplanev1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}, PodCidr: "10.0.1.0/24"}
	node.GetNode().Status.Capacity = map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110"}
	node.GetNode().Status.Conditions[0].Reason = "NodeAgentReady"
	node.GetNode().Status.Conditions[0].LastHeartbeatTime = ago(10 * time.Second)

	ep := all["Endpoints"][0].GetEndpoints()
	cases := []struct {
		name string
		obj  *kplanev1.Object
		rel  Related
	}{
		{"pod", pod, Related{Events: all["Event"]}},
		{"replicaset", all["ReplicaSet"][0], Related{}},
		{"replicationcontroller", all["ReplicationController"][0], Related{}},
		{"node", node, Related{}},
		{"service", all["Service"][0], Related{Endpoints: ep}},
		{"job", all["Job"][0], Related{}},
		{"cronjob", all["CronJob"][0], Related{}},
		{"deployment", all["Deployment"][0], Related{ReplicaSets: deploymentSets(all["Deployment"][0].GetDeployment())}},
		{"cronjob unset", all["CronJob"][1], Related{}},
		{"statefulset", all["StatefulSet"][0], Related{}},
		{"daemonset", all["DaemonSet"][0], Related{}},
		{"secret", all["Secret"][0], Related{}},
		{"storageclass", all["StorageClass"][0], Related{}},
		{"lease", all["Lease"][0], Related{}},
		{"endpoints", all["Endpoints"][0], Related{}},
		{"persistentvolumeclaim", all["PersistentVolumeClaim"][0], Related{UsedBy: []string{"db-0", "db-backup"}}},
		{"persistentvolume", all["PersistentVolume"][0], Related{}},
		{"namespace", all["Namespace"][0], Related{}},
		{"event", all["Event"][1], Related{}},
		{"role", all["Role"][0], Related{}},
		{"clusterrole", all["ClusterRole"][0], Related{}},
		{"rolebinding", all["RoleBinding"][0], Related{}},
		{"clusterrolebinding", all["ClusterRoleBinding"][0], Related{}},
	}
	var b bytes.Buffer
	for _, c := range cases {
		b.WriteString("### " + c.name + "\n")
		if err := Describe(&b, c.obj, c.rel, now); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b.WriteString("\n")
	}
	out := b.String()
	golden(t, "describe.golden", out)
	if strings.Contains(out, "last-applied-configuration") {
		t.Error("describe shows the last-applied annotation")
	}
	if strings.Contains(out, "pw") || strings.Contains(out, "cHc=") {
		t.Error("describe shows secret contents")
	}
}

// deploymentSets are a new set (the Deployment's template) and an old one
// still scaling down, as deploymentctl leaves them mid-rollout.
func deploymentSets(d *kplanev1.Deployment) []*kplanev1.ReplicaSet {
	newTmpl := proto.Clone(d.GetSpec().GetTemplate()).(*kplanev1.PodTemplateSpec)
	oldTmpl := proto.Clone(newTmpl).(*kplanev1.PodTemplateSpec)
	oldTmpl.Spec.Containers[0].Image = "old:1"
	return []*kplanev1.ReplicaSet{
		{Metadata: &kplanev1.ObjectMeta{Name: "web-5d4b8"}, Spec: &kplanev1.ReplicaSetSpec{Replicas: ptr[int32](1), Template: oldTmpl},
			Status: &kplanev1.ReplicaSetStatus{Replicas: 2}},
		{Metadata: &kplanev1.ObjectMeta{Name: "web-7c9f6"}, Spec: &kplanev1.ReplicaSetSpec{Replicas: ptr[int32](2), Template: newTmpl},
			Status: &kplanev1.ReplicaSetStatus{Replicas: 2}},
	}
}

// The fixtures are pkg/printers' table fixtures.
var (
	now = printerstest.Now
	ago = printerstest.Ago
)

func fixtures() map[string][]*kplanev1.Object { return printerstest.Fixtures() }

func ptr[T any](v T) *T { return &v }

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got, *update)
}
