package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/pki"
	"github.com/kplane/kplane/test/e2e/dockernet"
	"github.com/kplane/kplane/test/e2e/stack"
)

// A target is the system under test: a set of units (processes or
// containers) that can be signalled and started again.
type target interface {
	// Name describes the target in the report.
	Name() string
	// APIAddr is the apiserver's gRPC address.
	APIAddr() string
	// ClientOptions connect to the apiserver as the admin.
	ClientOptions() client.Options
	// Units lists every killable unit.
	Units(ctx context.Context) ([]unit, error)
	// Stop sends sig to u and waits until it has exited.
	Stop(ctx context.Context, u unit, sig syscall.Signal) error
	// Start starts a stopped unit again.
	Start(ctx context.Context, u unit) error
	// Running reports whether u runs.
	Running(ctx context.Context, u unit) bool
	// WaitReady waits until u reports ready.
	WaitReady(ctx context.Context, u unit) error
	// LiveIdentity reports whether a leader-election identity belongs to a
	// running process of the controller.
	LiveIdentity(ctx context.Context, controller, identity string) bool
	// Controllers are the leader-elected services the target runs.
	Controllers() []string
	// Close releases the target (a local target stops its processes).
	Close(ctx context.Context) error
}

// unit is one process or container.
type unit struct {
	// Name is unique: "replicactl-1", "kplane_replicactl_1".
	Name string
	// Service groups units in the report: "replicactl", "nodeagent".
	Service string
	// ID is the container id (compose); empty for local processes.
	ID string
}

// localTarget runs the stack as local processes (package stack).
type localTarget struct {
	s *stack.Stack
}

func newLocalTarget(ctx context.Context, opts stack.Options) (*localTarget, error) {
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start local stack: %w", err)
	}
	return &localTarget{s: s}, nil
}

func (t *localTarget) Name() string    { return "local processes" }
func (t *localTarget) APIAddr() string { return t.s.APIAddr() }

// ClientOptions implements target.
func (t *localTarget) ClientOptions() client.Options { return t.s.ClientOptions() }
func (t *localTarget) Controllers() []string {
	return append([]string(nil), t.s.Options().Controllers...)
}

func (t *localTarget) Units(context.Context) ([]unit, error) {
	var out []unit
	for _, svc := range t.s.Services() {
		out = append(out, unit{Name: svc.Name, Service: svc.Binary})
	}
	return out, nil
}

func (t *localTarget) svc(u unit) (*stack.Service, error) {
	svc := t.s.Service(u.Name)
	if svc == nil {
		return nil, fmt.Errorf("no process %s", u.Name)
	}
	return svc, nil
}

func (t *localTarget) Stop(ctx context.Context, u unit, sig syscall.Signal) error {
	svc, err := t.svc(u)
	if err != nil {
		return err
	}
	if sig == syscall.SIGKILL {
		return svc.Process().Kill(ctx)
	}
	// A non-zero exit after SIGTERM is a finding, but Term's error also
	// covers "did not stop in time" (then it was killed).
	return svc.Process().Term(ctx)
}

func (t *localTarget) Start(_ context.Context, u unit) error {
	svc, err := t.svc(u)
	if err != nil {
		return err
	}
	return svc.Process().Restart()
}

func (t *localTarget) Running(_ context.Context, u unit) bool {
	svc, err := t.svc(u)
	return err == nil && svc.Process().Running()
}

func (t *localTarget) WaitReady(ctx context.Context, u unit) error {
	svc, err := t.svc(u)
	if err != nil {
		return err
	}
	return svc.WaitReady(ctx)
}

// LiveIdentity: a local identity is hostname_pid (the default).
func (t *localTarget) LiveIdentity(_ context.Context, controller, identity string) bool {
	i := strings.LastIndexByte(identity, '_')
	if i < 0 {
		return false
	}
	pid, err := strconv.Atoi(identity[i+1:])
	if err != nil {
		return false
	}
	for _, svc := range t.s.Services() {
		if svc.Runs(controller) && svc.Process().Running() && svc.Process().Pid() == pid {
			return true
		}
	}
	return false
}

func (t *localTarget) Close(ctx context.Context) error { return t.s.Stop(ctx) }

// composeTarget drives a running compose project through the docker CLI.
type composeTarget struct {
	project     string
	apiAddr     string
	certs       string // the admin's CA and client certificate; "" for plaintext
	controllers []string
	// ha groups apiserver, apiserver-2 and apiserver-3 as one service, and
	// network is the project's network (for partitions).
	ha      bool
	network string

	// One `docker ps` answers Running for every container for a moment,
	// rather than a docker inspect per container per check.
	mu      sync.Mutex
	running map[string]bool // container id -> running
	readAt  time.Time
	units   []unit // cachedUnits
	unitsAt time.Time
	// cut holds each partitioned container's endpoint, for Heal.
	cut map[string]dockernet.Endpoint
}

func (t *composeTarget) Name() string {
	if t.ha {
		return "compose project " + t.project + " (HA: three apiservers, stacked etcd)"
	}
	return "compose project " + t.project
}
func (t *composeTarget) APIAddr() string { return t.apiAddr }

// ClientOptions implements target: the admin's certificate from the
// directory `make up` wrote (pkg/pki's file names).
func (t *composeTarget) ClientOptions() client.Options {
	if t.certs == "" {
		return client.Options{Address: t.apiAddr}
	}
	return client.Options{Address: t.apiAddr, TLSCA: filepath.Join(t.certs, pki.CACert),
		ClientCertFile: filepath.Join(t.certs, pki.AdminCert), ClientKeyFile: filepath.Join(t.certs, pki.AdminKey)}
}
func (t *composeTarget) Controllers() []string { return t.controllers }

// docker runs the docker CLI (dockernet's, shared with the e2e tests).
func docker(ctx context.Context, args ...string) (string, error) {
	return dockernet.Docker(ctx, args...)
}

// Units lists the project's containers, running or not.
func (t *composeTarget) Units(ctx context.Context) ([]unit, error) {
	out, err := docker(ctx, "ps", "-a", "--no-trunc", "--filter", "label=com.docker.compose.project="+t.project,
		"--format", `{{.ID}} {{.Names}} {{.Label "com.docker.compose.service"}}`)
	if err != nil {
		return nil, err
	}
	var units []unit
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		svc := f[2]
		// One container per node: nodeagent-1, proxy-1, ...
		perNode := []string{"nodeagent", "proxy"}
		if t.ha {
			perNode = append(perNode, "apiserver")
		}
		for _, p := range perNode {
			if strings.HasPrefix(svc, p+"-") {
				svc = p
			}
		}
		units = append(units, unit{ID: f[0], Name: f[1], Service: svc})
	}
	sort.Slice(units, func(i, j int) bool { return units[i].Name < units[j].Name })
	if len(units) == 0 {
		return nil, fmt.Errorf("compose project %q has no containers (is the stack up? make up)", t.project)
	}
	return units, nil
}

// cachedUnits is Units read at most once a second: a check of every
// controller lease asks for each holder, and on a loaded engine each
// docker ps takes a second or more.
func (t *composeTarget) cachedUnits(ctx context.Context) ([]unit, error) {
	t.mu.Lock()
	if time.Since(t.unitsAt) < time.Second {
		units := t.units
		t.mu.Unlock()
		return units, nil
	}
	t.mu.Unlock()
	units, err := t.Units(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.units, t.unitsAt = units, time.Now()
	t.mu.Unlock()
	return units, nil
}

func (t *composeTarget) invalidate() {
	t.mu.Lock()
	t.readAt = time.Time{}
	t.mu.Unlock()
}

func (t *composeTarget) Stop(ctx context.Context, u unit, sig syscall.Signal) error {
	defer t.invalidate()
	if sig == syscall.SIGKILL {
		_, err := docker(ctx, "kill", "--signal", "KILL", u.ID)
		return err
	}
	// docker stop: SIGTERM, SIGKILL after the timeout, and waits.
	_, err := docker(ctx, "stop", "--time", "30", u.ID)
	return err
}

func (t *composeTarget) Start(ctx context.Context, u unit) error {
	defer t.invalidate()
	_, err := docker(ctx, "start", u.ID)
	return err
}

func (t *composeTarget) Running(ctx context.Context, u unit) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.readAt) > 500*time.Millisecond {
		out, err := docker(ctx, "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project="+t.project)
		if err != nil {
			return false
		}
		t.running = map[string]bool{}
		for _, id := range strings.Fields(out) {
			t.running[id] = true
		}
		t.readAt = time.Now()
	}
	return t.running[u.ID]
}

// WaitReady polls the container's health status (the image's
// healthcheck binary against /readyz).
func (t *composeTarget) WaitReady(ctx context.Context, u unit) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := docker(ctx, "inspect", "--format", "{{.State.Running}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", u.ID)
		if err == nil && (out == "true healthy" || out == "true none") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy (%s): %w", u.Name, out, ctx.Err())
		case <-tick.C:
		}
	}
}

// LiveIdentity: in a container the identity is <container id>_<pid>,
// the hostname being the short container id.
func (t *composeTarget) LiveIdentity(ctx context.Context, controller, identity string) bool {
	i := strings.LastIndexByte(identity, '_')
	if i <= 0 {
		return false
	}
	host := identity[:i]
	units, err := t.cachedUnits(ctx)
	if err != nil {
		return false
	}
	for _, u := range units {
		runs := u.Service == controller || (u.Service == stack.KCM && stack.KCMHosts(controller))
		if runs && strings.HasPrefix(u.ID, host) {
			return t.Running(ctx, u)
		}
	}
	return false
}

func (t *composeTarget) Close(context.Context) error { return nil }
