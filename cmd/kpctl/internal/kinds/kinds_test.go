package kinds

import (
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestResolve(t *testing.T) {
	for want, names := range map[string][]string{
		"Pod":                   {"po", "pod", "pods", "Pod", "PODS"},
		"ReplicaSet":            {"rs", "replicaset", "replicasets", "ReplicaSet"},
		"ReplicationController": {"rc", "replicationcontroller", "replicationcontrollers"},
		"Service":               {"svc", "service", "services"},
		"Endpoints":             {"ep", "endpoints"},
		"Node":                  {"no", "node", "nodes"},
		"PersistentVolume":      {"pv", "persistentvolume", "persistentvolumes"},
		"PersistentVolumeClaim": {"pvc", "persistentvolumeclaim", "persistentvolumeclaims"},
		"ServiceAccount":        {"sa", "serviceaccount", "serviceaccounts"},
		"Namespace":             {"ns", "namespace", "namespaces"},
		"Job":                   {"job", "jobs"},
		"CronJob":               {"cronjob", "cronjobs", "cj"},
		"Deployment":            {"deploy", "deployment", "deployments"},
		"StatefulSet":           {"sts", "statefulset", "statefulsets"},
		"DaemonSet":             {"ds", "daemonset", "daemonsets"},
		"ControllerRevision":    {"controllerrevision", "controllerrevisions"},
		"StorageClass":          {"sc", "storageclass", "storageclasses"},
		"Secret":                {"secret", "secrets"},
		"Lease":                 {"lease", "leases"},
		"Event":                 {"ev", "event", "events"},
		"PriorityClass":         {"pc", "priorityclass", "priorityclasses"},
		"PodDisruptionBudget":   {"pdb", "poddisruptionbudget", "poddisruptionbudgets"},
	} {
		for _, n := range names {
			k, err := Resolve(n)
			if err != nil || k.Name != want {
				t.Errorf("Resolve(%q) = %v, %v; want %s", n, k, err, want)
			}
		}
	}
}

func TestResolveEveryKind(t *testing.T) {
	for _, k := range kplanev1.KindNames() {
		if got, err := Resolve(Plural(k)); err != nil || got.Name != k {
			t.Errorf("Resolve(%q) = %v, %v", Plural(k), got, err)
		}
	}
}

func TestResolveUnknownListsKnownKinds(t *testing.T) {
	_, err := Resolve("horizontalpodautoscalers")
	if err == nil {
		t.Fatal("no error for an unknown kind")
	}
	for _, want := range []string{`"horizontalpodautoscalers"`, "deployments (deploy)", "pods (po)", "replicasets (rs)", "jobs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestAPIVersion(t *testing.T) {
	for kind, want := range map[string]string{
		"Pod": "v1", "ReplicaSet": "apps/v1", "Job": "batch/v1",
		"StorageClass": "storage.k8s.io/v1", "Lease": "coordination.k8s.io/v1", "Event": "v1",
		"PriorityClass": "scheduling.k8s.io/v1", "PodDisruptionBudget": "policy/v1",
	} {
		if got := APIVersion(kind); got != want {
			t.Errorf("APIVersion(%s) = %s, want %s", kind, got, want)
		}
	}
}
