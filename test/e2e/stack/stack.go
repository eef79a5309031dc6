// Package stack runs the whole kplane control plane as local processes:
// the apiserver, every controller (N replicas each, one leader) and node
// agents, the same set the compose deployment runs in containers. `make
// dev`, the chaos harness and end-to-end tests start it through the same
// launcher (test/e2e/internal/launcher), so a process is started, waited
// on, killed and restarted the same way everywhere.
package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// Controllers are the leader-elected binaries of the control plane, in the
// order they start; each holds the Lease kplane-system/<name>.
var Controllers = []string{"tokenctl", "scheduler", "replicactl", "nodectl", "ipamctl", "gcctl", "endpointsctl", "jobctl", "cronjobctl", "pvctl", "deploymentctl", "statefulsetctl", "daemonsetctl", "disruptionctl"}

// KCM is the binary that hosts several controllers in one process
// (services/kcm, kube-controller-manager's shape).
const KCM = "kcm"

// KCMHosts reports whether kcm can host controller: every one of
// Controllers but the scheduler (which Kubernetes also runs apart).
func KCMHosts(controller string) bool {
	return controller != "scheduler" && slices.Contains(Controllers, controller)
}

// Runtime names of the node agent.
const (
	RuntimeExec = "exec"
	RuntimeFake = "fake"
)

// Options describe the processes to run.
type Options struct {
	// BinDir holds the binaries (`make build` writes bin/).
	BinDir string
	// DataDir holds the apiserver's etcd (DataDir/apiserver) and the
	// node agents' root dirs (DataDir/nodes/<node>).
	DataDir string
	// LogDir receives one <process>.log per process; DataDir/logs when empty.
	LogDir string
	// APIAddr is the apiserver's gRPC address; a free loopback port when empty.
	APIAddr string
	// APIHealthAddr is the apiserver's HTTP health address; free when empty.
	APIHealthAddr string
	// Controllers to run; Controllers (all of them) when nil.
	Controllers []string
	// Replicas of each controller (at least 1).
	Replicas int
	// KCM are controllers (of Controllers, each KCMHosts) run as Replicas
	// kcm processes, each with --controllers=<them>, instead of one
	// process per controller. Args of a hosted controller are given to
	// kcm (its flags keep their names there); Args["kcm"] too.
	KCM []string
	// Mono puts every controller of Controllers that kcm can host into
	// KCM (the mono shape).
	Mono bool
	// KCMBinary is the kcm binary's path (BinDir/kcm when empty), e.g. a
	// test build that hosts a loop of its own too.
	KCMBinary string
	// ControllerArgs are added to every controller's command line (e.g.
	// short leader-election timings).
	ControllerArgs []string
	// Args are added to the command line of one binary, by binary name
	// ("apiserver", "nodectl", "nodeagent", ...).
	Args map[string][]string
	// Runtime of the node agents: RuntimeExec (default) runs one agent
	// per node, each running pods as processes; RuntimeFake runs one
	// agent process registering Nodes fake nodes.
	Runtime string
	// Nodes is the number of nodes (default 3).
	Nodes int
	// NoProxy leaves out the service proxy. By default one proxy runs for
	// the host (every node's pods share the host's network, so one proxy
	// serves them all), as a kube-proxy beside each node agent in compose.
	NoProxy bool
	// CloudAddr is cloudsim's gRPC address with Cloud; free when empty.
	CloudAddr string
	// LogFormat and LogLevel are passed to every process when set.
	LogFormat, LogLevel string
	// Cloud runs the simulated cloud: cloudsim (state in
	// DataDir/cloudsim, an instance per node created at its start) and
	// cloudctl, the cloud controller manager; every node agent runs with
	// --cloud-provider=external at an address of its own (NodeIP).
	Cloud bool
	// CloudLBRange is cloudsim's --lb-ip-range; a loopback /24 of this
	// process's own when empty.
	CloudLBRange string
	// Insecure runs the apiserver in plaintext without authentication or
	// authorization (anyone reaching it may do anything). By default the
	// stack runs as compose does: TLS, every process under its own
	// identity (a client certificate from DataDir/certs, which Start
	// makes with pkg/pki) and RBAC plus the Node authorizer.
	Insecure bool
}

// Service is one process of the stack.
type Service struct {
	// Name is unique in the stack: "apiserver", "replicactl-1", "nodeagent-2".
	Name string
	// Binary is the binary's name: "apiserver", "replicactl", "nodeagent".
	Binary string
	// HealthAddr is the process's HTTP /healthz /readyz /metrics address.
	HealthAddr string
	// RootDir is a node agent's --root-dir (empty for other binaries).
	RootDir string
	// Hosts are the controllers the process runs: a controller's own
	// binary runs itself, a kcm several (nil for other binaries).
	Hosts []string

	proc *launcher.Process
}

// Runs reports whether the process runs controller's loop.
func (s *Service) Runs(controller string) bool { return slices.Contains(s.Hosts, controller) }

// Process is the launcher's handle on the process (kill, restart, logs).
func (s *Service) Process() *launcher.Process { return s.proc }

// WaitReady waits until /readyz answers 200 (the apiserver: until its
// gRPC health check reports SERVING).
func (s *Service) WaitReady(ctx context.Context) error { return s.proc.WaitHealthy(ctx) }

// Stack is a running set of processes.
type Stack struct {
	opts     Options
	services []*Service
}

// Start runs the apiserver, waits until it serves, then starts every
// controller replica, the node agents and the proxy and waits until each
// is ready.
// On error the processes already started are killed.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	s := &Stack{opts: opts}
	defer func() {
		if err != nil {
			s.kill()
		}
	}()
	apiArgs := []string{"--data-dir", filepath.Join(opts.DataDir, "apiserver"), "--listen", opts.APIAddr, "--health-addr", opts.APIHealthAddr}
	grpcHealth := opts.APIAddr
	if !opts.Insecure {
		if err := opts.makeCerts(); err != nil {
			return nil, err
		}
		apiArgs = append(apiArgs, opts.apiserverSecurityArgs()...)
		grpcHealth = "" // readiness from --health-addr's /readyz, which needs no credentials
	}
	if _, err := s.add("apiserver", "apiserver", opts.APIHealthAddr, "", apiArgs, grpcHealth); err != nil {
		return nil, err
	}
	if err := s.services[0].WaitReady(ctx); err != nil {
		return nil, err
	}
	if opts.Cloud {
		if err := s.startCloud(ctx); err != nil {
			return nil, err
		}
	}
	separate, hosted := opts.split()
	if err := s.startKCM(hosted); err != nil {
		return nil, err
	}
	for _, c := range separate {
		for i := 1; i <= opts.Replicas; i++ {
			health, err := launcher.FreeAddr()
			if err != nil {
				return nil, err
			}
			args := append([]string{"--apiserver", opts.APIAddr, "--health-addr", health}, opts.ControllerArgs...)
			args = append(args, opts.identityArgs(c)...)
			if c == "tokenctl" {
				args = append(args, opts.tokenctlArgs()...)
			}
			if c == "cloudctl" {
				args = append(args, "--cloud", opts.CloudAddr)
			}
			if c == "pvctl" {
				// local-path volumes live here; the node agents, on the
				// same host, see them at the same path.
				args = append(args, "--storage-root", opts.StorageRoot())
			}
			svc, err := s.add(fmt.Sprintf("%s-%d", c, i), c, health, "", args, "")
			if err != nil {
				return nil, err
			}
			svc.Hosts = []string{c}
		}
	}
	if err := s.startNodeAgents(); err != nil {
		return nil, err
	}
	if !opts.NoProxy {
		health, err := launcher.FreeAddr()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--apiserver", opts.APIAddr, "--health-addr", health}, opts.identityArgs("proxy")...)
		if _, err := s.add("proxy", "proxy", health, "", args, ""); err != nil {
			return nil, err
		}
	}
	for _, svc := range s.services[1:] {
		if err := svc.WaitReady(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// split divides the controllers into those run as binaries of their own
// and those a kcm hosts (KCM, or every hostable one when Mono).
func (o Options) split() (separate, hosted []string) {
	for _, c := range o.Controllers {
		if (o.Mono && KCMHosts(c)) || slices.Contains(o.KCM, c) {
			hosted = append(hosted, c)
		} else {
			separate = append(separate, c)
		}
	}
	return separate, hosted
}

// startKCM starts Replicas kcm processes hosting the controllers in
// hosted (none when it is empty), as kcm-1, kcm-2, ...
func (s *Stack) startKCM(hosted []string) error {
	if len(hosted) == 0 {
		return nil
	}
	for i := 1; i <= s.opts.Replicas; i++ {
		if _, err := s.addKCM(hosted); err != nil {
			return err
		}
	}
	return nil
}

// addKCM starts one more kcm process hosting hosted, named kcm-<n>.
func (s *Stack) addKCM(hosted []string) (*Service, error) {
	o := s.opts
	n := 1
	for _, svc := range s.services {
		if svc.Binary == KCM {
			n++
		}
	}
	health, err := launcher.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--apiserver", o.APIAddr, "--health-addr", health, "--controllers", strings.Join(hosted, ",")}, o.ControllerArgs...)
	args = append(args, o.identityArgs(KCM)...)
	if slices.Contains(hosted, "tokenctl") {
		args = append(args, o.tokenctlArgs()...)
	}
	if slices.Contains(hosted, "pvctl") {
		args = append(args, "--storage-root", o.StorageRoot())
	}
	for _, c := range hosted {
		args = append(args, o.Args[c]...)
	}
	svc, err := s.add(fmt.Sprintf("%s-%d", KCM, n), KCM, health, "", args, "")
	if err != nil {
		return nil, err
	}
	svc.Hosts = hosted
	return svc, nil
}

// StartKCM starts one more kcm process, hosting controllers (each one
// kcm can host), with the stack's flags, and waits until it is ready. It
// may host loops that other processes of the stack run too: each loop's
// Lease lets one of them lead. Stop stops it with the rest.
func (s *Stack) StartKCM(ctx context.Context, controllers []string) (*Service, error) {
	for _, c := range controllers {
		if !KCMHosts(c) {
			return nil, fmt.Errorf("stack: kcm cannot host %q", c)
		}
	}
	if _, err := os.Stat(filepath.Join(s.opts.BinDir, KCM)); err != nil {
		return nil, fmt.Errorf("stack: binary %s: %w (run make build)", KCM, err)
	}
	svc, err := s.addKCM(controllers)
	if err != nil {
		return nil, err
	}
	return svc, svc.WaitReady(ctx)
}

// StorageRoot is pvctl's --storage-root: DataDir/storage.
func (o Options) StorageRoot() string { return filepath.Join(o.DataDir, "storage") }

func (o *Options) complete() error {
	if o.BinDir == "" || o.DataDir == "" {
		return errors.New("stack: BinDir and DataDir are required")
	}
	// Absolute, because the node agents' shims carry these paths on their
	// command lines, which is how Stop finds the containers.
	var err error
	if o.DataDir, err = filepath.Abs(o.DataDir); err != nil {
		return fmt.Errorf("stack: data dir: %w", err)
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.DataDir, "logs")
	}
	if o.APIAddr == "" {
		if o.APIAddr, err = launcher.FreeAddr(); err != nil {
			return err
		}
	}
	if o.APIHealthAddr == "" {
		if o.APIHealthAddr, err = launcher.FreeAddr(); err != nil {
			return err
		}
	}
	if o.Controllers == nil {
		o.Controllers = Controllers
	}
	if !o.Insecure && !slices.Contains(o.Controllers, "tokenctl") {
		// With ServiceAccount keys on, a pod is admitted only once its
		// account exists, and tokenctl makes every namespace's default
		// one: a secure stack cannot run pods without it.
		o.Controllers = append([]string{"tokenctl"}, o.Controllers...)
	}
	if o.Cloud {
		if !slices.Contains(o.Controllers, "cloudctl") {
			o.Controllers = append(slices.Clone(o.Controllers), "cloudctl")
		}
		if o.CloudAddr == "" {
			if o.CloudAddr, err = launcher.FreeAddr(); err != nil {
				return err
			}
		}
		if o.CloudLBRange == "" {
			o.CloudLBRange = fmt.Sprintf("127.246.%d.0/24", os.Getpid()%250)
		}
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.Runtime == "" {
		o.Runtime = RuntimeExec
	}
	if o.Runtime != RuntimeExec && o.Runtime != RuntimeFake {
		return fmt.Errorf("stack: runtime %q is neither %q nor %q", o.Runtime, RuntimeExec, RuntimeFake)
	}
	if o.Nodes < 1 {
		o.Nodes = 3
	}
	for _, c := range o.KCM {
		if !KCMHosts(c) || !slices.Contains(o.Controllers, c) {
			return fmt.Errorf("stack: KCM lists %q, which is not a controller of the stack that kcm can host", c)
		}
	}
	separate, hosted := o.split()
	bins := append([]string{"apiserver", "nodeagent"}, separate...)
	if len(hosted) > 0 && o.KCMBinary == "" {
		bins = append(bins, KCM)
	}
	if o.Cloud {
		bins = append(bins, "cloudsim")
	}
	if !o.NoProxy {
		bins = append(bins, "proxy")
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("stack: binary %s: %w (run make build)", b, err)
		}
	}
	return nil
}

// startNodeAgents starts one exec-runtime agent per node (node-1 ...),
// each with its own root dir and logs port, or one fake agent registering
// every node (node-0 ...). Each node's pod IPs come from the pod CIDR
// ipamctl gives its Node (a loopback range by default, so every pod is
// reachable from every other on this host).
func (s *Stack) startNodeAgents() error {
	o := s.opts
	if o.Runtime == RuntimeFake {
		health, err := launcher.FreeAddr()
		if err != nil {
			return err
		}
		logs, err := launcher.FreeAddr()
		if err != nil {
			return err
		}
		root := filepath.Join(o.DataDir, "nodes", "fake")
		args := []string{"--apiserver", o.APIAddr, "--health-addr", health, "--logs-addr", logs,
			"--runtime", RuntimeFake, "--fake-nodes", strconv.Itoa(o.Nodes), "--node-name", "node", "--root-dir", root}
		if o.Cloud {
			args = append(args, "--cloud-provider", "external") // each node's address is its instance's
		}
		// One process plays every fake node, which no node identity may
		// do (the Node authorizer confines an agent to its own Node): it
		// runs as the admin.
		args = append(args, o.adminArgs()...)
		_, err = s.add("nodeagent", "nodeagent", health, root, args, "")
		return err
	}
	for i := 1; i <= o.Nodes; i++ {
		health, err := launcher.FreeAddr()
		if err != nil {
			return err
		}
		logs, err := launcher.FreeAddr()
		if err != nil {
			return err
		}
		node := fmt.Sprintf("node-%d", i)
		root := filepath.Join(o.DataDir, "nodes", node)
		args := []string{"--apiserver", o.APIAddr, "--health-addr", health, "--logs-addr", logs,
			"--runtime", RuntimeExec, "--node-name", node, "--root-dir", root}
		if o.Cloud {
			// The node's own address (its instance's), where its logs
			// server listens too, so that kpctl logs reaches it.
			_, port, _ := strings.Cut(logs, ":")
			args = append(args, "--cloud-provider", "external", "--node-ip", o.NodeIP(i), "--logs-addr", o.NodeIP(i)+":"+port)
		}
		args = append(args, o.identityArgs(node)...)
		if _, err := s.add(fmt.Sprintf("nodeagent-%d", i), "nodeagent", health, root, args, ""); err != nil {
			return err
		}
	}
	return nil
}

// add starts one process; grpcHealth is set for the apiserver, whose
// readiness is its gRPC health service.
func (s *Stack) add(name, binary, health, root string, args []string, grpcHealth string) (*Service, error) {
	o := s.opts
	if o.LogFormat != "" {
		args = append(args, "--log-format", o.LogFormat)
	}
	if o.LogLevel != "" {
		args = append(args, "--log-level", o.LogLevel)
	}
	args = append(args, o.Args[binary]...)
	if root != "" {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("stack: %s root dir: %w", name, err)
		}
	}
	bin := filepath.Join(o.BinDir, binary)
	if binary == KCM && o.KCMBinary != "" {
		bin = o.KCMBinary
	}
	cfg := launcher.Config{Name: name, Binary: bin, Args: args, LogDir: o.LogDir}
	if grpcHealth != "" {
		cfg.HealthAddr = grpcHealth
	} else {
		cfg.ReadyURL = "http://" + health + "/readyz"
	}
	p, err := launcher.Start(cfg)
	if err != nil {
		return nil, err
	}
	svc := &Service{Name: name, Binary: binary, HealthAddr: health, RootDir: root, proc: p}
	s.services = append(s.services, svc)
	return svc, nil
}

// APIAddr is the apiserver's gRPC address.
func (s *Stack) APIAddr() string { return s.opts.APIAddr }

// Options are the options the stack runs with, defaults filled in.
func (s *Stack) Options() Options { return s.opts }

// Services are every process, apiserver first.
func (s *Stack) Services() []*Service { return append([]*Service(nil), s.services...) }

// Service returns the process named name, or nil.
func (s *Stack) Service(name string) *Service {
	for _, svc := range s.services {
		if svc.Name == name {
			return svc
		}
	}
	return nil
}

// Stop ends every process in reverse start order: the proxy and the node
// agents first, then the controllers (SIGTERM: they hand their leases
// back), then the apiserver. A process that does not exit within ctx is killed. Exec
// containers outlive their agent by design (like a kubelet restart); Stop
// kills them too, so nothing is left behind.
func (s *Stack) Stop(ctx context.Context) error {
	var errs []error
	for i := len(s.services) - 1; i >= 0; i-- {
		svc := s.services[i]
		if err := svc.proc.Term(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", svc.Name, err))
		}
	}
	s.killContainers()
	return errors.Join(errs...)
}

// kill SIGKILLs everything (cleanup after a failed start).
func (s *Stack) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, svc := range s.services {
		_ = svc.proc.Kill(ctx)
	}
	s.killContainers()
}

// killContainers SIGKILLs the process group of every container shim
// running under a node agent's root dir. The shim is "nodeagent shim ..."
// with paths under <root>/pods/ on its command line.
func (s *Stack) killContainers() {
	var roots []string
	for _, svc := range s.services {
		if svc.Binary == "nodeagent" && svc.RootDir != "" {
			if abs, err := filepath.Abs(svc.RootDir); err == nil {
				roots = append(roots, filepath.Join(abs, "pods")+string(filepath.Separator))
			}
		}
	}
	if len(roots) == 0 {
		return
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return // not Linux: the exec runtime needs /proc anyway
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if len(argv) < 3 || argv[1] != "shim" {
			continue
		}
		for _, r := range roots {
			if strings.Contains(string(b), r) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				break
			}
		}
	}
}
