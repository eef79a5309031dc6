package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
)

// background runs kpctl in a goroutine; the returned function waits for it.
func (c *cluster) background(args ...string) func() result {
	var out, errOut testutil.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- runWith(c.ctx, c.addr, "", &out, &errOut, args...) }()
	return func() result {
		select {
		case code := <-done:
			return result{out.String(), errOut.String(), code}
		case <-time.After(60 * time.Second):
			c.t.Fatalf("kpctl %s never returned", strings.Join(args, " "))
		}
		return result{}
	}
}

// watchers is the apiserver's count of open watches on kind.
func (c *cluster) watchers(kind string) int {
	resp, err := http.Get("http://" + c.srv.API().HealthAddr() + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below; nothing to report
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kplane_apiserver_watchers\{kind="` + kind + `"\} (\d+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1])) // the regexp matched digits
	return n
}

// backgroundWatching starts a kpctl wait and returns once its watch is
// open, so the change the test makes next reaches it through the watch.
func (c *cluster) backgroundWatching(kind string, args ...string) func() result {
	before := c.watchers(kind)
	wait := c.background(args...)
	testutil.Eventually(c.t, 30*time.Second, "kpctl wait's watch on "+kind, func() bool { return c.watchers(kind) > before })
	return wait
}

func (c *cluster) client() *client.Client {
	cl, err := client.Dial(c.ctx, client.Options{Address: c.addr})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() }) // test teardown: nothing to report
	return cl
}

// setJobCondition writes what the Job controller would.
func (c *cluster) setJobCondition(cl *client.Client, name, typ string) {
	c.t.Helper()
	j, err := client.Jobs(cl).Get(c.ctx, "default", name)
	if err != nil {
		c.t.Fatal(err)
	}
	j.Status = &kplanev1.JobStatus{StartTime: timestamppb.Now(), Conditions: []*kplanev1.Condition{{Type: typ, Status: "True"}}}
	if typ == "Complete" {
		j.Status.CompletionTime, j.Status.Succeeded = timestamppb.Now(), 1
	}
	if _, err := client.Jobs(cl).UpdateStatus(c.ctx, j); err != nil {
		c.t.Fatal(err)
	}
}

const cronJobManifest = `apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  timeZone: Europe/Berlin
  jobTemplate:
    metadata:
      labels: {team: ops}
      annotations: {note: from-template}
    spec:
      completions: 2
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: c, image: busybox, command: [date]}]
`

func TestJobCommands(t *testing.T) {
	c := newCluster(t)
	cl := c.client()

	// create job --image -- CMD
	if out := c.must("", "create", "job", "hello", "--image=busybox", "--", "sh", "-c", "echo hi"); out != "job/hello created\n" {
		t.Errorf("create job: %q", out)
	}
	j, err := client.Jobs(cl).Get(c.ctx, "default", "hello")
	if err != nil {
		t.Fatal(err)
	}
	ct := j.GetSpec().GetTemplate().GetSpec()
	if ct.GetRestartPolicy() != "Never" || ct.GetContainers()[0].GetName() != "hello" || ct.GetContainers()[0].GetImage() != "busybox" ||
		strings.Join(ct.GetContainers()[0].GetCommand(), "|") != "sh|-c|echo hi" {
		t.Errorf("created job spec: %v", ct)
	}
	if out := c.must("", "get", "jobs"); !regexp.MustCompile(`(?m)^NAME\s+STATUS\s+COMPLETIONS\s+DURATION\s+AGE\nhello\s+Running\s+0/1\s+\S*\s*\d+s$`).MatchString(out) {
		t.Errorf("get jobs:\n%s", out)
	}

	// --dry-run=client validates and writes nothing.
	if out := c.must("", "create", "job", "dry", "--image=busybox", "--dry-run=client", "--", "true"); out != "job/dry created (dry run)\n" {
		t.Errorf("create job --dry-run=client: %q", out)
	}
	if _, err := client.Jobs(cl).Get(c.ctx, "default", "dry"); !client.IsNotFound(err) {
		t.Errorf("a dry run wrote job dry: %v", err)
	}

	// create job --from=cronjob/NAME
	c.must(cronJobManifest, "create", "-f", "-")
	out := c.must("", "get", "cronjobs")
	if !regexp.MustCompile(`(?m)^NAME\s+SCHEDULE\s+TIMEZONE\s+SUSPEND\s+ACTIVE\s+LAST SCHEDULE\s+AGE\nnightly\s+0 3 \* \* \*\s+Europe/Berlin\s+False\s+0\s+<none>\s+\d+s$`).MatchString(out) {
		t.Errorf("get cronjobs:\n%s", out)
	}
	if out := c.must("", "get", "cj", "nightly", "-o", "name"); out != "cronjob/nightly\n" {
		t.Errorf("get cj -o name: %q", out)
	}
	d := c.must("", "describe", "cronjob", "nightly")
	for _, want := range []string{"Schedule:                      0 3 * * *\n", "Concurrency Policy:            Allow\n",
		"Successful Job History Limit:  3\n", "Failed Job History Limit:      1\n", "Completions:                   2\n", "Active Jobs:         <none>\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("describe cronjob lacks %q:\n%s", want, d)
		}
	}
	if out := c.must("", "create", "job", "nightly-now", "--from=cronjob/nightly"); out != "job/nightly-now created\n" {
		t.Errorf("create job --from: %q", out)
	}
	cj, err := client.CronJobs(cl).Get(c.ctx, "default", "nightly")
	if err != nil {
		t.Fatal(err)
	}
	m, err := client.Jobs(cl).Get(c.ctx, "default", "nightly-now")
	if err != nil {
		t.Fatal(err)
	}
	ref := m.GetMetadata().GetOwnerReferences()
	if len(ref) != 1 || ref[0].GetUid() != cj.GetMetadata().GetUid() || ref[0].GetKind() != "CronJob" || !ref[0].GetController() {
		t.Errorf("owner references %v", ref)
	}
	if a := m.GetMetadata().GetAnnotations(); a["cronjob.kubernetes.io/instantiate"] != "manual" || a["note"] != "from-template" {
		t.Errorf("annotations %v", a)
	}
	if m.GetMetadata().GetLabels()["team"] != "ops" || m.GetSpec().GetCompletions() != 2 {
		t.Errorf("labels %v, completions %d", m.GetMetadata().GetLabels(), m.GetSpec().GetCompletions())
	}
	if d := c.must("", "describe", "job", "nightly-now"); !strings.Contains(d, "Controlled By:      CronJob/nightly\n") {
		t.Errorf("describe job:\n%s", d)
	}

	// Bad input: one error line, nothing created.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "job", "--image=busybox"}, "error: exactly one NAME is required, got 0\n"},
		{[]string{"create", "job", "a", "b", "--image=busybox"}, "error: exactly one NAME is required, got 2\n"},
		{[]string{"create", "job", "x"}, "error: either --image or --from must be specified\n"},
		{[]string{"create", "job", "x", "--image=busybox", "--from=cronjob/nightly"}, "error: either --image or --from must be specified\n"},
		{[]string{"create", "job", "x", "--from=cronjob/nightly", "--", "date"}, "error: cannot specify --from and command\n"},
		{[]string{"create", "job", "x", "--from=pod/web"}, "error: unknown object type pod: --from takes a cronjob\n"},
		{[]string{"create", "job", "x", "--from=nightly"}, "error: invalid --from \"nightly\": want cronjob/NAME\n"},
		{[]string{"create", "job", "x", "--from=cronjob/absent"}, "error: NotFound: CronJob \"absent\" not found in namespace \"default\"\n"},
		{[]string{"create", "job", "Bad_Name", "--image=busybox"}, "error: invalid job name \"Bad_Name\": ...\n"},
		{[]string{"create", "job", "hello", "--image=busybox"}, "error: AlreadyExists: ...\n"},
		{[]string{"create", "-f", "-", "--image=busybox"}, "error: --image and --from are flags of 'kpctl create job NAME'\n"},
		{[]string{"create", "job", "x", "--image=busybox", "--dry-run=server"}, "error: invalid --dry-run \"server\": want \"none\" or \"client\"\n"},
	} {
		got := c.fails("", tc.args...)
		if want, prefix := strings.CutSuffix(tc.want, "...\n"); prefix {
			if !strings.HasPrefix(got, want) {
				t.Errorf("kpctl %s: %q, want prefix %q", strings.Join(tc.args, " "), got, want)
			}
		} else if got != tc.want {
			t.Errorf("kpctl %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	if _, err := client.Jobs(cl).Get(c.ctx, "default", "x"); !client.IsNotFound(err) {
		t.Errorf("a failed create job wrote job x: %v", err)
	}
}

func TestWait(t *testing.T) {
	c := newCluster(t)
	cl := c.client()
	c.must("", "create", "job", "done", "--image=busybox", "--", "true")
	c.must("", "create", "job", "broken", "--image=busybox", "--", "false")

	// Already met: returns at once, also with --timeout=0.
	c.setJobCondition(cl, "done", "Complete")
	if out := c.must("", "wait", "--for=condition=complete", "job/done", "--timeout=60s"); out != "job/done condition met\n" {
		t.Errorf("wait: %q", out)
	}
	if out := c.must("", "wait", "--for=condition=Complete=True", "jobs", "done", "--timeout=0"); out != "job/done condition met\n" {
		t.Errorf("wait --timeout=0: %q", out)
	}
	// Not met yet: the wait watches until the condition shows.
	wait := c.backgroundWatching("Job", "wait", "--for=condition=failed", "job/broken", "--timeout=60s")
	c.setJobCondition(cl, "broken", "Failed")
	if r := wait(); r.code != 0 || r.stdout != "job/broken condition met\n" {
		t.Errorf("wait for failed: %+v", r)
	}
	// A condition that never comes: the timeout, one error line.
	if got := c.fails("", "wait", "--for=condition=complete", "job/broken", "--timeout=300ms"); got != "error: timed out waiting for the condition on jobs/broken\n" {
		t.Errorf("timeout: %q", got)
	}
	if got := c.fails("", "wait", "--for=condition=complete", "job/broken", "--timeout=0"); got != "error: timed out waiting for the condition on jobs/broken\n" {
		t.Errorf("timeout 0: %q", got)
	}

	// Pods: Ready, generic over kinds with conditions.
	c.must("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: busybox}]}\n", "create", "-f", "-")
	wait = c.backgroundWatching("Pod", "wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
	p, err := client.Pods(cl).Get(c.ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	p.Status = &kplanev1.PodStatus{Phase: "Running", Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}}
	if _, err := client.Pods(cl).UpdateStatus(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	if r := wait(); r.code != 0 || r.stdout != "pod/web condition met\n" {
		t.Errorf("wait for Ready: %+v", r)
	}

	// --for=delete: returns once the object is gone; at once when absent.
	wait = c.backgroundWatching("Job", "wait", "--for=delete", "job/done", "job/broken", "--timeout=60s")
	c.must("", "delete", "job", "done", "broken")
	if r := wait(); r.code != 0 || r.stdout != "job/done condition met\njob/broken condition met\n" {
		t.Errorf("wait for delete: %+v", r)
	}
	if out := c.must("", "wait", "--for=delete", "job/done"); out != "job/done condition met\n" {
		t.Errorf("wait for delete of an absent job: %q", out)
	}

	// Bad input.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "job/done"}, `error: --for is required: "delete" or "condition=TYPE[=STATUS]"` + "\n"},
		{[]string{"wait", "--for=ready", "job/done"}, `error: unrecognized condition: "ready": want "delete" or "condition=TYPE[=STATUS]"` + "\n"},
		{[]string{"wait", "--for=condition=", "job/done"}, `error: unrecognized condition: "condition=": want "delete" or "condition=TYPE[=STATUS]"` + "\n"},
		{[]string{"wait", "--for=delete"}, "error: you must specify the type of resource, ...\n"},
		{[]string{"wait", "--for=delete", "jobs"}, "error: you must name the jobs to wait for\n"},
		{[]string{"wait", "--for=delete", "job/x", "--timeout=-1s"}, "error: invalid --timeout -1s: must not be negative\n"},
		{[]string{"wait", "--for=condition=Ready", "pod/absent"}, "error: NotFound: Pod \"absent\" not found in namespace \"default\"\n"},
		{[]string{"wait", "--for=condition=Ready", "gadget/x"}, "error: the server doesn't have a resource type \"gadget\"; ...\n"},
	} {
		got := c.fails("", tc.args...)
		if want, prefix := strings.CutSuffix(tc.want, "...\n"); prefix {
			if !strings.HasPrefix(got, want) {
				t.Errorf("kpctl %s: %q, want prefix %q", strings.Join(tc.args, " "), got, want)
			}
		} else if got != tc.want {
			t.Errorf("kpctl %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}
