package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

// killer kills random units at random intervals and starts them again
// after a random downtime, and measures how long the controllers take to
// replace a killed leader.
type killer struct {
	t           target
	api         kplanev1.ResourcesClient
	rng         *rand.Rand
	minInterval time.Duration
	maxInterval time.Duration
	minDown     time.Duration
	maxDown     time.Duration
	logf        func(format string, args ...any)
	// only, when not empty, limits the kills to these services (e.g.
	// deploymentctl and replicactl during rollouts).
	only map[string]bool

	units []unit
	down  map[string]time.Time // unit name -> when to start it again
	// partitioned units are cut off their network rather than stopped;
	// startDue heals them. quorum, when set, keeps at most one apiserver
	// down or partitioned at a time (three etcd members keep a quorum).
	partitioned map[string]bool
	quorum      bool
	// recovering are the apiservers started or healed and not yet seen
	// ready (with quorum kept).
	recovering map[string]bool
	restarted  map[string]time.Time // unit name -> last start

	mu        sync.Mutex
	kills     map[string]map[syscall.Signal]int // service -> signal -> count
	lastKill  time.Time
	pending   []pendingTakeover
	takeovers []time.Duration
	unexpect  map[string]int // service -> exits nobody asked for
	errors    []string       // kill or start failures
}

// pendingTakeover is a killed leader whose lease nobody has taken yet.
type pendingTakeover struct {
	lease    string
	unit     string
	identity string
	killedAt time.Time
}

func newKiller(t target, api kplanev1.ResourcesClient, seed uint64, logf func(string, ...any)) *killer {
	return &killer{
		t: t, api: api, logf: logf,
		rng:         rand.New(rand.NewPCG(seed, 0x6b696c6c6572)),
		minInterval: time.Second, maxInterval: 4 * time.Second,
		minDown: 300 * time.Millisecond, maxDown: 3 * time.Second,
		down: map[string]time.Time{}, restarted: map[string]time.Time{}, partitioned: map[string]bool{}, recovering: map[string]bool{},
		kills: map[string]map[syscall.Signal]int{}, unexpect: map[string]int{},
	}
}

func (k *killer) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(k.rng.Int64N(int64(hi-lo)))
}

// Run kills and restarts until ctx ends, then starts every unit that is
// down and waits until each is ready. monitorLeases runs alongside (and
// after, until the cluster converged) to time the takeovers.
func (k *killer) Run(ctx context.Context) error {
	units, err := k.t.Units(ctx)
	if err != nil {
		return err
	}
	k.units = units

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	nextKill := time.Now().Add(k.between(k.minInterval, k.maxInterval))
	lastSupervise := time.Now()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case now := <-tick.C:
			k.startDue(now)
			if now.Sub(lastSupervise) >= time.Second {
				lastSupervise = now
				k.supervise()
			}
			if !now.Before(nextKill) {
				k.killOne()
				nextKill = time.Now().Add(k.between(k.minInterval, k.maxInterval))
			}
		}
	}
	// Bring everything back.
	k.startDue(time.Now().Add(24 * time.Hour))
	// Keep timing takeovers while the cluster settles.
	settle, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, u := range k.units {
		if err := k.t.WaitReady(settle, u); err != nil {
			return fmt.Errorf("after the chaos: %w", err)
		}
	}
	return nil
}

// killOne picks a running unit and a signal and stops it.
func (k *killer) killOne() {
	var up []unit
	apiserverDown := k.quorum && k.apiserverDown()
	for _, u := range k.units {
		if len(k.only) > 0 && !k.only[u.Service] {
			continue
		}
		// With quorum kept, a second apiserver may not go down.
		keepQuorum := u.Service == "apiserver" && apiserverDown
		if _, isDown := k.down[u.Name]; !isDown && !keepQuorum {
			up = append(up, u)
		}
	}
	if len(up) == 0 {
		return
	}
	u := up[k.rng.IntN(len(up))]
	if p, ok := k.t.(partitioner); ok && k.quorum && k.partitionable(u) && k.rng.IntN(2) == 0 {
		k.partition(p, u)
		return
	}
	sig := syscall.SIGKILL
	if k.rng.IntN(2) == 0 {
		sig = syscall.SIGTERM
	}
	downtime := k.between(k.minDown, k.maxDown)
	if sig == syscall.SIGTERM && !k.ready(u) {
		// A process still starting cannot promise a clean exit on SIGTERM
		// (Go installs signal handlers only once main runs), so the clean
		// exit is asked only of a process that is up.
		sig = syscall.SIGKILL
	}

	// Is it the leader of its controller right now?
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A kcm leads many loops, each through its own lease.
	var held []pendingTakeover
	for _, l := range leasesOf(u) {
		if holder := k.holder(ctx, l); holder != "" && k.isHolder(ctx, u, l, holder) {
			held = append(held, pendingTakeover{lease: l, unit: u.Name, identity: holder})
		}
	}
	killedAt := time.Now()
	k.mu.Lock()
	if k.kills[u.Service] == nil {
		k.kills[u.Service] = map[syscall.Signal]int{}
	}
	k.kills[u.Service][sig]++
	k.lastKill = killedAt
	for _, p := range held {
		p.killedAt = killedAt
		k.pending = append(k.pending, p)
	}
	k.mu.Unlock()
	role := ""
	if len(held) > 0 {
		role = " (leader)"
	}
	k.logf("kill %s%s with %s; back in %v", u.Name, role, sigName(sig), downtime.Round(time.Millisecond))
	if err := k.t.Stop(ctx, u, sig); err != nil && sig == syscall.SIGKILL {
		k.fail("kill %s: %v", u.Name, err)
	} else if err != nil {
		// SIGTERM must end a process cleanly (exit 0).
		k.fail("SIGTERM %s: %v", u.Name, err)
	}
	k.down[u.Name] = time.Now().Add(downtime)
}

// apiserverDown reports whether an apiserver is down or partitioned, or
// was started or healed and is not ready yet: its etcd member still
// rejoins, and another kill then would leave the cluster without a
// quorum.
func (k *killer) apiserverDown() bool {
	for name := range k.down {
		if k.unit(name).Service == "apiserver" {
			return true
		}
	}
	for name := range k.recovering {
		// Seconds, not ready's moment: on a loaded engine one docker
		// inspect takes that long, and a member never seen ready would
		// keep every other apiserver from being killed.
		if !k.readyWithin(k.unit(name), 5*time.Second) {
			return true
		}
		delete(k.recovering, name)
	}
	return false
}

// partitionable reports whether a partition of u is one of its faults: an
// apiserver (its etcd member loses its peers) or a controller (its lease
// runs out while it still runs, and healed it must find it lost it).
// Node agents and proxies are only killed: a node cut off for seconds
// would only test the node lifecycle's grace periods.
func (k *killer) partitionable(u unit) bool {
	return u.Service == "apiserver" || slices.Contains(k.t.Controllers(), u.Service)
}

// partition cuts u off the network for a while; startDue heals it.
func (k *killer) partition(p partitioner, u unit) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	downtime := k.between(k.minDown, k.maxDown)
	k.mu.Lock()
	if k.kills[u.Service] == nil {
		k.kills[u.Service] = map[syscall.Signal]int{}
	}
	k.kills[u.Service][partitionSignal]++
	k.lastKill = time.Now()
	k.mu.Unlock()
	k.logf("partition %s; healed in %v", u.Name, downtime.Round(time.Millisecond))
	if err := p.Partition(ctx, u); err != nil {
		k.fail("partition %s: %v", u.Name, err)
		return
	}
	k.partitioned[u.Name] = true
	k.down[u.Name] = time.Now().Add(downtime)
}

// partitionSignal counts partitions among the kills in the report.
const partitionSignal = syscall.Signal(0)

// ready reports whether u answers its readiness check right now.
func (k *killer) ready(u unit) bool { return k.readyWithin(u, 300*time.Millisecond) }

// readyWithin reports whether u is ready or gets ready within d.
func (k *killer) readyWithin(u unit, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return k.t.WaitReady(ctx, u) == nil
}

func (k *killer) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	k.logf("%s", msg)
	k.mu.Lock()
	k.errors = append(k.errors, msg)
	k.mu.Unlock()
}

// startDue starts the units whose downtime is over.
func (k *killer) startDue(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, at := range k.down {
		if now.Before(at) {
			continue
		}
		u := k.unit(name)
		if k.waitsForNetwork(u) {
			continue // started on a later pass, once its network is back
		}
		if k.partitioned[name] {
			if err := k.t.(partitioner).Heal(ctx, u); err != nil {
				k.fail("heal %s: %v", name, err)
				continue
			}
			delete(k.partitioned, name)
			delete(k.down, name)
			k.recovers(u)
			k.logf("healed %s", name)
			continue
		}
		if !k.t.Running(ctx, u) {
			if err := k.t.Start(ctx, u); err != nil {
				k.fail("start %s: %v", name, err)
				continue
			}
		}
		delete(k.down, name)
		k.recovers(u)
		k.mu.Lock()
		k.restarted[name] = time.Now()
		k.mu.Unlock()
	}
}

// waitsForNetwork reports whether u runs in another unit's network
// namespace that is down: a node's proxy shares its node agent's
// (compose's network_mode: service:nodeagent-N), and Docker refuses to
// start it until the agent runs again.
func (k *killer) waitsForNetwork(u unit) bool {
	if u.Service != "proxy" {
		return false
	}
	agent := strings.Replace(u.Name, "proxy-", "nodeagent-", 1)
	_, down := k.down[agent]
	return agent != u.Name && down
}

// recovers notes an apiserver started or healed, for the quorum guard.
func (k *killer) recovers(u unit) {
	if k.quorum && u.Service == "apiserver" {
		k.recovering[u.Name] = true
	}
}

// supervise restarts units that exited although nobody stopped them, as
// the compose restart policy does for containers.
func (k *killer) supervise() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range k.units {
		if _, isDown := k.down[u.Name]; isDown || k.t.Running(ctx, u) {
			continue
		}
		k.logf("%s exited on its own; starting it again", u.Name)
		k.mu.Lock()
		k.unexpect[u.Service]++
		k.mu.Unlock()
		k.down[u.Name] = time.Now()
	}
}

func (k *killer) unit(name string) unit {
	for _, u := range k.units {
		if u.Name == name {
			return u
		}
	}
	return unit{Name: name}
}

func (k *killer) holder(ctx context.Context, lease string) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := k.api.Get(cctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: lease})
	if err != nil {
		return ""
	}
	return resp.GetObject().GetLease().GetSpec().GetHolderIdentity()
}

// isHolder reports whether identity, holding lease, is unit u's process.
func (k *killer) isHolder(ctx context.Context, u unit, lease, identity string) bool {
	return k.t.LiveIdentity(ctx, lease, identity) && identityOf(k.t, u, identity)
}

// leasesOf are the leases unit u's process may hold: its service's, or,
// for a kcm, those of every loop it can host. apiservers, node agents and
// proxies hold none, and asking the apiserver about them costs a call per
// kill (seconds on a loaded engine).
func leasesOf(u unit) []string {
	switch {
	case u.Service == stack.KCM:
	case u.Service == "cloudctl" || slices.Contains(stack.Controllers, u.Service):
		return leaseNames(u.Service)
	default:
		return nil
	}
	var out []string
	for _, c := range stack.Controllers {
		if stack.KCMHosts(c) {
			out = append(out, c)
		}
	}
	return out
}

// identityOf reports whether identity names unit u.
func identityOf(t target, u unit, identity string) bool {
	switch t := t.(type) {
	case *localTarget:
		svc := t.s.Service(u.Name)
		return svc != nil && svc.Process().Running() && identity == fmt.Sprintf("%s_%d", hostPart(identity), svc.Process().Pid())
	default:
		host := hostPart(identity)
		return host != "" && len(u.ID) >= len(host) && u.ID[:len(host)] == host
	}
}

func hostPart(identity string) string {
	for i := len(identity) - 1; i >= 0; i-- {
		if identity[i] == '_' {
			return identity[:i]
		}
	}
	return ""
}

// monitorLeases polls the controller leases and completes the pending
// takeovers: a lease written after the kill by a holder other than the
// killed process (or by the killed unit after it was started again).
func (k *killer) monitorLeases(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		n := len(k.pending)
		k.mu.Unlock()
		if n == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := k.api.List(cctx, &kplanev1.ListRequest{Kind: "Lease", Namespace: "kplane-system"})
		cancel()
		if err != nil {
			continue
		}
		now := time.Now()
		leases := map[string]*kplanev1.LeaseSpec{}
		for _, o := range resp.GetItems() {
			leases[o.Meta().GetName()] = o.GetLease().GetSpec()
		}
		k.mu.Lock()
		kept := k.pending[:0]
		for _, p := range k.pending {
			spec := leases[p.lease]
			holder := spec.GetHolderIdentity()
			renewed := spec.GetRenewTime().AsTime()
			taken := holder != "" && renewed.After(p.killedAt)
			if taken && holder == p.identity {
				// The same identity again: only the restarted unit
				// (a container keeps its id) may have written it.
				r, ok := k.restarted[p.unit]
				taken = ok && r.After(p.killedAt) && renewed.After(r)
			}
			if taken {
				k.takeovers = append(k.takeovers, now.Sub(p.killedAt))
				continue
			}
			kept = append(kept, p)
		}
		k.pending = kept
		k.mu.Unlock()
	}
}

// result is the killer's part of the report.
type killResult struct {
	kills      map[string]map[syscall.Signal]int
	takeovers  []time.Duration
	unfinished int
	unexpected map[string]int
	errors     []string
	lastKill   time.Time
}

func (k *killer) Result() killResult {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := append([]time.Duration(nil), k.takeovers...)
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	return killResult{kills: k.kills, takeovers: t, unfinished: len(k.pending), unexpected: k.unexpect,
		errors: append([]string(nil), k.errors...), lastKill: k.lastKill}
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	if sig == partitionSignal {
		return "partition"
	}
	return "SIGTERM"
}
