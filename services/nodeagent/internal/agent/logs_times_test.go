package agent

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// logsBase is the agent's logs server, once node-a publishes its port.
func (e *env) logsBase() string {
	e.t.Helper()
	var port int32
	waitFor(e.t, e.ctx, "node-a's logs port", func() bool {
		n, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "node-a")
		port = n.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
		return err == nil && port != 0
	})
	return "http://127.0.0.1:" + strconv.Itoa(int(port))
}

// getLogs asks the agent's logs server for a container's log.
func (e *env) getLogs(pod, container string, q url.Values) (int, string) {
	e.t.Helper()
	u := e.logsBase() + "/logs/default/" + pod + "/" + container + "?" + q.Encode()
	resp, err := http.Get(u)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

var stampedLine = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)$`)

// stamped splits timestamps=true output into times and lines.
func stamped(t *testing.T, out string) ([]time.Time, []string) {
	t.Helper()
	var times []time.Time
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := stampedLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q has no timestamp prefix (output %q)", l, out)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatal(err)
		}
		times, lines = append(times, ts), append(lines, m[2])
	}
	return times, lines
}

// The exec runtime keeps each line's time: timestamps=true prefixes it
// (rising, RFC 3339 with nanoseconds, UTC), sinceTime starts at the first
// line not older than it (combined with tailLines and previous), a
// follower with a sinceTime in the future waits for the first line after
// it, and the plain log is unchanged.
func TestLogsSinceAndTimestamps(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	// Each line after the first waits for a file the test creates, so the
	// test decides which lines exist when it asks.
	p := e.createPod("stamped", "node-a", nil, "sh", "-c",
		`if [ -e ../ran ]; then exec sleep 300; fi; touch ../ran; echo one; for n in two three four; do while [ ! -e ../$n ]; do sleep 0.05; done; echo $n; done; exit 1`)
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	podDir := filepath.Join(e.root, podsDir, p.GetMetadata().GetUid())
	release := func(n string) {
		if err := os.WriteFile(filepath.Join(podDir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logged := func(want string) {
		waitFor(t, e.ctx, "log "+strconv.Quote(want), func() bool {
			code, out := e.getLogs("stamped", "main", nil)
			return code == 200 && out == want
		})
	}
	logged("one\n")
	release("two")
	logged("one\ntwo\n")

	code, out := e.getLogs("stamped", "main", url.Values{"timestamps": {"true"}})
	if code != 200 {
		t.Fatalf("timestamps=true: %d %s", code, out)
	}
	times, lines := stamped(t, out)
	if strings.Join(lines, ",") != "one,two" || times[1].Before(times[0]) {
		t.Fatalf("timestamps=true: %q", out)
	}
	if d := time.Since(times[0]); d < 0 || d > time.Minute {
		t.Errorf("first line's time %v is not a recent time", times[0])
	}
	at := func(ts time.Time) string { return ts.UTC().Format(time.RFC3339Nano) }
	for _, c := range []struct {
		q    url.Values
		want string
	}{
		{url.Values{"sinceTime": {at(times[1])}}, "two\n"},
		{url.Values{"sinceTime": {at(times[0])}}, "one\ntwo\n"},
		{url.Values{"sinceTime": {at(times[1].Add(time.Nanosecond))}}, ""},
		{url.Values{"sinceSeconds": {"3600"}}, "one\ntwo\n"},
		{url.Values{"sinceTime": {at(times[0])}, "tailLines": {"1"}}, "two\n"},
		{url.Values{"sinceTime": {at(times[1])}, "tailLines": {"2"}}, "two\n"},
		{url.Values{"sinceTime": {at(times[1])}, "timestamps": {"true"}}, times[1].UTC().Format(rfc3339NanoFixed) + " two\n"},
		{url.Values{"tailLines": {"1"}, "timestamps": {"true"}, "limitBytes": {"31"}}, times[1].UTC().Format(rfc3339NanoFixed) + " "},
	} {
		if code, out := e.getLogs("stamped", "main", c.q); code != 200 || out != c.want {
			t.Errorf("%s: %d %q, want %q", c.q.Encode(), code, out, c.want)
		}
	}
	if code, out := e.getLogs("stamped", "main", url.Values{"sinceSeconds": {"5"}, "sinceTime": {at(times[0])}}); code != 400 || !strings.Contains(out, "at most one of sinceTime or sinceSeconds") {
		t.Errorf("both since parameters: %d %q", code, out)
	}

	// A follower from after the last line waits for the next one.
	after := time.Now()
	q := url.Values{"follow": {"true"}, "sinceTime": {at(after)}, "timestamps": {"true"}}
	resp, err := http.Get(e.logsBase() + "/logs/default/stamped/main?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	release("three")
	buf := make([]byte, 256)
	got := ""
	for !strings.Contains(got, "three\n") {
		k, err := resp.Body.Read(buf)
		got += string(buf[:k])
		if err != nil {
			t.Fatalf("follow from %v: %q then %v", after, got, err)
		}
	}
	ft, fl := stamped(t, got)
	if strings.Join(fl, ",") != "three" || ft[0].Before(after) {
		t.Fatalf("follow from %v: %q", after, got)
	}

	// The run ends (exit 1) and restarts (the second run only sleeps);
	// previous=true serves the ended run, with its times.
	release("four")
	e.waitCreated(p, "restarted", func(p *kplanev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetRestartCount() >= 1
	})
	code, out = e.getLogs("stamped", "main", url.Values{"previous": {"true"}, "timestamps": {"true"}})
	pt, pl := stamped(t, out)
	if code != 200 || strings.Join(pl, ",") != "one,two,three,four" || !pt[0].Equal(times[0]) || !pt[1].Equal(times[1]) {
		t.Fatalf("previous with timestamps: %d %q", code, out)
	}
	if code, out := e.getLogs("stamped", "main", url.Values{"previous": {"true"}, "sinceTime": {at(times[1])}, "tailLines": {"3"}}); code != 200 || out != "two\nthree\nfour\n" {
		t.Errorf("previous since two, tail 3: %d %q", code, out)
	}
	if code, out := e.getLogs("stamped", "main", url.Values{"previous": {"true"}, "sinceTime": {at(pt[3].Add(time.Nanosecond))}}); code != 200 || out != "" {
		t.Errorf("previous since after its last line: %d %q", code, out)
	}
}
