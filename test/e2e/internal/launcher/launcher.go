// Package launcher starts kplane binaries as real processes for end-to-end
// tests and local development: a process runs with its arguments, logs to
// a file, is waited on until its gRPC health check reports SERVING, and is
// stopped with SIGTERM (graceful) or SIGKILL (a crash), or restarted with
// the same arguments.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Config describes one process to run.
type Config struct {
	// Name identifies the process in errors and names its log file.
	Name string
	// Binary is the path of the executable.
	Binary string
	// Args are the command-line arguments (without the binary).
	Args []string
	// Env is added to the current environment.
	Env []string
	// LogDir receives <Name>.log with the process's stdout and stderr,
	// appended across restarts.
	LogDir string
	// HealthAddr is the gRPC address whose grpc.health.v1 service
	// WaitHealthy polls; empty disables health checks.
	HealthAddr string
	// ReadyURL, when set, is an HTTP URL (a controller's or node agent's
	// /readyz) that WaitHealthy polls instead of HealthAddr: ready once it
	// answers 200.
	ReadyURL string
}

// Process is a running (or exited) process started by Start.
type Process struct {
	cfg Config

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
	err  error         // the exit status of the current process, after done
	log  *os.File
}

// Start runs the binary and returns at once; use WaitHealthy to wait
// until it serves.
func Start(cfg Config) (*Process, error) {
	if cfg.Name == "" {
		cfg.Name = filepath.Base(cfg.Binary)
	}
	p := &Process{cfg: cfg}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Process) start() error {
	if err := os.MkdirAll(p.cfg.LogDir, 0o755); err != nil {
		return fmt.Errorf("%s: create log dir: %w", p.cfg.Name, err)
	}
	logf, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open log: %w", p.cfg.Name, err)
	}
	// The marker lines are best effort: the process's own output is what
	// the log is for, and a failing log file fails the process's writes too.
	_, _ = fmt.Fprintf(logf, "==== launcher: starting %s %v at %s\n", p.cfg.Binary, p.cfg.Args, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.cfg.Binary, p.cfg.Args...)
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group, so a terminal's Ctrl-C reaches the launcher
	// only, which then stops its processes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("%s: start %s: %w", p.cfg.Name, p.cfg.Binary, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err, p.log = cmd, done, nil, logf
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		_, _ = fmt.Fprintf(logf, "==== launcher: %s exited: %v\n", p.cfg.Name, exitText(err))
		_ = logf.Close()
		close(done)
	}()
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// Name is the process's name.
func (p *Process) Name() string { return p.cfg.Name }

// LogPath is the file the process logs to.
func (p *Process) LogPath() string { return filepath.Join(p.cfg.LogDir, p.cfg.Name+".log") }

// Pid is the current process id.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Done is closed when the current process exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is the current process's exit status (nil for exit code 0);
// valid once Done is closed.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Running reports whether the current process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// WaitHealthy polls until the process is ready: the HTTP ReadyURL
// answers 200 when it is set, else the gRPC health check at HealthAddr
// reports SERVING. It fails early when the process exits, and when ctx
// ends.
func (p *Process) WaitHealthy(ctx context.Context) error {
	var (
		check func(context.Context) error
		where string
	)
	switch {
	case p.cfg.ReadyURL != "":
		where = p.cfg.ReadyURL
		client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
		check = func(ctx context.Context) error { return checkHTTP(ctx, client, p.cfg.ReadyURL) }
	case p.cfg.HealthAddr != "":
		where = p.cfg.HealthAddr
		conn, err := grpc.NewClient(p.cfg.HealthAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("%s: dial %s: %w", p.cfg.Name, p.cfg.HealthAddr, err)
		}
		defer func() { _ = conn.Close() }() // the check is over; nothing to flush
		hc := healthpb.NewHealthClient(conn)
		check = func(ctx context.Context) error {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health status %v", resp.GetStatus())
			}
			return nil
		}
	default:
		return fmt.Errorf("%s: no health address configured", p.cfg.Name)
	}
	done := p.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		// A check cut short by ctx says less than the one before it.
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-done:
			// The log usually goes with the test's temporary directory:
			// its end is what says why.
			return fmt.Errorf("%s exited before becoming healthy (%s); see %s; it ends:\n%s", p.cfg.Name, exitText(p.ExitErr()), p.LogPath(), logEnd(p.LogPath(), 15))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s: %w (last check: %v); see %s", p.cfg.Name, where, ctx.Err(), last, p.LogPath())
		case <-tick.C:
		}
	}
}

// checkHTTP GETs url and fails unless the answer is 200.
func checkHTTP(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("request %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close() // read-only
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// Signal sends sig to the current process without waiting for it to
// exit (a no-op when it already has).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	proc, done := p.cmd.Process, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return nil
	default:
	}
	if err := proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: send %v: %w", p.cfg.Name, sig, err)
	}
	return nil
}

// Config is the configuration the process was started with.
func (p *Process) Config() Config { return p.cfg }

// Kill sends SIGKILL, a crash the process cannot react to, and waits for
// it to exit.
func (p *Process) Kill(ctx context.Context) error {
	return p.signalAndWait(ctx, syscall.SIGKILL)
}

// Term sends SIGTERM and waits for the process to exit; it returns the
// exit status (nil for a clean exit 0). When ctx ends first the process
// is killed and Term reports that it did not stop in time.
func (p *Process) Term(ctx context.Context) error {
	if err := p.signalAndWait(ctx, syscall.SIGTERM); err != nil {
		killCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Kill(killCtx)
		return err
	}
	return p.ExitErr()
}

func (p *Process) signalAndWait(ctx context.Context, sig syscall.Signal) error {
	p.mu.Lock()
	proc, done := p.cmd.Process, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return nil // already gone
	default:
	}
	if err := proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: send %v: %w", p.cfg.Name, sig, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s did not exit after %v: %w", p.cfg.Name, sig, ctx.Err())
	}
}

// Restart starts the binary again with the same arguments. The previous
// process must have exited (Kill or Term it first).
func (p *Process) Restart() error {
	if p.Running() {
		return fmt.Errorf("%s: restart while still running (pid %d)", p.cfg.Name, p.Pid())
	}
	return p.start()
}

// handedOut holds the ports FreeAddr returned in this process: a port is
// closed when handed out and bound later by its process, so the kernel may
// offer it again in between (two processes of one stack got the same
// health port in a CI run). FreeAddr never returns a port twice.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a process's --listen flag, and that no earlier FreeAddr call
// of this process returned.
//
// The port lies below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): between FreeAddr and the process's
// bind, every outgoing connection on the host takes a local port from
// that range, and a listener picked from it was taken that way (an
// apiserver's own etcd client connections, opened before it binds
// --listen, are enough). Where the range cannot be read, the kernel picks.
func FreeAddr() (string, error) {
	lo, hi := listenPortRange()
	for range 100 {
		port, err := freePort(lo, hi)
		if err != nil {
			return "", err
		}
		handedOut.Lock()
		taken := handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if !taken {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
		}
	}
	return "", fmt.Errorf("find a free port: 100 ports offered were all handed out already")
}

// listenPortRange is where FreeAddr picks ports: [lo, hi), below the
// ephemeral range; 0, 0 when that range is unknown or leaves no room.
func listenPortRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil || first <= 12000 {
		return 0, 0
	}
	return 10000, first
}

// freePort binds a random port in [lo, hi) (the kernel's choice when
// hi is 0) and returns it once closed.
func freePort(lo, hi int) (int, error) {
	for range 100 {
		addr := "127.0.0.1:0"
		if hi > lo {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if hi > lo && errors.Is(err, syscall.EADDRINUSE) {
				continue // taken: try another
			}
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		return port, nil
	}
	return 0, fmt.Errorf("find a free port: 100 ports in [%d, %d) were taken", lo, hi)
}

// logEnd is the last n lines of the log at path, or why it cannot be read.
func logEnd(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
