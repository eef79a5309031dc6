package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// update rewrites the kubectl golden files instead of comparing with them:
//
//	cd test/e2e && go test -count=1 -run TestKubectlGolden -update ./...
var update = flag.Bool("update", false, "rewrite testdata/*.golden from what kubectl prints now")

// golden compares got with testdata/<name>.golden (or writes it with
// -update), showing both on a difference.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s (run with -update to write it): %v", p, err)
	}
	if string(want) != got {
		t.Errorf("%s differs from what kubectl printed (rerun with -update if the change is intended)\n--- want\n%s\n--- got\n%s", p, want, got)
	}
}

// columns normalises a kubectl table: cells are split where kubectl pads
// (two or more spaces), the cells of the named volatile columns replaced
// by the column's name in angle brackets, and the row joined with " | ",
// so a column's width (which follows the widest AGE) does not matter.
func columns(out string, volatile ...string) string {
	sep := regexp.MustCompile(`\s{2,}`)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return ""
	}
	header := sep.Split(strings.TrimSpace(lines[0]), -1)
	mask := map[int]bool{}
	for i, h := range header {
		for _, v := range volatile {
			if h == v {
				mask[i] = true
			}
		}
	}
	var b strings.Builder
	for n, l := range lines {
		cells := sep.Split(strings.TrimSpace(l), -1)
		for i := range cells {
			if n > 0 && mask[i] && i < len(header) {
				cells[i] = "<" + header[i] + ">"
			}
		}
		b.WriteString(strings.Join(cells, " | ") + "\n")
	}
	return b.String()
}

// masked replaces the value of each line that starts with one of the
// named fields ("Name:" style, as describe prints) with <masked>.
func masked(out string, fields ...string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		for _, f := range fields {
			if strings.HasPrefix(l, f+":") {
				lines[i] = f + ": <masked>"
			}
		}
	}
	return strings.Join(lines, "\n")
}

const goldenPod = `apiVersion: v1
kind: Pod
metadata:
  name: golden
  namespace: default
  labels: {app: golden}
spec:
  containers:
  - name: app
    image: nginx:1.25
`

// goldenObjects are objects of the kinds kubectl create has no command for.
const goldenObjects = `apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv1}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /tmp/pv1}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: pvc1, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: l1, namespace: default}
spec: {holderIdentity: h, leaseDurationSeconds: 15}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: sc1}
provisioner: kplane.io/hostpath
---
apiVersion: v1
kind: ReplicationController
metadata: {name: rc1, namespace: default}
spec:
  replicas: 1
  selector: {app: rc1}
  template:
    metadata: {labels: {app: rc1}}
    spec:
      containers: [{name: app, image: nginx}]
`

// TestKubectlGolden compares kubectl's stable outputs with golden files:
// api-resources, get pods -o wide (AGE and IP masked), describe of a fixed
// ReplicaSet (timestamps masked), the head of explain pod.spec.containers,
// and the column headers of get for every kind that has objects in a
// fresh cluster plus the ones the test creates.
func TestKubectlGolden(t *testing.T) {
	_, _, a := startAPIServer(t, t.TempDir())
	k := newKubectl(t, a)

	golden(t, "api-resources", k.must("api-resources"))

	k.must("apply", "-f", k.file("pod.yaml", goldenPod))
	k.must("apply", "-f", k.file("rs.yaml", fmt.Sprintf(kubectlRS, 2)))
	golden(t, "get-pods-wide", columns(k.must("get", "pods", "-o", "wide"), "AGE", "IP"))

	golden(t, "describe-rs", masked(k.must("describe", "rs", "web"), "CreationTimestamp"))

	explain := strings.SplitAfter(k.must("explain", "pod.spec.containers"), "\n")
	golden(t, "explain-pod-spec-containers", strings.Join(explain[:min(len(explain), 20)], ""))

	// One header per kind: kubectl prints it only above at least one row,
	// so the test makes an object of each kind it can without controllers.
	k.must("create", "secret", "generic", "s", "--from-literal=a=b")
	k.must("create", "service", "clusterip", "svc", "--tcp=80:80")
	k.must("create", "deployment", "d", "--image=nginx")
	k.must("create", "job", "j", "--image=busybox")
	k.must("create", "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *")
	k.must("create", "priorityclass", "pc", "--value=10")
	k.must("create", "poddisruptionbudget", "pdb", "--selector=app=web", "--min-available=1")
	k.must("apply", "-f", k.file("more.yaml", goldenObjects))
	var heads strings.Builder
	for _, res := range strings.Fields(k.must("api-resources", "--verbs=list", "-o", "name")) {
		out, _, err := k.run(nil, "get", res, "-A")
		if err != nil {
			t.Errorf("kubectl get %s -A: %v", res, err)
			continue
		}
		head, _, _ := strings.Cut(out, "\n")
		if head == "" {
			head = "(no objects)"
		} else {
			head = strings.Join(regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(head), -1), " | ")
		}
		fmt.Fprintf(&heads, "%s: %s\n", res, head)
	}
	golden(t, "get-headers", heads.String())
}
