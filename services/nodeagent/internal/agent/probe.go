package agent

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Probe defaults, as in Kubernetes.
const (
	defaultProbePeriod    = 10 * time.Second
	defaultProbeTimeout   = time.Second
	defaultSuccessThresh  = 1
	defaultFailureThreshh = 3
)

// probeTarget is where a probe runs.
type probeTarget struct {
	// Container's ports resolve a probe port given by name.
	Container *kplanev1.Container
	PodIP     string
	Dir       string
	Env       []string
}

// probeState is the readiness of one run (attempt) of a container.
type probeState struct {
	attempt   int
	ready     bool
	successes int
	failures  int
	next      time.Time
}

// probeParams are a probe's timings with defaults applied.
type probeParams struct {
	initialDelay, period, timeout time.Duration
	successThreshold              int
	failureThreshold              int
}

func paramsOf(p *kplanev1.Probe) probeParams {
	pp := probeParams{
		initialDelay:     time.Duration(p.GetInitialDelaySeconds()) * time.Second,
		period:           time.Duration(p.GetPeriodSeconds()) * time.Second,
		timeout:          time.Duration(p.GetTimeoutSeconds()) * time.Second,
		successThreshold: int(p.GetSuccessThreshold()),
		failureThreshold: int(p.GetFailureThreshold()),
	}
	if pp.period <= 0 {
		pp.period = defaultProbePeriod
	}
	if pp.timeout <= 0 {
		pp.timeout = defaultProbeTimeout
	}
	if pp.successThreshold <= 0 {
		pp.successThreshold = defaultSuccessThresh
	}
	if pp.failureThreshold <= 0 {
		pp.failureThreshold = defaultFailureThreshh
	}
	return pp
}

// newProbeState starts probing a run that started at startedAt: the first
// probe is due after the initial delay, and the container is not ready
// until a probe succeeds.
func newProbeState(p *kplanev1.Probe, attempt int, startedAt time.Time) *probeState {
	return &probeState{attempt: attempt, next: startedAt.Add(paramsOf(p).initialDelay)}
}

// record applies one probe result with the thresholds: readiness turns on
// after successThreshold consecutive successes and off after
// failureThreshold consecutive failures. It schedules the next probe.
func (s *probeState) record(p *kplanev1.Probe, ok bool, now time.Time) {
	pp := paramsOf(p)
	if ok {
		s.successes++
		s.failures = 0
		if s.successes >= pp.successThreshold {
			s.ready = true
		}
	} else {
		s.failures++
		s.successes = 0
		if s.failures >= pp.failureThreshold {
			s.ready = false
		}
	}
	s.next = now.Add(pp.period)
}

// runProbe runs a tcpSocket or exec probe against target within the
// probe's timeout. HTTP probes are not supported and fail with a reason.
func runProbe(ctx context.Context, p *kplanev1.Probe, target probeTarget) error {
	pp := paramsOf(p)
	ctx, cancel := context.WithTimeout(ctx, pp.timeout)
	defer cancel()
	switch {
	case p.GetTcpSocket() != nil:
		host := p.GetTcpSocket().GetHost()
		if host == "" {
			host = target.PodIP
		}
		port, err := apiutil.ContainerPort(target.Container, p.GetTcpSocket().GetPort())
		if err != nil {
			return fmt.Errorf("tcp probe: %w", err)
		}
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("tcp probe %s: %w", addr, err)
		}
		return conn.Close()
	case p.GetExec() != nil:
		argv := p.GetExec().GetCommand()
		if len(argv) == 0 {
			return fmt.Errorf("exec probe: no command")
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = target.Dir
		cmd.Env = target.Env
		cmd.WaitDelay = pp.timeout
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("exec probe %v: %w (output %q)", argv, err, truncate(string(out), 200))
		}
		return nil
	case p.GetHttpGet() != nil:
		return fmt.Errorf("httpGet probes are not supported by this node agent")
	}
	return fmt.Errorf("probe has no handler")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
