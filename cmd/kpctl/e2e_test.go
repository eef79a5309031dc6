package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/cmd/kpctl/internal/manifest"
	"github.com/kplane/kplane/pkg/testutil"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// cluster runs kpctl against one in-process apiserver.
type cluster struct {
	t    *testing.T
	srv  *testserver.Server
	ctx  context.Context
	addr string
}

func newCluster(t *testing.T) *cluster {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &cluster{t: t, srv: srv, ctx: ctx, addr: srv.Addr()}
}

// run runs kpctl with stdin.
func (c *cluster) run(stdin string, args ...string) result {
	return kpctl(c.ctx, c.addr, stdin, args...)
}

// must runs kpctl and fails the test unless it succeeds.
func (c *cluster) must(stdin string, args ...string) string {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code != 0 {
		c.t.Fatalf("kpctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs kpctl and returns its stderr, failing the test unless the
// command failed with exactly one error line.
func (c *cluster) fails(stdin string, args ...string) string {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code == 0 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "error: ") {
		c.t.Fatalf("kpctl %s: want one error line and a non-zero exit, got exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stderr
}

// example is one object of examples/.
type example struct {
	kind, name, file string
}

func examples(t *testing.T) []example {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var out []example
	for _, f := range files {
		docs, err := manifest.ReadPaths([]string{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			out = append(out, example{d.Object.KindName(), d.Object.Meta().GetName(), f})
		}
	}
	return out
}

// TestEndToEnd drives every command against a real apiserver with the
// manifests of examples/.
func TestEndToEnd(t *testing.T) {
	c := newCluster(t)
	exs := examples(t)

	// Apply creates every example, and a second apply changes nothing.
	out := c.must("", "apply", "-f", "../../examples")
	for _, ex := range exs {
		if want := kinds.Ref(ex.kind, ex.name) + " created"; !strings.Contains(out, want+"\n") {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	out = c.must("", "apply", "-f", "../../examples")
	if n := strings.Count(out, " unchanged\n"); n != len(exs) {
		t.Errorf("re-apply: %d unchanged, want %d:\n%s", n, len(exs), out)
	}

	// Every example reads back: in its kind's table under every alias
	// style, by name, and as YAML that apply takes again unchanged.
	for _, ex := range exs {
		table := c.must("", "get", kinds.Plural(ex.kind))
		if !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(ex.name)+`\s`).MatchString(table) && ex.kind != "Event" {
			t.Errorf("get %s does not list %s:\n%s", kinds.Plural(ex.kind), ex.name, table)
		}
		if got := c.must("", "get", strings.ToLower(ex.kind), ex.name, "-o", "name"); got != kinds.Ref(ex.kind, ex.name)+"\n" {
			t.Errorf("get -o name = %q", got)
		}
		y := c.must("", "get", kinds.Plural(ex.kind)+"/"+ex.name, "-o", "yaml")
		if !strings.Contains(y, "kind: "+ex.kind+"\n") || !strings.Contains(y, "apiVersion: "+kinds.APIVersion(ex.kind)+"\n") {
			t.Errorf("get -o yaml of %s lacks apiVersion/kind:\n%s", ex.name, y)
		}
		// The first round trip records the full object as last applied;
		// from then on the same output must apply as unchanged.
		c.must(y, "apply", "-f", "-")
		y = c.must("", "get", kinds.Plural(ex.kind), ex.name, "-o", "yaml")
		if got := c.must(y, "apply", "-f", "-"); got != kinds.Ref(ex.kind, ex.name)+" unchanged\n" {
			t.Errorf("round trip of %s/%s: %q, want unchanged", ex.kind, ex.name, got)
		}
		j := c.must("", "get", kinds.Plural(ex.kind), ex.name, "-o", "json")
		if got := c.must(j, "apply", "-f", "-"); got != kinds.Ref(ex.kind, ex.name)+" unchanged\n" {
			t.Errorf("JSON round trip of %s/%s: %q, want unchanged", ex.kind, ex.name, got)
		}
	}
	// A whole listing (kind: List) round-trips as well.
	list := c.must("", "get", "rs", "-o", "yaml")
	if !strings.Contains(list, "kind: List\n") {
		t.Errorf("a listing should print a List:\n%s", list)
	}
	if got := c.must(list, "apply", "-f", "-"); got != "replicaset/frontend unchanged\n" {
		t.Errorf("List round trip: %q", got)
	}

	c.testScale()
	c.testLabelAnnotate()
	c.testDescribe()
	c.testServerErrors()
	c.testApplyMerges()
	c.testWatch()
	c.testDelete(exs)
}

func (c *cluster) get(kind, ns, name string) *kplanev1.Object {
	c.t.Helper()
	resp, err := c.srv.Client().Get(c.ctx, &kplanev1.GetRequest{Kind: kind, Namespace: ns, Name: name})
	if err != nil {
		c.t.Fatalf("get %s %s/%s: %v", kind, ns, name, err)
	}
	return resp.GetObject()
}

func (c *cluster) testScale() {
	t := c.t
	if got := c.must("", "scale", "rs", "frontend", "--replicas=5"); got != "replicaset/frontend scaled\n" {
		t.Errorf("scale output %q", got)
	}
	if n := c.get("ReplicaSet", "default", "frontend").GetReplicaSet().GetSpec().GetReplicas(); n != 5 {
		t.Errorf("replicas after scale = %d, want 5", n)
	}
	c.must("", "scale", "replicationcontroller/echo", "--replicas=0")
	if n := c.get("ReplicationController", "default", "echo").GetReplicationController().GetSpec().GetReplicas(); n != 0 {
		t.Errorf("rc replicas after scale = %d, want 0", n)
	}
	if e := c.fails("", "scale", "rs", "frontend", "--current-replicas=3", "--replicas=1"); !strings.Contains(e, "expected replicas to be 3, was 5") {
		t.Errorf("precondition error: %q", e)
	}
	if e := c.fails("", "scale", "rs", "missing", "--replicas=1"); !strings.Contains(e, "NotFound: ") {
		t.Errorf("scale of a missing rs: %q", e)
	}
	table := c.must("", "get", "rs")
	if !regexp.MustCompile(`(?m)^frontend\s+5\s`).MatchString(table) {
		t.Errorf("DESIRED column does not show 5:\n%s", table)
	}
}

func (c *cluster) testLabelAnnotate() {
	t := c.t
	if got := c.must("", "label", "pod", "web", "env=prod"); got != "pod/web labeled\n" {
		t.Errorf("label output %q", got)
	}
	if e := c.fails("", "label", "po", "web", "env=dev"); !strings.Contains(e, "'env' already has a value (prod), and --overwrite is false") {
		t.Errorf("label without --overwrite: %q", e)
	}
	c.must("", "label", "po", "web", "env=dev", "--overwrite")
	if got := c.must("", "get", "pods", "-l", "env=dev", "-o", "name"); got != "pod/web\n" {
		t.Errorf("get -l env=dev = %q", got)
	}
	c.must("", "label", "pods/web", "env-")
	if got := c.must("", "label", "pods", "web", "env-"); got != "pod/web not labeled\n" {
		t.Errorf("removing a missing label: %q", got)
	}
	if _, ok := c.get("Pod", "default", "web").Meta().GetLabels()["env"]; ok {
		t.Error("label env was not removed")
	}
	c.must("", "annotate", "svc", "web", "owner=team-a")
	if got := c.get("Service", "default", "web").Meta().GetAnnotations()["owner"]; got != "team-a" {
		t.Errorf("annotation owner = %q", got)
	}
	c.must("", "label", "secrets", "-l", "!app", "checked=yes")
	if got := c.get("Secret", "default", "db-credentials").Meta().GetLabels()["checked"]; got != "yes" {
		t.Errorf("label by selector: checked = %q", got)
	}
}

func (c *cluster) testDescribe() {
	t := c.t
	out := c.must("", "describe", "pod", "web")
	for _, want := range []string{"Name:", "web", "Namespace:", "default", "Containers:", "python3", "Events:", "Scheduled", "Successfully assigned default/web to node-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe pod web lacks %q:\n%s", want, out)
		}
	}
	out = c.must("", "describe", "svc", "web")
	if !strings.Contains(out, "TargetPort:") || !strings.Contains(out, "8080/TCP") {
		t.Errorf("describe svc web:\n%s", out)
	}
	out = c.must("", "describe", "nodes")
	if !strings.Contains(out, "dedicated=web:PreferNoSchedule") {
		t.Errorf("describe nodes lacks the taint:\n%s", out)
	}
	if e := c.fails("", "describe", "pod", "missing"); !strings.HasPrefix(e, "error: NotFound: ") {
		t.Errorf("describe missing: %q", e)
	}
}

// testServerErrors checks that what only the apiserver can reject comes
// back as the server's own message, on one line.
func (c *cluster) testServerErrors() {
	t := c.t
	_, err := c.srv.Client().List(c.ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app in (web"})
	st, _ := status.FromError(err)
	if err == nil || st.Message() == "" {
		t.Fatalf("the apiserver accepted a bad selector: %v", err)
	}
	if e := c.fails("", "get", "pods", "-l", "app in (web"); e != fmt.Sprintf("error: %s: %s\n", st.Code(), st.Message()) {
		t.Errorf("bad selector: %q, want the server's %s: %s", e, st.Code(), st.Message())
	}
	if e := c.fails("", "get", "pod", "nope"); !strings.HasPrefix(e, "error: NotFound: ") || !strings.Contains(e, "nope") {
		t.Errorf("get missing pod: %q", e)
	}
	if e := c.fails("", "create", "-f", "../../examples/pod.yaml"); !strings.Contains(e, "(pod/web): AlreadyExists: ") {
		t.Errorf("create of an existing pod: %q", e)
	}
	// create, unlike apply, takes generateName and reports the name chosen.
	if got := c.must("", "create", "-f", "testdata/bad/no-name.yaml"); !regexp.MustCompile(`^pod/web-\w+ created\n$`).MatchString(got) {
		t.Errorf("create with generateName: %q", got)
	}
	// A job's completions are immutable: only the server's update
	// validation knows, and kpctl must pass its InvalidArgument through.
	job, err := os.ReadFile("../../examples/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(job), "completions: 3", "completions: 4", 1)
	e := c.fails(changed, "apply", "-f", "-")
	if !strings.HasPrefix(e, "error: STDIN: document 1 (job/countdown): InvalidArgument: ") || !strings.Contains(e, "spec.completions") {
		t.Errorf("immutable field: %q", e)
	}
	// Nothing of a set with one invalid document is written.
	c.fails("", "apply", "-f", "testdata/bad/invalid.yaml")
	if _, err := c.srv.Client().Get(c.ctx, &kplanev1.GetRequest{Kind: "Namespace", Name: "never-created"}); status.Code(err) != codes.NotFound {
		t.Errorf("namespace of a rejected set was written: %v", err)
	}
}

// testApplyMerges checks apply's three-way semantics: fields removed from
// the manifest go, fields others set stay.
func (c *cluster) testApplyMerges() {
	t := c.t
	svc := `apiVersion: v1
kind: Service
metadata:
  name: merge
  labels: {a: "1", b: "2"}
spec:
  selector: {app: merge}
  ports: [{port: 80}]
`
	c.must(svc, "apply", "-f", "-")
	c.must("", "label", "svc", "merge", "by-hand=yes")
	smaller := strings.Replace(svc, `labels: {a: "1", b: "2"}`, `labels: {a: "1"}`, 1)
	if got := c.must(smaller, "apply", "-f", "-"); got != "service/merge configured\n" {
		t.Errorf("apply with a removed label: %q", got)
	}
	labels := c.get("Service", "default", "merge").Meta().GetLabels()
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "a,by-hand" {
		t.Errorf("labels after apply = %v, want a (kept) and by-hand (set by someone else), b removed", labels)
	}
	c.must("", "delete", "svc", "merge")
}

func (c *cluster) testWatch() {
	t := c.t
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var out, errOut testutil.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- runWith(ctx, c.addr, "", &out, &errOut, "get", "pods", "-w") }()
	waitFor(t, &out, regexp.MustCompile(`(?m)^web\s`))
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: watched}\nspec: {containers: [{name: c, image: busybox, command: [sleep, '3600']}]}\n"
	c.must(pod, "apply", "-f", "-")
	waitFor(t, &out, regexp.MustCompile(`(?m)^watched\s+0/1\s+Pending`))
	c.must("", "delete", "pod", "watched", "--grace-period=0")
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("watch ended with exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not stop when its context ended")
	}
	if strings.Count(out.String(), "NAME") != 1 {
		t.Errorf("watch should print the header once:\n%s", out.String())
	}
}

// waitFor polls a command's output until re matches, failing after a
// deadline.
func waitFor(t *testing.T, out *testutil.SyncBuffer, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !re.MatchString(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("output never matched %s:\n%s", re, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) testDelete(exs []example) {
	t := c.t
	if out := c.must("", "get", "pods", "-A"); !regexp.MustCompile(`(?m)^NAMESPACE\s+NAME\s+READY`).MatchString(out) {
		t.Errorf("get -A lacks the NAMESPACE column:\n%s", out)
	}
	if got := c.must("", "delete", "rs", "frontend", "--cascade=orphan"); got != `replicaset "frontend" deleted`+"\n" {
		t.Errorf("delete output %q", got)
	}
	// Orphaning is the garbage collector's job: until it has released the
	// pods, the replica set waits with the orphan finalizer.
	rs := c.get("ReplicaSet", "default", "frontend").Meta()
	if rs.GetDeletionTimestamp() == nil || !slices.Contains(rs.GetFinalizers(), "orphan") {
		t.Errorf("--cascade=orphan did not reach the server: deletionTimestamp %v, finalizers %v", rs.GetDeletionTimestamp(), rs.GetFinalizers())
	}
	if e := c.fails("", "delete", "pod", "nope"); !strings.HasPrefix(e, "error: NotFound: ") {
		t.Errorf("delete missing: %q", e)
	}
	c.must("", "delete", "pod", "nope", "--ignore-not-found")
	c.must("", "delete", "pods", "-l", "app=web", "--grace-period=0")
	c.must("", "delete", "-f", "../../examples/service.yaml", "-f", "../../examples/job.yaml")
	// Whatever is left goes by manifest; finalizers may keep some objects
	// (e.g. the namespace) around for a while, which is fine here.
	r := c.run("", "delete", "-f", "../../examples", "--ignore-not-found", "--grace-period=0")
	if r.code != 0 {
		t.Fatalf("delete -f examples: %s", r.stderr)
	}
	for _, ex := range exs {
		if ex.kind == "Namespace" || ex.kind == "ReplicaSet" { // may wait on finalizers
			continue
		}
		ns := ""
		if kplanev1.LookupKind(ex.kind).Namespaced {
			ns = "default"
		}
		_, err := c.srv.Client().Get(c.ctx, &kplanev1.GetRequest{Kind: ex.kind, Namespace: ns, Name: ex.name})
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s %s still exists after delete -f (err %v)", ex.kind, ex.name, err)
		}
	}
	// kubectl's words, on stderr with a newline; across namespaces and for
	// cluster-scoped kinds without a namespace and without a period.
	for args, want := range map[string]string{
		"get svc":                   "No resources found in default namespace.\n",
		"get svc -A":                "No resources found\n",
		"get pv":                    "No resources found\n",
		"get pods -n kplane-system": "No resources found in kplane-system namespace.\n",
	} {
		out := c.run("", strings.Fields(args)...)
		if out.stderr != want || out.stdout != "" {
			t.Errorf("kpctl %s: stdout %q, stderr %q; want stderr %q", args, out.stdout, out.stderr, want)
		}
	}
}
