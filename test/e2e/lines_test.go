package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lineWatch follows a long-running command's stdout (kubectl get --watch,
// kubectl logs -f, port-forward).
type lineWatch struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

// startLines starts c in its own process group (ended at cleanup: the
// kubectl on the PATH may be a dispatcher running the real client as a
// child, and a watch or port-forward never ends by itself) and collects
// its stdout lines.
func startLines(t *testing.T, c *exec.Cmd) *lineWatch {
	t.Helper()
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w := &lineWatch{t: t, added: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
			select {
			case w.added <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) // it never ends by itself
		<-done
		_ = c.Wait()
		if t.Failed() {
			t.Logf("%s stderr: %s", strings.Join(c.Args, " "), errb.String())
		}
	})
	return w
}

// waitLine waits until a line at index from or later satisfies ok, and
// returns the first such line; what describes it in the failure.
func (w *lineWatch) waitLine(from int, what string, ok func(string) bool) string {
	w.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		lines := append([]string(nil), w.lines...)
		w.mu.Unlock()
		for i := from; i < len(lines); i++ {
			if ok(lines[i]) {
				return lines[i]
			}
		}
		select {
		case <-w.added:
		case <-deadline:
			w.t.Fatalf("no line %s; printed %q", what, lines)
		}
	}
}

// waitPrefix waits until a line starting with prefix was printed.
func (w *lineWatch) waitPrefix(prefix string) {
	w.t.Helper()
	w.waitLine(0, fmt.Sprintf("starting with %q", prefix), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// waitFor waits until the line want was printed.
func (w *lineWatch) waitFor(want string) {
	w.t.Helper()
	w.waitLine(0, fmt.Sprintf("%q", want), func(l string) bool { return l == want })
}

// waitMatch waits until a line matching re was printed at index at or
// later, and returns the first such line.
func (w *lineWatch) waitMatch(re *regexp.Regexp, at int) string {
	w.t.Helper()
	return w.waitLine(at, fmt.Sprintf("%d or later matching %s", at, re), re.MatchString)
}
