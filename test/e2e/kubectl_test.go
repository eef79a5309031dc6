package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// kubectlEnv runs the kubectl on the PATH against one apiserver, with a
// kubeconfig of its own (nothing of the user's is read).
type kubectlEnv struct {
	t          *testing.T
	bin        string
	kubeconfig string
	dir        string
}

// newKubectl uses the admin's kubeconfig of the secured apiserver a
// (TLS, the admin's client certificate).
func newKubectl(t *testing.T, a apiConfig) *kubectlEnv {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	return &kubectlEnv{t: t, bin: bin, kubeconfig: a.pki.Kubeconfig(), dir: t.TempDir()}
}

func (k *kubectlEnv) cmd(env []string, args ...string) *exec.Cmd {
	c := exec.Command(k.bin, args...)
	c.Env = append(os.Environ(), append([]string{"KUBECONFIG=" + k.kubeconfig, "HOME=" + k.dir}, env...)...)
	return c
}

// run returns kubectl's stdout and stderr and whether it succeeded.
func (k *kubectlEnv) run(env []string, args ...string) (string, string, error) {
	c := k.cmd(env, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	return out.String(), errb.String(), err
}

// must runs kubectl and fails the test when it fails.
func (k *kubectlEnv) must(args ...string) string {
	k.t.Helper()
	out, errs, err := k.run(nil, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

// expect runs kubectl and checks its stdout matches re.
func (k *kubectlEnv) expect(re string, args ...string) string {
	k.t.Helper()
	out := k.must(args...)
	if !regexp.MustCompile(re).MatchString(out) {
		k.t.Errorf("kubectl %s: output does not match %s:\n%s", strings.Join(args, " "), re, out)
	}
	return out
}

func (k *kubectlEnv) file(name, content string) string {
	k.t.Helper()
	p := filepath.Join(k.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		k.t.Fatal(err)
	}
	return p
}

const kubectlRS = `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
`

// TestKubectl drives the real kubectl 1.32 against bin/apiserver over
// REST: version and discovery, apply (created, unchanged, configured),
// every output format, selectors, a watch, describe, create, label,
// annotate, the three patch types, edit through $EDITOR, wait and delete,
// and Kubernetes' error text. Writes go through kubectl's validation
// (it finds fieldValidation in the OpenAPI v3 documents and lets the
// server validate strictly); explain reads the same documents.
func TestKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	_, _, a := startAPIServer(t, t.TempDir())
	k := newKubectl(t, a)

	k.expect(`Server Version: v1\.32\.0-kplane`, "version")
	k.expect(`(?m)^replicasets\s+rs\s+apps/v1\s+true\s+ReplicaSet$`, "api-resources")
	k.expect(`(?m)^leases\s+coordination\.k8s\.io/v1\s+true\s+Lease$`, "api-resources")

	manifest := k.file("rs.yaml", fmt.Sprintf(kubectlRS, 2))
	k.expect(`^replicaset\.apps/web created\n$`, "apply", "-f", manifest)
	k.expect(`^replicaset\.apps/web unchanged\n$`, "apply", "-f", manifest)
	k.file("rs.yaml", fmt.Sprintf(kubectlRS, 3))
	// kubectl computes the patch from the OpenAPI v3 document's merge keys
	// and says so on stderr when it cannot.
	if out, errs, err := k.run(nil, "apply", "-f", manifest); err != nil || out != "replicaset.apps/web configured\n" || errs != "" {
		t.Errorf("apply configured: %v %q %q", err, out, errs)
	}

	// An unknown field is refused with Kubernetes' strict-decoding error and
	// nothing is written.
	typo := k.file("typo.yaml", strings.Replace(strings.Replace(fmt.Sprintf(kubectlRS, 2), "name: web\n  labels", "name: typo\n  labels", 1), "replicas: 2", "replica: 2", 1))
	if _, errs, err := k.run(nil, "apply", "-f", typo); err == nil || !strings.Contains(errs,
		`Error from server (BadRequest): error when creating "`+typo+`": ReplicaSet in version "v1" cannot be handled as a ReplicaSet: strict decoding error: unknown field "spec.replica"`) {
		t.Errorf("apply with an unknown field: %v %q", err, errs)
	}
	if _, errs, err := k.run(nil, "create", "-f", typo); err == nil || !strings.Contains(errs, `strict decoding error: unknown field "spec.replica"`) {
		t.Errorf("create with an unknown field: %v %q", err, errs)
	}
	if _, errs, err := k.run(nil, "get", "rs", "typo"); err == nil || !strings.Contains(errs, `replicasets.apps "typo" not found`) {
		t.Errorf("get after the refused apply: %v %q", err, errs)
	}
	// --validate=warn: the field is dropped, the object written, kubectl
	// shows the server's warning.
	if out, errs, err := k.run(nil, "create", "--validate=warn", "-f", typo); err != nil || out != "replicaset.apps/typo created\n" ||
		!strings.Contains(errs, `Warning: unknown field "spec.replica"`) {
		t.Errorf("create --validate=warn: %v %q %q", err, out, errs)
	}
	k.must("delete", "rs", "typo")

	// Server-side dry runs: validated and answered, nothing written.
	k.file("rs.yaml", fmt.Sprintf(kubectlRS, 5))
	k.expect(`^replicaset\.apps/web configured \(server dry run\)\n$`, "apply", "--dry-run=server", "-f", manifest)
	k.expect(`^replicaset\.apps/web serverside-applied \(server dry run\)\n$`, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", manifest)
	k.expect(`^replicaset\.apps "web" deleted \(server dry run\)\n$`, "delete", "rs", "web", "--dry-run=server")
	k.expect(`^3$`, "get", "rs", "web", "-o", "jsonpath={.spec.replicas}")
	k.file("rs.yaml", fmt.Sprintf(kubectlRS, 3))

	// explain reads the OpenAPI v3 documents: kinds, field types and the
	// proto comments as descriptions.
	k.expect(`(?s)KIND:\s+Pod\nVERSION:\s+v1\n+FIELD: containers <\[\]Container>\n+DESCRIPTION:\n\s+Container is one process of a pod\.\n.*FIELDS:\n.*\n  image\s+<string>\n.*startupProbe\s+<Probe>\n\s+startupProbe holds the liveness and readiness probes back until it succeeds;\n\s+when it fails failureThreshold times`, "explain", "pod.spec.containers")
	k.expect(`(?s)GROUP:\s+apps\nKIND:\s+Deployment\nVERSION:\s+v1\n+FIELD: strategy <DeploymentStrategy>.*rollingUpdate\s+<RollingUpdateDeployment>\n\s+rollingUpdate is set only for type RollingUpdate\..*type\s+<string>\n\s+type is RollingUpdate \(default\) or Recreate\.`, "explain", "deployment.spec.strategy")

	k.expect(`(?m)^NAME\s+DESIRED\s+CURRENT\s+READY\s+AGE\s+CONTAINERS\s+IMAGES\s+SELECTOR\n^web\s+3\s+0\s+0\s+\S+\s+web\s+nginx\s+app=web$`, "get", "rs", "-o", "wide")
	k.expect(`^replicaset\.apps/web\n$`, "get", "rs", "-o", "name")
	k.expect(`^3$`, "get", "rs", "web", "-o", "jsonpath={.spec.replicas}")
	k.expect(`(?m)^kind: ReplicaSet$`, "get", "rs", "web", "-o", "yaml")
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(k.must("get", "rs", "web", "-o", "json")), &obj); err != nil || obj.APIVersion != "apps/v1" || obj.Kind != "ReplicaSet" || obj.Metadata.Namespace != "default" {
		t.Errorf("get -o json: %+v %v", obj, err)
	}
	k.expect(`(?m)^web\s`, "get", "rs", "-l", "app=web")
	if out, errs, _ := k.run(nil, "get", "rs", "-l", "app=other"); out != "" || !strings.Contains(errs, "No resources found in default namespace.") {
		t.Errorf("get -l matching nothing: %q %q", out, errs)
	}
	k.expect(`(?m)^NAMESPACE\s+NAME\s+DESIRED\s+CURRENT\s+READY\s+AGE\ndefault\s+web\s+3\s`, "get", "rs", "-A")
	k.expect(`(?m)^kplane-system\s+Active\s`, "get", "namespaces")
	k.expect(`(?m)^web\s+3\s+0\s+0\s+\S+\s+app=web$`, "get", "rs", "--show-labels")
	k.expect(`(?m)^replicaset\.apps/web\s`, "get", "all")
	k.expect(`(?m)^Replicas:\s+0 current / 3 desired$`, "describe", "rs", "web")

	// A watch sees the changes that follow it.
	w := newWatch(t, k, "get", "rs", "web", "-w", "-o", "jsonpath={.spec.replicas}{\"\\n\"}")
	w.waitFor("3")
	k.expect(`^replicaset\.apps/web patched\n$`, "patch", "rs", "web", "-p", `{"spec":{"replicas":4}}`)
	w.waitFor("4")
	k.expect(`^replicaset\.apps/web patched\n$`, "patch", "rs", "web", "--type=merge", "-p", `{"spec":{"replicas":5}}`)
	w.waitFor("5")
	k.expect(`^replicaset\.apps/web patched\n$`, "patch", "rs", "web", "--type=json", "-p", `[{"op":"replace","path":"/spec/replicas","value":6}]`)
	w.waitFor("6")

	k.expect(`^replicaset\.apps/web labeled\n$`, "label", "rs", "web", "tier=front")
	k.expect(`^replicaset\.apps/web annotated\n$`, "annotate", "rs", "web", "note=hello")
	k.expect(`^front$`, "get", "rs", "web", "-o", "jsonpath={.metadata.labels.tier}")

	editor := k.file("editor.sh", "#!/bin/sh\nsed -i 's/replicas: 6/replicas: 7/' \"$1\"\n")
	if out, errs, err := k.run([]string{"EDITOR=" + editor}, "edit", "rs", "web"); err != nil || out != "replicaset.apps/web edited\n" {
		t.Errorf("edit: %v %q %q", err, out, errs)
	}
	w.waitFor("7")
	k.expect(`condition met`, "wait", "--for=jsonpath={.spec.replicas}=7", "rs/web", "--timeout=30s")

	k.expect(`^namespace/team created\n$`, "create", "namespace", "team")
	k.expect(`^replicaset\.apps/web created\n$`, "create", "-n", "team", "-f", manifest)
	k.expect(`(?m)^team\s+web\s+3\s`, "get", "rs", "-A")
	_, errs, err := k.run(nil, "create", "-n", "team", "-f", manifest)
	if err == nil || !strings.Contains(errs, `Error from server (AlreadyExists): error when creating "`+manifest+`": replicasets.apps "web" already exists`) {
		t.Errorf("second create: %v %q", err, errs)
	}
	k.expect(`^replicaset\.apps "web" deleted\n$`, "delete", "rs", "web", "-n", "team")
	_, errs, err = k.run(nil, "get", "rs", "web", "-n", "team")
	if err == nil || strings.TrimSpace(errs) != `Error from server (NotFound): replicasets.apps "web" not found` {
		t.Errorf("get after delete: %v %q", err, errs)
	}
	k.expect(`^replicaset\.apps "web" deleted\n$`, "delete", "-f", manifest)
	k.must("wait", "--for=delete", "rs/web", "--timeout=30s")
}

func newWatch(t *testing.T, k *kubectlEnv, args ...string) *lineWatch {
	t.Helper()
	return startLines(t, k.cmd(nil, args...))
}

const kubectlDeploy = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: solo
spec:
  replicas: 1
  selector:
    matchLabels: {app: solo}
  template:
    metadata:
      labels: {app: solo}
    spec:
      containers:
      - name: solo
        image: nginx
---
apiVersion: v1
kind: Pod
metadata:
  name: lone
spec:
  nodeName: %s
  containers:
  - name: main
    image: busybox
  - name: side
    image: busybox
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 1
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: busybox
`

// TestKubectlWorkloads drives kubectl against a cluster of processes
// (apiserver, replicactl, deploymentctl, scheduler, ipamctl, a node agent
// faking two nodes): rollout status, scale of a Deployment and a
// ReplicaSet over the scale subresource, wait for a pod's Ready
// condition, logs through the node agent, get sts,ds, cordon, uncordon
// and drain (pods evicted through pods/eviction, gracefully: the agent
// confirms each stop).
func TestKubectlWorkloads(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	needBinaries(t, "statefulsetctl", "daemonsetctl")
	c := deployCluster(t, 2)
	c.startController("statefulsetctl", "statefulsetctl", "--log-level", "warn")
	c.startController("daemonsetctl", "daemonsetctl", "--log-level", "warn")
	k := newKubectl(t, c.cfg)
	const node, other = "fake-0", "fake-1"
	k.expect(`(?m)^node/fake-0\nnode/fake-1$`, "get", "nodes", "-o", "name")

	manifest := k.file("workloads.yaml", fmt.Sprintf(kubectlDeploy, node))
	k.expect(`(?s)deployment\.apps/web created.*replicaset\.apps/solo created.*pod/lone created.*statefulset\.apps/db created.*daemonset\.apps/agent created`,
		"apply", "-f", manifest)
	k.expect(`deployment "web" successfully rolled out`, "rollout", "status", "deploy/web", "--timeout=60s")

	k.expect(`^deployment\.apps/web scaled\n$`, "scale", "deploy/web", "--replicas=3")
	k.expect(`^3$`, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas}")
	k.expect(`deployment "web" successfully rolled out`, "rollout", "status", "deploy/web", "--timeout=60s")
	k.expect(`condition met`, "wait", "--for=jsonpath={.status.readyReplicas}=3", "deploy/web", "--timeout=60s")
	k.expect(`^replicaset\.apps/solo scaled\n$`, "scale", "rs", "solo", "--replicas=2")
	k.expect(`condition met`, "wait", "--for=jsonpath={.status.readyReplicas}=2", "rs/solo", "--timeout=60s")
	// A failed precondition (kubectl reads the Scale first) changes nothing.
	if _, errs, err := k.run(nil, "scale", "rs", "solo", "--current-replicas=5", "--replicas=1"); err == nil || !strings.Contains(errs, "Expected replicas to be 5, was 2") {
		t.Errorf("scale with a wrong --current-replicas: %v %q", err, errs)
	}
	k.expect(`^2$`, "get", "rs", "solo", "-o", "jsonpath={.spec.replicas}")

	k.expect(`^pod/lone condition met\n$`, "wait", "--for=condition=Ready", "pod/lone", "--timeout=60s")
	k.expect(`^fake runtime: container main of pod default/lone on node fake-0 \(no process runs\)\n$`, "logs", "lone", "-c", "main")
	k.expect(`^fake runtime: container side of pod default/lone on node fake-0 \(no process runs\)\n$`, "logs", "lone", "-c", "side")
	if out := k.must("logs", "lone", "-c", "main", "--tail", "0"); out != "" {
		t.Errorf("logs --tail 0: %q", out)
	}
	if _, errs, err := k.run(nil, "logs", "lone", "-c", "nope"); err == nil || !strings.Contains(errs, "container nope is not valid for pod lone") {
		t.Errorf("logs of a missing container: %v %q", err, errs)
	}
	// The fake runtime's one line carries the container's start time.
	k.expect(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z fake runtime: container main of pod default/lone on node fake-0 \(no process runs\)\n$`, "logs", "lone", "-c", "main", "--timestamps")
	if _, errs, err := k.run(nil, "logs", "lone", "-c", "main", "-p"); err == nil || !strings.Contains(errs, `previous terminated container "main" in pod "lone" not found`) {
		t.Errorf("logs -p: %v %q", err, errs)
	}

	k.expect(`partitioned roll out complete: 1 new pods have been updated|rolling update complete 1 pods at revision`, "rollout", "status", "sts/db", "--timeout=60s")
	k.expect(`daemon set "agent" successfully rolled out`, "rollout", "status", "ds/agent", "--timeout=60s")
	k.expect(`(?s)NAME\s+READY\s+AGE\nstatefulset\.apps/db\s+1/1\s.*NAME\s+DESIRED\s+CURRENT\s+READY\s+UP-TO-DATE\s+AVAILABLE\s+NODE SELECTOR\s+AGE\ndaemonset\.apps/agent\s+2\s+2\s+2\s+2\s+2\s+<none>\s`,
		"get", "sts,ds")

	k.expect(`^node/fake-1 cordoned\n$`, "cordon", other)
	k.expect(`(?m)^fake-1\s+Ready,SchedulingDisabled\s`, "get", "node", other)
	k.expect(`^node/fake-1 uncordoned\n$`, "uncordon", other)
	k.expect(`(?m)^fake-1\s+Ready\s`, "get", "node", other)

	out, errs, err := k.run(nil, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=60s")
	if err != nil || !strings.Contains(out, "node/fake-0 cordoned") || !strings.Contains(out, "evicting pod default/lone") ||
		!strings.Contains(out, "node/fake-0 drained") {
		t.Fatalf("drain: %v\nstdout: %s\nstderr: %s", err, out, errs)
	}
	// kubectl joins its warnings in one line, in map order: the
	// DaemonSet's may come after the one about the unmanaged pod.
	if !strings.Contains(errs, "Warning: ") || !strings.Contains(errs, "ignoring DaemonSet-managed Pods: default/agent-") {
		t.Errorf("drain --ignore-daemonsets did not name the DaemonSet's pod: %s", errs)
	}
	// Every pod but the DaemonSet's left the drained node; the controllers
	// replaced theirs on the other one.
	for _, p := range strings.Fields(k.must("get", "pods", "--field-selector", "spec.nodeName="+node, "-o", "name")) {
		if !strings.HasPrefix(p, "pod/agent-") {
			t.Errorf("%s is still on the drained node", p)
		}
	}
	k.expect(`condition met`, "wait", "--for=condition=Ready", "pod/db-0", "--timeout=60s")
	if _, errs, err := k.run(nil, "get", "pod", "lone"); err == nil || !strings.Contains(errs, `pods "lone" not found`) {
		t.Errorf("the unmanaged pod after drain --force: %v %q", err, errs)
	}
	k.expect(`condition met`, "wait", "--for=jsonpath={.status.readyReplicas}=3", "deploy/web", "--timeout=60s")
	k.expect(`^node/fake-0 uncordoned\n$`, "uncordon", node)
}

// TestKubectlLogs: kubectl logs against real exec-runtime containers,
// streamed from the node agent through the apiserver: --tail, -c and -f
// (lines written after the request arrive while it runs).
func TestKubectlLogs(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	c := newNACluster(t, true, "kl-1")
	k := newKubectl(t, c.cfg)
	c.create("ticker", "", "Always", nil, "sh", "-c", `i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 0.2; done`)
	c.waitPod("ticker", "Running", naPhase("Running"))
	tick := regexp.MustCompile(`^tick (\d+)$`)
	c.eventually("five ticks logged", func() bool {
		out, _, err := k.run(nil, "logs", "ticker")
		return err == nil && strings.Count(out, "\n") >= 5
	})
	out := k.must("logs", "ticker", "--tail", "2")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !tick.MatchString(lines[0]) || !tick.MatchString(lines[1]) {
		t.Fatalf("logs --tail 2: %q", out)
	}
	if out := k.must("logs", "ticker", "--limit-bytes", "4"); out != "tick" {
		t.Errorf("logs --limit-bytes 4: %q", out)
	}

	// -f with --tail 1: the first line is the newest, later ones follow.
	w := newWatch(t, k, "logs", "-f", "--tail", "1", "ticker")
	first := w.waitMatch(tick, 0)
	n0 := tick.FindStringSubmatch(first)[1]
	w.waitMatch(regexp.MustCompile(`^tick \d+$`), 3) // three more lines, written after the request
	w.mu.Lock()
	got := append([]string(nil), w.lines...)
	w.mu.Unlock()
	for i := 1; i < len(got); i++ {
		var a, b int
		_, _ = fmt.Sscanf(got[i-1], "tick %d", &a)
		_, _ = fmt.Sscanf(got[i], "tick %d", &b)
		if b != a+1 {
			t.Fatalf("logs -f from tick %s printed %q: not consecutive", n0, got)
		}
	}
	if _, errs, err := k.run(nil, "logs", "ticker", "-c", "other"); err == nil || !strings.Contains(errs, "container other is not valid for pod ticker") {
		t.Errorf("logs -c other: %v %q", err, errs)
	}
	if _, errs, err := k.run(nil, "logs", "ticker", "-p"); err == nil || !strings.Contains(errs, `previous terminated container "main" in pod "ticker" not found`) {
		t.Errorf("logs -p of a container that never restarted: %v %q", err, errs)
	}

	// A restarting container: logs shows the current run only, -p the
	// one before (each run counts itself in a file of its working dir,
	// which survives restarts).
	c.create("crasher", "", "Always", nil, "sh", "-c", `n=$(cat runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > runs; echo "run $n"; sleep 0.3; exit 1`)
	run := regexp.MustCompile(`^run (\d+)\n$`)
	c.eventually("logs and logs -p show two consecutive runs", func() bool {
		cur, _, err1 := k.run(nil, "logs", "crasher")
		prev, _, err2 := k.run(nil, "logs", "crasher", "-p")
		mc, mp := run.FindStringSubmatch(cur), run.FindStringSubmatch(prev)
		if err1 != nil || err2 != nil || mc == nil || mp == nil {
			return false
		}
		var a, b int
		_, _ = fmt.Sscan(mp[1], &a)
		_, _ = fmt.Sscan(mc[1], &b)
		return a >= 1 && b == a+1
	})
}

// TestKubectlExamples applies every manifest of examples/ with kubectl's
// default (strict) validation: each kind the repository shows passes the
// OpenAPI-driven checks and the server's strict decoding, and kubectl
// explain knows each kind.
func TestKubectlExamples(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, _, a := startAPIServer(t, t.TempDir())
	k := newKubectl(t, a)
	examples := filepath.Join(root, "examples")
	out := k.must("apply", "-f", examples)
	manifests, err := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < len(manifests) {
		t.Errorf("apply -f examples/ wrote %d objects for %d manifests:\n%s", len(lines), len(manifests), out)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " created") {
			t.Errorf("apply -f examples/: %q", l)
		}
	}
	for _, kind := range kplanev1.KindNames() {
		k.expect(`(?m)^KIND:\s+`+kind+`$`, "explain", strings.ToLower(kind))
	}
}

// TestKubectlServerSideApply: kubectl apply --server-side creates and
// updates; another field manager changing an owned field gets kubectl's
// conflict error (nothing written) until it forces the conflict.
func TestKubectlServerSideApply(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	_, _, a := startAPIServer(t, t.TempDir())
	k := newKubectl(t, a)
	manifest := k.file("rs.yaml", fmt.Sprintf(kubectlRS, 2))
	k.expect(`^replicaset\.apps/web serverside-applied\n$`, "apply", "--server-side", "-f", manifest)
	k.expect(`^kubectl$`, "get", "rs", "web", "-o", "jsonpath={.metadata.managedFields[*].manager}")

	other := k.file("rs-other.yaml", fmt.Sprintf(kubectlRS, 5))
	_, errs, err := k.run(nil, "apply", "--server-side", "--field-manager=other", "-f", other)
	if err == nil || !strings.HasPrefix(errs, `error: Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`) {
		t.Errorf("conflicting apply: %v %q", err, errs)
	}
	k.expect(`^2$`, "get", "rs", "web", "-o", "jsonpath={.spec.replicas}")
	k.expect(`^replicaset\.apps/web serverside-applied\n$`, "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other)
	k.expect(`^5$`, "get", "rs", "web", "-o", "jsonpath={.spec.replicas}")
}
