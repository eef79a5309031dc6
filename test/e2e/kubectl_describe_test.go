package e2e

import (
	"os/exec"
	"regexp"
	"testing"
)

const describePodManifest = `apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high
value: 1000
---
apiVersion: v1
kind: Pod
metadata:
  name: urgent
  namespace: default
spec:
  priorityClassName: high
  nodeSelector:
    disk: ssd
  tolerations:
  - key: dedicated
    value: web
    effect: NoSchedule
  containers:
  - name: app
    image: busybox
`

// TestKubectlDescribePodScheduling: the real kubectl describe pod renders
// the scheduling fields from kplane's JSON (priority and its class,
// nominatedNodeName written through the status subresource, the node
// selector and tolerations) as it does for Kubernetes.
func TestKubectlDescribePodScheduling(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	_, _, a := startAPIServer(t, t.TempDir())
	k := newKubectl(t, a)
	k.must("apply", "-f", k.file("pod.yaml", describePodManifest))
	k.must("patch", "pod", "urgent", "--subresource=status", "--type=merge", "-p", `{"status":{"nominatedNodeName":"node-1"}}`)
	out := k.must("describe", "pod", "urgent")
	for _, re := range []string{
		`(?m)^Priority:\s+1000$`,
		`(?m)^Priority Class Name:\s+high$`,
		`(?m)^NominatedNodeName:\s+node-1$`,
		`(?m)^Node-Selectors:\s+disk=ssd$`,
		`(?m)^Tolerations:\s+dedicated=web:NoSchedule$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("kubectl describe pod: output does not match %s:\n%s", re, out)
		}
	}
}
