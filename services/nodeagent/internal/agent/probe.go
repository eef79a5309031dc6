package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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

// probeKind names a probe as the kubelet's events and messages do.
type probeKind string

const (
	probeReadiness probeKind = "Readiness"
	probeLiveness  probeKind = "Liveness"
	probeStartup   probeKind = "Startup"
)

// AnnotationFakeProbePrefix + "readiness", "liveness" or "startup": with
// the fake runtime, which runs no process to probe, a probe of that kind
// fails while the pod's annotation says "failure" and succeeds otherwise.
// Scale tests flip a pod's readiness by changing one annotation; the
// probe's period and thresholds apply as to a real probe.
const AnnotationFakeProbePrefix = "kplane.io/fake-probe-"

// probeTarget is where a probe runs.
type probeTarget struct {
	// Container's ports resolve a probe port given by name.
	Container *kplanev1.Container
	PodIP     string
	Dir       string
	Env       []string
}

// probeState follows one probe of one run (attempt) of a container.
type probeState struct {
	attempt int
	// ok is the probe's current verdict with the thresholds applied.
	ok bool
	// everOK: the probe has succeeded once for this run (a startup probe
	// is done then).
	everOK    bool
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
// probe is due after the initial delay. A liveness probe starts out
// passing (the container lives until proven otherwise); readiness and
// startup start out failing, as in Kubernetes.
func newProbeState(kind probeKind, p *kplanev1.Probe, attempt int, startedAt time.Time) *probeState {
	return &probeState{attempt: attempt, ok: kind == probeLiveness, next: startedAt.Add(paramsOf(p).initialDelay)}
}

// record applies one probe result with the thresholds: the verdict turns
// to success after successThreshold consecutive successes and to failure
// after failureThreshold consecutive failures. It schedules the next probe.
func (s *probeState) record(p *kplanev1.Probe, ok bool, now time.Time) {
	pp := paramsOf(p)
	if ok {
		s.successes++
		s.failures = 0
		if s.successes >= pp.successThreshold {
			s.ok, s.everOK = true, true
		}
	} else {
		s.failures++
		s.successes = 0
		if s.failures >= pp.failureThreshold {
			s.ok = false
		}
	}
	s.next = now.Add(pp.period)
}

// failed reports whether the failure threshold has been reached.
func (s *probeState) failed(p *kplanev1.Probe) bool {
	return s.failures >= paramsOf(p).failureThreshold
}

// fakeProbe is the fake runtime's probe: the pod's annotation decides.
func fakeProbe(pod *kplanev1.Pod, kind probeKind) error {
	if pod.GetMetadata().GetAnnotations()[AnnotationFakeProbePrefix+strings.ToLower(string(kind))] == "failure" {
		return fmt.Errorf("annotation %s%s is \"failure\"", AnnotationFakeProbePrefix, strings.ToLower(string(kind)))
	}
	return nil
}

// runProbe runs an httpGet, tcpSocket, grpc or exec probe against target
// within the probe's timeout.
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
			return fmt.Errorf("dial tcp %s: %w", addr, errCause(err))
		}
		return conn.Close()
	case p.GetExec() != nil:
		return runExec(ctx, p.GetExec().GetCommand(), target, pp.timeout)
	case p.GetHttpGet() != nil:
		return httpGet(ctx, p.GetHttpGet(), target)
	case p.GetGrpc() != nil:
		return grpcCheck(ctx, p.GetGrpc(), target)
	}
	return fmt.Errorf("probe has no handler")
}

// runExec runs argv beside the container: in its directory with its
// environment. Exit code 0 is success.
func runExec(ctx context.Context, argv []string, target probeTarget, waitDelay time.Duration) error {
	if len(argv) == 0 {
		return fmt.Errorf("exec: no command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = target.Dir
	cmd.Env = target.Env
	cmd.WaitDelay = waitDelay
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("command %q timed out", strings.Join(argv, " "))
		}
		return fmt.Errorf("command %q: %w, output: %q", strings.Join(argv, " "), err, truncate(string(out), 200))
	}
	return nil
}

// httpGet sends a GET to the container: status 200–399 is success.
// Certificates are not verified over HTTPS, as the kubelet does not.
func httpGet(ctx context.Context, h *kplanev1.HTTPGetAction, target probeTarget) error {
	host := h.GetHost()
	if host == "" {
		host = target.PodIP
	}
	port, err := apiutil.ContainerPort(target.Container, h.GetPort())
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	scheme := strings.ToLower(h.GetScheme())
	if scheme == "" {
		scheme = "http"
	}
	path := h.GetPath()
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u, err := url.Parse(scheme + "://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + path)
	if err != nil {
		return fmt.Errorf("http probe: bad URL: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	req.Header.Set("User-Agent", "kplane-probe/1.0")
	req.Header.Set("Accept", "*/*")
	for _, hd := range h.GetHttpHeaders() {
		if strings.EqualFold(hd.GetName(), "Host") {
			req.Host = hd.GetValue()
			continue
		}
		req.Header.Add(hd.GetName(), hd.GetValue())
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, as in Kubernetes
		DisableKeepAlives: true,
		Proxy:             nil,
	}
	defer tr.CloseIdleConnections()
	// Redirects are followed on the same host only; one elsewhere ends
	// the probe with its 3xx, a success, as the kubelet does.
	cl := &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 || r.URL.Host != via[0].URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := cl.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("get %q: timed out", u.String())
		}
		return fmt.Errorf("get %q: %w", u.String(), errCause(err))
	}
	// Only the status counts; a little of the body goes into the message.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d (body %q)", resp.StatusCode, truncate(string(body), 100))
	}
	return nil
}

// grpcCheck calls grpc.health.v1.Health/Check on the container's port.
func grpcCheck(ctx context.Context, g *kplanev1.GRPCAction, target probeTarget) error {
	addr := net.JoinHostPort(target.PodIP, strconv.Itoa(int(g.GetPort())))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent("kplane-probe/1.0"))
	if err != nil {
		return fmt.Errorf("grpc probe %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: g.GetService()})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("timeout: health rpc to %s did not complete", addr)
		}
		return fmt.Errorf("health rpc to %s failed: %w", addr, err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("service unhealthy (responded with %q)", s.String())
	}
	return nil
}

// errCause strips the URL wrappers from a network error, leaving the
// part a user acts on ("connection refused").
func errCause(err error) error {
	if ue, ok := err.(*url.Error); ok {
		err = ue.Err
	}
	if oe, ok := err.(*net.OpError); ok && oe.Err != nil {
		return oe.Err
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
