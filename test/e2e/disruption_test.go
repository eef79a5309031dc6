package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func init() { replicactlBinaries["disruptionctl"] = "services/disruptionctl" }

// kubectlPDB is a Deployment of two pods whose containers take 3s to
// start (so a replacement is Ready only a while after it is created) and
// a budget that lets one of them go at a time.
const kubectlPDB = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: guarded
spec:
  replicas: 2
  selector:
    matchLabels: {app: guarded}
  template:
    metadata:
      labels: {app: guarded}
      annotations: {%q: "3s"}
    spec:
      containers:
      - name: web
        image: nginx
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: guarded
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: guarded}
`

// TestKubectlDrainPDB: the real kubectl drains a node whose two pods are
// covered by a PodDisruptionBudget with minAvailable 1 (disruptionctl
// keeps its status). drain evicts both at once: one eviction is allowed,
// the other refused with Kubernetes' message, and drain retries it until
// the first pod's replacement is Ready on the other node and the budget
// allows another disruption; then drain completes. kubectl get pdb shows
// the columns kubectl users know, and kubectl explain reads the schema.
func TestKubectlDrainPDB(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	needBinaries(t, "disruptionctl")
	c := deployCluster(t, 2)
	c.startController("disruptionctl", "disruptionctl", "--log-level", "warn")
	k := newKubectl(t, c.cfg)
	const node, other = "fake-0", "fake-1"

	// Both pods on fake-0: fake-1 is cordoned while they are placed.
	k.expect(`^node/fake-1 cordoned\n$`, "cordon", other)
	manifest := k.file("guarded.yaml", fmt.Sprintf(kubectlPDB, annotationStartDelay))
	k.expect(`(?s)deployment\.apps/guarded created.*poddisruptionbudget\.policy/guarded created`, "apply", "-f", manifest)
	k.expect(`deployment "guarded" successfully rolled out`, "rollout", "status", "deploy/guarded", "--timeout=60s")
	k.expect(`^node/fake-1 uncordoned\n$`, "uncordon", other)
	k.expect(`condition met`, "wait", "--for=jsonpath={.status.disruptionsAllowed}=1", "pdb/guarded", "--timeout=60s")
	k.expect(`^NAME\s+MIN AVAILABLE\s+MAX UNAVAILABLE\s+ALLOWED DISRUPTIONS\s+AGE\nguarded\s+1\s+N/A\s+1\s+\S+\n$`, "get", "pdb")
	k.expect(`^2 2 1 1 1 DisruptionAllowed=True$`, "get", "pdb", "guarded", "-o",
		`jsonpath={.status.expectedPods} {.status.currentHealthy} {.status.desiredHealthy} {.status.observedGeneration}{" "}{.metadata.generation}{" "}{.status.conditions[0].type}={.status.conditions[0].status}`)
	k.expect(`(?s)FIELD: spec.*minAvailable\s+<\S+>.*unhealthyPodEvictionPolicy`, "explain", "pdb.spec")

	out, errs, err := k.run(nil, "drain", node, "--ignore-daemonsets", "--timeout=90s")
	if err != nil || !strings.Contains(out, "node/fake-0 drained") {
		t.Fatalf("drain: %v\nstdout: %s\nstderr: %s", err, out, errs)
	}
	if !strings.Contains(errs, "Cannot evict pod as it would violate the pod's disruption budget.") || !strings.Contains(errs, "will retry after") {
		t.Errorf("drain was never refused by the budget:\nstdout: %s\nstderr: %s", out, errs)
	}
	if pods := strings.Fields(k.must("get", "pods", "-l", "app=guarded", "--field-selector", "spec.nodeName="+node, "-o", "name")); len(pods) != 0 {
		t.Errorf("pods still on the drained node: %v", pods)
	}
	k.expect(`condition met`, "wait", "--for=jsonpath={.status.readyReplicas}=2", "deploy/guarded", "--timeout=60s")
	k.expect(`condition met`, "wait", "--for=jsonpath={.status.disruptionsAllowed}=1", "pdb/guarded", "--timeout=60s")
}
