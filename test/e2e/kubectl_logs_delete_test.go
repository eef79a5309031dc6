package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// stampedLog is one line of kubectl logs --timestamps.
var stampedLog = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)$`)

// TestKubectlLogsSinceTimestamps: kubectl logs --timestamps, --since and
// --since-time against a real exec-runtime container, the times being
// those the node agent's shim recorded per line; the same parameters on
// the REST path itself (kubectl get --raw), and their refusals.
func TestKubectlLogsSinceTimestamps(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	c := newNACluster(t, true, "kt-1")
	k := newKubectl(t, c.cfg)
	// "early", then (at least 2s later, the container's own sleep) a line
	// every 0.3s.
	c.create("clock", "", "Always", nil, "sh", "-c", `echo early; sleep 2; i=0; while true; do i=$((i+1)); echo "late $i"; sleep 0.3; done`)
	c.waitPod("clock", "Running", naPhase("Running"))
	c.eventually("two late lines logged", func() bool {
		out, _, err := k.run(nil, "logs", "clock")
		return err == nil && strings.Contains(out, "late 2\n")
	})
	out := k.must("logs", "clock", "--timestamps", "-c", "main")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var times []time.Time
	for _, l := range lines {
		m := stampedLog.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("logs --timestamps: line %q has no timestamp:\n%s", l, out)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatal(err)
		}
		if len(times) > 0 && ts.Before(times[len(times)-1]) {
			t.Errorf("logs --timestamps: times go back at %q", l)
		}
		times = append(times, ts)
	}
	if !strings.HasSuffix(lines[0], " early") || !strings.HasSuffix(lines[1], " late 1") {
		t.Fatalf("logs --timestamps:\n%s", out)
	}
	// kubectl sends --since-time to the second: the next second after
	// "early" is still before "late 1" (2s later at least).
	cut := times[0].Truncate(time.Second).Add(time.Second)
	if !cut.Before(times[1]) {
		t.Fatalf("late 1 at %v is not after %v", times[1], cut)
	}
	since := k.must("logs", "clock", "--since-time", cut.Format(time.RFC3339))
	if strings.Contains(since, "early") || !strings.HasPrefix(since, "late 1\n") {
		t.Errorf("logs --since-time %s:\n%s", cut.Format(time.RFC3339), since)
	}
	if all := k.must("logs", "clock", "--since", "1h"); !strings.HasPrefix(all, "early\nlate 1\n") {
		t.Errorf("logs --since 1h:\n%s", all)
	}
	// "early" is more than 2s old now.
	if recent := k.must("logs", "clock", "--since", "2s"); strings.Contains(recent, "early") {
		t.Errorf("logs --since 2s shows the old line:\n%s", recent)
	}
	tail := k.must("logs", "clock", "--tail", "1", "--timestamps")
	if m := stampedLog.FindStringSubmatch(strings.TrimSuffix(tail, "\n")); m == nil || !strings.HasPrefix(m[2], "late ") || strings.Count(tail, "\n") != 1 {
		t.Errorf("logs --tail 1 --timestamps: %q", tail)
	}

	// -f with --since-time and --timestamps: everything since the cut,
	// then the lines written while it runs.
	w := newWatch(t, k, "logs", "-f", "--timestamps", "--since-time", cut.Format(time.RFC3339), "clock")
	first := w.waitMatch(stampedLog, 0)
	if !strings.HasSuffix(first, " late 1") {
		t.Errorf("logs -f --since-time: first line %q, want late 1", first)
	}
	w.mu.Lock()
	n := len(w.lines)
	w.mu.Unlock()
	w.waitMatch(regexp.MustCompile(`Z late \d+$`), n+2)

	// The REST path itself, as client-go's GetLogs asks it.
	raw := k.must("get", "--raw", "/api/v1/namespaces/default/pods/clock/log?container=main&sinceSeconds=3600&timestamps=true&tailLines=2")
	rl := strings.Split(strings.TrimSuffix(raw, "\n"), "\n")
	if len(rl) != 2 || !stampedLog.MatchString(rl[0]) || !stampedLog.MatchString(rl[1]) {
		t.Errorf("GET pods/log?sinceSeconds=3600&timestamps=true&tailLines=2: %q", raw)
	}
	for q, want := range map[string]string{
		"sinceSeconds=0": "sinceSeconds: Invalid value",
		"sinceTime=2026-01-01T00:00:00Z&sinceSeconds=5": "at most one of sinceTime or sinceSeconds may be specified",
		"sinceTime=noon":   "sinceTime: Invalid value",
		"timestamps=maybe": "timestamps: Invalid value",
	} {
		if _, errs, err := k.run(nil, "get", "--raw", "/api/v1/namespaces/default/pods/clock/log?"+q); err == nil || !strings.Contains(errs, want) || !strings.Contains(errs, "BadRequest") {
			t.Errorf("GET pods/log?%s: %v %q, want BadRequest %q", q, err, errs, want)
		}
	}
}

// TestKubectlDeletePodGraceful: kubectl delete pod of a running pod is a
// graceful deletion that kubectl waits out: the pod gets its
// deletionTimestamp and grace period and shows Terminating (also in a
// kubectl get -w started before, whose events are Tables), the container
// gets SIGTERM (its trap runs) while kubectl still waits, and kubectl
// returns "deleted" only once the node agent confirmed the stop and the
// pod is gone.
func TestKubectlDeletePodGraceful(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on the PATH; the kubectl end-to-end tests need the real client")
	}
	c := newNACluster(t, true, "kd-1")
	k := newKubectl(t, c.cfg)
	// On SIGTERM the container notes it and stays until the test lets it go.
	c.create("victim", "", "Always", nil, "sh", "-c",
		`trap 'echo sigterm > ../term; while [ ! -e ../release ]; do sleep 0.05; done; exit 0' TERM; while true; do sleep 0.05; done`)
	p := c.waitPod("victim", "Running", naPhase("Running"))
	dir := c.podDir(p)
	t0 := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s", time.Since(t0).Seconds(), what) }

	watch := newWatch(t, k, "get", "pods", "-w")
	watch.waitMatch(regexp.MustCompile(`^victim\s+1/1\s+Running\s`), 0)

	step("get -w shows victim Running")
	del := k.cmd(nil, "delete", "pod", "victim", "--grace-period=60")
	var out, errb bytes.Buffer
	del.Stdout, del.Stderr = &out, &errb
	if err := del.Start(); err != nil {
		t.Fatal(err)
	}
	// finished closes once kubectl delete returned; delErr is its result.
	var delErr error
	finished := make(chan struct{})
	go func() { delErr = del.Wait(); close(finished) }()
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "release"), nil, 0o644)
		select {
		case <-finished:
		case <-time.After(90 * time.Second):
			_ = del.Process.Kill()
			<-finished
		}
	})

	c.eventually("the container got SIGTERM", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "term"))
		return string(b) == "sigterm\n"
	})
	step("the container got SIGTERM")
	got, err := c.get("victim")
	if err != nil {
		t.Fatalf("the pod is gone while its container still runs: %v", err)
	}
	if got.GetMetadata().GetDeletionTimestamp() == nil || got.GetMetadata().GetDeletionGracePeriodSeconds() != 60 {
		t.Fatalf("terminating pod metadata: %v", got.GetMetadata())
	}
	k.expect(`^60$`, "get", "pod", "victim", "-o", "jsonpath={.metadata.deletionGracePeriodSeconds}")
	k.expect(`(?m)^victim\s+1/1\s+Terminating\s`, "get", "pod", "victim")
	watch.waitMatch(regexp.MustCompile(`^victim\s+\S+\s+Terminating\s`), 0)
	step("Terminating seen by get and get -w")
	select {
	case <-finished:
		t.Fatalf("kubectl delete returned while the pod was terminating: %v %q %q", delErr, out.String(), errb.String())
	default:
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-finished:
		if delErr != nil || out.String() != "pod \"victim\" deleted\n" {
			t.Fatalf("kubectl delete: %v %q %q", delErr, out.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("kubectl delete still waiting after the container exited: %q %q", out.String(), errb.String())
	}
	step("kubectl delete returned")
	if _, err := c.get("victim"); status.Code(err) != codes.NotFound {
		t.Fatalf("after kubectl delete returned: %v, want NotFound", err)
	}
	if _, errs, err := k.run(nil, "get", "pod", "victim"); err == nil || !strings.Contains(errs, `pods "victim" not found`) {
		t.Errorf("kubectl get after delete: %v %q", err, errs)
	}
}
