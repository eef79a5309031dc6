package launcher

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func shell(t *testing.T, script string) Config {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	return Config{Name: "sh", Binary: sh, Args: []string{"-c", script}, LogDir: t.TempDir()}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestTermCleanExitAndRestart(t *testing.T) {
	// The script announces itself, then exits 0 on SIGTERM.
	p, err := Start(shell(t, `trap 'echo got TERM; exit 0' TERM; echo started; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "started", 1)
	if err := p.Term(ctx(t)); err != nil {
		t.Fatalf("Term: %v", err)
	}
	if p.Running() {
		t.Fatal("still running after Term")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "started", 2) // the log is appended across restarts
	if err := p.Kill(ctx(t)); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	var exit *exec.ExitError
	if err := p.ExitErr(); !errors.As(err, &exit) || exit.String() != "signal: killed" {
		t.Fatalf("exit after Kill = %v, want signal: killed", err)
	}
}

func TestTermReportsNonZeroExit(t *testing.T) {
	p, err := Start(shell(t, `trap 'exit 3' TERM; echo started; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "started", 1)
	var exit *exec.ExitError
	if err := p.Term(ctx(t)); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Term = %v, want exit status 3", err)
	}
}

func TestRestartRefusesWhileRunning(t *testing.T) {
	p, err := Start(shell(t, `while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(ctx(t)) }()
	if err := p.Restart(); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("Restart while running = %v", err)
	}
}

func TestWaitHealthyFailsWhenProcessExits(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfg := shell(t, `echo bad flag >&2; exit 2`)
	cfg.HealthAddr = addr
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitHealthy(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "exited before becoming healthy") {
		t.Fatalf("WaitHealthy = %v, want an early exit error", err)
	}
}

func TestWaitHealthyTimesOut(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfg := shell(t, `while :; do sleep 0.05; done`)
	cfg.HealthAddr = addr // nothing listens there
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(ctx(t)) }()
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.WaitHealthy(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitHealthy = %v, want a deadline error", err)
	}
}

// waitLog polls the process's log until line appears n times.
func waitLog(t *testing.T, p *Process, line string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(p.LogPath())
		if err == nil && strings.Count(string(b), line+"\n") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %s never had %q %d times: %s", p.LogPath(), line, n, b)
		}
		<-tick.C
	}
}

func TestWaitHealthyHTTP(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	cfg := shell(t, `while :; do sleep 0.05; done`)
	cfg.ReadyURL = srv.URL + "/readyz"
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(ctx(t)) }()

	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.WaitHealthy(short); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("WaitHealthy on a 503 = %v, want a timeout naming the status", err)
	}
	ready.Store(true)
	if err := p.WaitHealthy(ctx(t)); err != nil {
		t.Fatalf("WaitHealthy on a 200: %v", err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx(t).Done():
		t.Fatal("SIGKILL sent with Signal did not end the process")
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal after exit = %v, want nil", err)
	}
}

// FreeAddr never hands out a port twice, even when the kernel offers a
// port again because nobody has bound it yet.
func TestFreeAddrNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 300 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr returned %s twice", addr)
		}
		seen[addr] = true
	}
}

// TestFreeAddrAvoidsEphemeralPorts: where the kernel's ephemeral range is
// known, handed-out ports lie below it (outgoing connections cannot take
// them before their process binds them), and none is handed out twice.
func TestFreeAddrAvoidsEphemeralPorts(t *testing.T) {
	lo, hi := listenPortRange()
	if hi == 0 {
		t.Skip("no ephemeral port range to stay below here")
	}
	seen := map[string]bool{}
	for range 50 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < lo || port >= hi {
			t.Fatalf("port %d outside [%d, %d)", port, lo, hi)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}
