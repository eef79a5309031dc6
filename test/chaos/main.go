// Command chaos is kplane's chaos harness (`make chaos`). While a
// workload runs (ReplicaSets scaled up and down, their pods deleted,
// ReplicaSets deleted and created again, Jobs run one after another,
// Deployments rolled forward and back,
// ledger Secrets written), it
// kills random services at random intervals (SIGKILL and SIGTERM; the
// apiserver and the node agents included), starts them again, then waits
// for the cluster to settle and checks the invariants:
//
//   - every ReplicaSet has exactly its replicas Running, and no pod is
//     left without its owner (orphan) or over the count (duplicate);
//   - every Job (one at a time, Indexed and NonIndexed, 200 completions
//     each) has completed, and its counts equal its pods' outcomes: no
//     index succeeded twice, nothing left uncounted or with the
//     job-tracking finalizer;
//   - every Deployment (rolled to new templates and back through the
//     chaos) has finished its rollout on the template last written, with
//     exactly one ReplicaSet holding replicas and its revision history
//     intact, and its pods never broke maxSurge or maxUnavailable at any
//     pod event (an observer watching them throughout);
//   - no two pod objects ever hold one StatefulSet identity (checked at
//     every pod event), every ordinal of the StatefulSet (rolled and its
//     pods deleted through the chaos) has its Ready pod at the update
//     revision, and every node the DaemonSet fits has exactly one of its
//     pods (none where it may not run);
//   - every controller Lease is held by a running process;
//   - with --cloud (local): every LoadBalancer Service's load balancer
//     in cloudsim targets exactly the ready nodes, and every node with a
//     pod CIDR has exactly one route, to its instance;
//   - no acknowledged write is lost: a ledger of every write and its
//     outcome is compared with the store.
//
// It prints a report (kills per service, leader takeover times, time to
// converge after the last kill, violations) and exits 1 on any violation.
// --target local runs the whole stack as local processes (fake-runtime
// node agents, short leader-election timings); --target compose drives a
// running compose project with docker kill/stop/start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/pkg/client"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/stack"
)

type config struct {
	target          string
	duration        time.Duration
	seed            uint64
	binDir          string
	dataDir         string
	keep            bool
	project         string
	server          string
	certs           string
	replicaSets     int
	maxReplicas     int
	nodes           int
	replicas        int
	mono            bool
	convergeTimeout time.Duration
	minInterval     time.Duration
	maxInterval     time.Duration
	maxDown         time.Duration
	verbose         bool
	only            string
	cloud           bool
}

func main() {
	var c config
	flag.StringVar(&c.target, "target", "local", "local (start the stack as local processes), compose (a running compose project) or compose-ha (a running make up-ha project: apiservers are also partitioned, at most one at a time, and a register workload must be linearizable)")
	flag.DurationVar(&c.duration, "duration", 2*time.Minute, "how long services are killed")
	flag.Uint64Var(&c.seed, "seed", 0, "random seed (0: from the clock); the same seed makes the same choices")
	flag.StringVar(&c.binDir, "bin", "bin", "local: directory of the binaries (make build)")
	flag.StringVar(&c.dataDir, "data", "", "local: data directory (default: a temporary one, removed unless --keep)")
	flag.BoolVar(&c.keep, "keep", false, "local: keep the data directory and logs")
	flag.StringVar(&c.project, "project", "kplane", "compose: the project name")
	flag.StringVar(&c.server, "server", "127.0.0.1:6443", "compose: the apiserver address")
	flag.StringVar(&c.certs, "certs", "certs", "compose: the directory `make up` wrote the cluster's certificates to (the admin's are used); empty: plaintext, no credentials")
	flag.IntVar(&c.replicaSets, "replicasets", 4, "ReplicaSets in the workload")
	flag.IntVar(&c.maxReplicas, "max-replicas", 6, "largest replica count the workload sets")
	flag.IntVar(&c.nodes, "nodes", 5, "local: fake nodes, all served by one node agent process")
	flag.IntVar(&c.replicas, "replicas", 2, "local: replicas of every controller")
	flag.BoolVar(&c.mono, "mono", false, "local: run the controllers as kcm processes (--replicas of them, each hosting every controller but the scheduler) instead of one process per controller")
	flag.DurationVar(&c.convergeTimeout, "converge-timeout", 3*time.Minute, "how long the cluster may take to settle after the last kill")
	flag.DurationVar(&c.minInterval, "min-interval", time.Second, "shortest time between two kills")
	flag.DurationVar(&c.maxInterval, "max-interval", 4*time.Second, "longest time between two kills")
	flag.DurationVar(&c.maxDown, "max-down", 3*time.Second, "longest time a killed service stays down")
	flag.BoolVar(&c.verbose, "v", false, "log every kill and restart")
	flag.StringVar(&c.only, "only", "", "kill only these services (comma-separated, e.g. deploymentctl,replicactl); default every service")
	flag.BoolVar(&c.cloud, "cloud", true, "local: run the simulated cloud (cloudsim and cloudctl, both killed like the rest) with a LoadBalancer Service, and check that its load balancer targets exactly the ready nodes and every node with a pod CIDR has exactly one route")
	flag.Parse()
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	violations, err := run(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	if violations > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) (int, error) {
	logf := func(format string, args ...any) {
		if c.verbose {
			fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
		}
	}
	fmt.Printf("chaos: target %s, duration %v, seed %d\n", c.target, c.duration, c.seed)
	var t target
	switch c.target {
	case "local":
		dir := c.dataDir
		if dir == "" {
			tmp, err := os.MkdirTemp("", "kplane-chaos-")
			if err != nil {
				return 0, fmt.Errorf("data dir: %w", err)
			}
			dir = tmp
			if !c.keep {
				defer func() { _ = os.RemoveAll(tmp) }()
			}
		}
		bin, err := filepath.Abs(c.binDir)
		if err != nil {
			return 0, fmt.Errorf("bin dir: %w", err)
		}
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		lt, err := newLocalTarget(startCtx, localOptions(c, bin, dir))
		cancel()
		if err != nil {
			return 0, err
		}
		fmt.Printf("chaos: local stack in %s (logs in %s/logs)\n", dir, dir)
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = lt.Close(stopCtx)
		}()
		t = lt
	case "compose":
		t = &composeTarget{project: c.project, apiAddr: c.server, certs: c.certs, controllers: stack.Controllers}
	case "compose-ha":
		server := c.server
		if server == "127.0.0.1:6443" {
			server = "127.0.0.1:6443,127.0.0.1:6453,127.0.0.1:6463"
		}
		t = &composeTarget{project: c.project, apiAddr: server, certs: c.certs, controllers: stack.Controllers,
			ha: true, network: c.project + "_kplane"}
	default:
		return 0, fmt.Errorf("--target %q: want local, compose or compose-ha", c.target)
	}

	conn, err := client.Dial(ctx, t.ClientOptions())
	if err != nil {
		return 0, fmt.Errorf("dial %s: %w", t.APIAddr(), err)
	}
	defer conn.Close() //nolint:errcheck // the run is over; a failed close of the client loses nothing
	var api kplanev1.ResourcesClient = conn

	ns := fmt.Sprintf("chaos-%d", c.seed%1000000)
	l := newLedger()
	w := newWorkload(api, ns, c.seed, c.replicaSets, int32(c.maxReplicas), l)
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = w.Setup(setupCtx)
	cancel()
	if err != nil {
		return 0, err
	}

	// With several apiservers a register workload runs alongside, and
	// its history must be linearizable.
	var regs *registers
	if ct, ok := t.(*composeTarget); ok && ct.ha {
		regs = newRegisters(api, ns)
		setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err := regs.Setup(setupCtx)
		cancel()
		if err != nil {
			return 0, err
		}
	}

	var cloud cloudsimv1.CloudClient
	if lt, ok := t.(*localTarget); ok && c.cloud {
		cc, err := grpc.NewClient(lt.s.Options().CloudAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, fmt.Errorf("cloudsim: %w", err)
		}
		defer cc.Close() //nolint:errcheck // the run is over; a failed close loses nothing
		cloud = cloudsimv1.NewCloudClient(cc)
		setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err = setupLoadBalancer(setupCtx, api, ns)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("create the LoadBalancer Service: %w", err)
		}
	}

	k := newKiller(t, api, c.seed, logf)
	k.quorum = regs != nil
	k.minInterval, k.maxInterval, k.maxDown = c.minInterval, c.maxInterval, c.maxDown
	if c.only != "" {
		k.only = map[string]bool{}
		for _, s := range strings.Split(c.only, ",") {
			k.only[strings.TrimSpace(s)] = true
		}
	}
	monCtx, stopMon := context.WithCancel(context.Background())
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		k.monitorLeases(monCtx)
	}()
	defer func() {
		stopMon()
		<-monDone
	}()
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		w.observeDeploymentPods(monCtx)
	}()
	setsDone := make(chan struct{})
	go func() {
		defer close(setsDone)
		w.observeSetPods(monCtx)
	}()
	defer func() {
		stopMon()
		<-setsDone
	}()
	defer func() {
		stopMon()
		<-obsDone
	}()

	chaosCtx, stopChaos := context.WithTimeout(ctx, c.duration)
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		w.Run(chaosCtx)
	}()
	if regs != nil {
		regs.Start(chaosCtx, c.seed)
	}
	start := time.Now()
	runErr := k.Run(chaosCtx)
	stopChaos()
	<-workDone
	if ctx.Err() != nil {
		return 0, errors.New("interrupted")
	}
	if runErr != nil {
		return 0, runErr
	}
	chaosTime := time.Since(start)

	// Quiescence: the workload stops, unknown outcomes are read back,
	// then the invariants must all hold at once.
	convCtx, cancel := context.WithTimeout(ctx, c.convergeTimeout)
	defer cancel()
	if err := w.Settle(convCtx); err != nil {
		return 0, err
	}
	live := func(controller, identity string) bool { return t.LiveIdentity(convCtx, controller, identity) }
	var violations, lastChecked []string
	converged := false
	for {
		s, err := takeSnapshot(convCtx, api, ns)
		if err == nil {
			violations = checkInvariants(s, ns, t.Controllers(), live, l)
			violations = append(violations, checkDeployments(w, s.deploys, s.sets)...)
			violations = append(violations, checkSets(convCtx, w, s.nodes)...)
			if cloud != nil {
				cv, cerr := checkCloud(convCtx, api, cloud, s.nodes)
				if cerr != nil {
					cv = []string{cerr.Error()}
				}
				violations = append(violations, cv...)
			}
			if len(violations) == 0 {
				converged = true
				break
			}
			if convCtx.Err() != nil {
				// The check ran past the deadline: its docker and API
				// calls failed for that reason alone (a running leader
				// then looks gone), so the last complete check stands.
				violations = append([]string{"the last check ran past the converge timeout"}, lastChecked...)
				break
			}
			if strings.Join(violations, "\n") != strings.Join(lastChecked, "\n") {
				logf("not converged yet: %d violations, e.g. %s", len(violations), violations[0])
			}
			lastChecked = violations
		} else {
			// Keep what the last complete check found: a snapshot cut
			// short by the deadline says nothing about the invariants.
			violations = append([]string{err.Error()}, lastChecked...)
		}
		if convCtx.Err() != nil {
			break
		}
		select {
		case <-convCtx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	convergedAt := time.Now()
	// Give the lease monitor a moment to see the last takeovers.
	stopMon()
	<-monDone

	kr := k.Result()
	violations = append(violations, kr.errors...)
	violations = append(violations, observerViolations(w)...)
	if regs != nil {
		violations = append(violations, regs.Check(c.seed)...)
	}
	rep := report{
		target: t.Name(), seed: c.seed, chaos: chaosTime, kills: kr, workload: w,
		converged: converged, convergence: convergedAt.Sub(kr.lastKill), violations: violations,
	}
	if !converged {
		rep.violations = append(rep.violations, fmt.Sprintf("did not converge within %v of the end of the chaos", c.convergeTimeout))
	}
	if err := rep.print(os.Stdout); err != nil {
		return 0, fmt.Errorf("write the report: %w", err)
	}
	if len(rep.violations) > 0 && c.target == "local" {
		fmt.Println("logs:", strings.TrimSpace(logHint(c)))
	}
	if c.target == "compose" || c.target == "compose-ha" {
		cleanup(api, ns)
	}
	return len(rep.violations), nil
}

// localOptions: fake-runtime nodes from one agent process, and short
// timings so that failovers take seconds and the run converges fast.
func localOptions(c config, bin, dir string) stack.Options {
	return stack.Options{
		BinDir: bin, DataDir: dir, Replicas: c.replicas, Runtime: stack.RuntimeFake, Nodes: c.nodes, Mono: c.mono, Cloud: c.cloud,
		LogLevel: "info",
		ControllerArgs: []string{"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
			"--leader-elect-retry-period", "500ms", "--shutdown-grace-period", "2s"},
		Args: map[string][]string{
			"nodeagent": {"--heartbeat-interval", "1s", "--lease-duration", "10s", "--housekeeping-interval", "1s"},
			"nodectl":   {"--node-monitor-period", "1s", "--node-monitor-grace-period", "10s"},
			"cloudctl":  {"--node-monitor-period", "1s", "--route-reconcile-period", "1s", "--load-balancer-reconcile-period", "2s"},
		},
	}
}

func logHint(c config) string {
	if c.keep || c.dataDir != "" {
		return "see the logs directory printed above"
	}
	return "rerun with --keep (and the same --seed) to keep the logs"
}

// cleanup deletes what the workload made in a long-lived (compose)
// cluster: the ReplicaSets, Jobs, StatefulSet and DaemonSet (their pods
// follow), the Secrets, the namespaces once empty.
func cleanup(api kplanev1.ResourcesClient, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, kind := range []string{"ReplicaSet", "Job", "Secret"} {
		items, err := list(ctx, api, kind, ns)
		if err != nil {
			continue
		}
		for _, o := range items {
			_, _ = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: kind, Namespace: ns, Name: o.Meta().GetName()})
		}
	}
	cleanupStorage(ctx, api, ns)
	// The StatefulSet and DaemonSet live in a namespace of their own.
	sets := setsNamespace(ns)
	for _, kind := range []string{"StatefulSet", "DaemonSet"} {
		items, err := list(ctx, api, kind, sets)
		if err != nil {
			continue
		}
		for _, o := range items {
			_, _ = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: kind, Namespace: sets, Name: o.Meta().GetName()})
		}
	}
	for _, n := range []string{ns, sets} {
		_ = retry(ctx, func(ctx context.Context) error {
			_, err := api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Namespace", Name: n})
			return err
		})
	}
}
