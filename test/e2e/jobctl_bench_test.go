package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// BenchmarkJob5000 (make bench-jobs): 100 fake nodes, an Indexed Job of
// 5000 completions at parallelism 500 whose pods succeed 100 ms after
// they start. It reports the time from the create to Complete and the
// completions per second, and checks the count is exact.
func BenchmarkJob5000(b *testing.B) {
	const (
		n           = 5000
		parallelism = 500
		podRuntime  = 100 * time.Millisecond
	)
	for range b.N {
		c := startCluster(b)
		procs := map[string]*launcher.Process{"apiserver": c.apiserver}
		procs["scheduler"], _ = c.startController("scheduler", "scheduler", "--log-level", "warn")
		procs["ipamctl"], _ = c.startController("ipamctl", "ipamctl", "--log-level", "warn")
		procs["nodeagent"], _ = c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "100", "--node-name", "bench", "--root-dir", b.TempDir(), "--log-level", "warn")
		var jobctlHealth string
		procs["jobctl"], jobctlHealth = c.startController("jobctl", "jobctl", "--leader-elect=false", "--log-level", "warn")
		c.eventually(time.Minute, func() string {
			resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Node"})
			if err != nil {
				return err.Error()
			}
			if len(resp.GetItems()) < 100 {
				return fmt.Sprintf("%d/100 nodes", len(resp.GetItems()))
			}
			return ""
		})

		cpu0 := cpuSeconds(b, procs)
		start := time.Now()
		if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: fakeIndexedJob("bench", n, parallelism, podRuntime)}); err != nil {
			b.Fatal(err)
		}
		var (
			j        *kplanev1.Job
			half     time.Duration
			maxActiv int32
		)
		c.eventually(10*time.Minute, func() string {
			var err error
			if j, err = c.job("bench"); err != nil {
				return err.Error()
			}
			st := j.GetStatus()
			maxActiv = max(maxActiv, st.GetActive())
			if half == 0 && st.GetSucceeded() >= n/2 {
				half = time.Since(start)
			}
			for _, cond := range st.GetConditions() {
				if cond.GetType() == kplanev1.JobComplete && cond.GetStatus() == kplanev1.ConditionTrue {
					return ""
				}
			}
			return fmt.Sprintf("%d/%d succeeded", st.GetSucceeded(), n)
		})
		took := time.Since(start)
		cpu1 := cpuSeconds(b, procs)
		st := j.GetStatus()
		if st.GetSucceeded() != n || st.GetCompletedIndexes() != fmt.Sprintf("0-%d", n-1) || maxActiv > parallelism {
			b.Fatalf("succeeded %d, completedIndexes %q, most active %d", st.GetSucceeded(), st.GetCompletedIndexes(), maxActiv)
		}
		rate := float64(n) / took.Seconds()
		// The floor: 5000 pods at 500 at a time, 100 ms each, is 10 rounds, 1 s.
		floor := time.Duration(n/parallelism) * podRuntime
		b.ReportMetric(took.Seconds(), "s/5000-complete")
		b.ReportMetric(rate, "completions/s")
		fmt.Printf("Indexed Job, %d completions, parallelism %d, pods of %v on 100 fake nodes: Complete after %v (half after %v), %.0f completions/s; most active seen %d; %.1fx the %v floor of %d rounds of %v\n",
			n, parallelism, podRuntime, took.Round(time.Millisecond), half.Round(time.Millisecond), rate, maxActiv,
			took.Seconds()/floor.Seconds(), floor, n/parallelism, podRuntime)
		fmt.Printf("CPU seconds during the run:")
		for _, name := range []string{"apiserver", "jobctl", "scheduler", "nodeagent", "ipamctl"} {
			fmt.Printf(" %s %.1f", name, cpu1[name]-cpu0[name])
		}
		fmt.Println()
		fmt.Printf("jobctl: %s\n", metricLines(b, jobctlHealth, `kplane_controller_reconciles_total{controller="jobctl"}`,
			"kplane_jobctl_pod_create_calls_total", "kplane_jobctl_finalizer_removals_total"))
	}
}

// cpuSeconds reads each process's user+system CPU time from /proc.
func cpuSeconds(tb testing.TB, procs map[string]*launcher.Process) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for name, p := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err != nil {
			tb.Fatalf("cpu of %s: %v", name, err)
		}
		// Fields after the command (which may hold spaces) start after ") ".
		_, rest, _ := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		utime, err1 := strconv.ParseFloat(f[11], 64)
		stime, err2 := strconv.ParseFloat(f[12], 64)
		if err1 != nil || err2 != nil {
			tb.Fatalf("cpu of %s: parse %q %q", name, f[11], f[12])
		}
		out[name] = (utime + stime) / 100 // USER_HZ is 100 on Linux
	}
	return out
}

// metricLines returns the named series from a process's /metrics.
func metricLines(tb testing.TB, health string, names ...string) string {
	tb.Helper()
	resp, err := http.Get("http://" + health + "/metrics")
	if err != nil {
		tb.Fatalf("metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }() // a read error is reported below
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("metrics: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if strings.HasPrefix(l, n+" ") {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, ", ")
}
