package agent

// Node pressure: the agent measures the host's memory, the filesystem of
// --root-dir and the pid table against the --eviction-hard thresholds,
// reports MemoryPressure, DiskPressure and PIDPressure on its Node(s) and,
// while a threshold is crossed, evicts one pod per housekeeping pass
// through the same evict path as the emptyDir sizeLimit (volumes.go).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kplane/kplane/pkg/quantity"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Eviction signals, as the kubelet names them.
const (
	SignalMemoryAvailable = "memory.available"
	SignalNodefsAvailable = "nodefs.available"
	SignalNodefsInodes    = "nodefs.inodesFree"
	SignalPIDAvailable    = "pid.available"
)

// The node condition types the agent owns beside Ready.
const (
	NodeMemoryPressure = kplanev1.NodeMemoryPressure
	NodeDiskPressure   = kplanev1.NodeDiskPressure
	NodePIDPressure    = kplanev1.NodePIDPressure
)

// DefaultEvictionHard mirrors the kubelet's Linux defaults, less
// imagefs.available: the agent runs host binaries and has no image
// filesystem.
const DefaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%"

// signalCondition maps each signal to the node condition it drives and
// the resource named in eviction messages.
var signalCondition = map[string]struct{ cond, resource string }{
	SignalMemoryAvailable: {NodeMemoryPressure, "memory"},
	SignalNodefsAvailable: {NodeDiskPressure, "ephemeral-storage"},
	SignalNodefsInodes:    {NodeDiskPressure, "inodes"},
	SignalPIDAvailable:    {NodePIDPressure, "pids"},
}

// Threshold is one hard eviction threshold: the signal's available amount
// must not drop below Quantity, or below Percent of the capacity.
type Threshold struct {
	Signal   string
	Quantity int64   // absolute, when Percent is 0
	Percent  float64 // of the capacity, 0 < Percent <= 100
	text     string  // as given, for messages
}

// min is the threshold's absolute value for the given capacity.
func (t Threshold) min(capacity int64) int64 {
	if t.Percent > 0 {
		return int64(float64(capacity) * t.Percent / 100)
	}
	return t.Quantity
}

// ParseEvictionHard parses the kubelet's --eviction-hard syntax:
// comma-separated signal<value, value a quantity or a percentage.
func ParseEvictionHard(s string) ([]Threshold, error) {
	var out []Threshold
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		sig, val, ok := strings.Cut(item, "<")
		sig, val = strings.TrimSpace(sig), strings.TrimSpace(val)
		if !ok {
			return nil, fmt.Errorf("--eviction-hard: %q: want signal<value (only the < operator is supported)", item)
		}
		if _, known := signalCondition[sig]; !known {
			return nil, fmt.Errorf("--eviction-hard: %q: unknown signal %q (supported: memory.available, nodefs.available, nodefs.inodesFree, pid.available)", item, sig)
		}
		if seen[sig] {
			return nil, fmt.Errorf("--eviction-hard: signal %s given twice", sig)
		}
		seen[sig] = true
		t := Threshold{Signal: sig, text: item}
		if p, isPct := strings.CutSuffix(val, "%"); isPct {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil || f <= 0 || f > 100 {
				return nil, fmt.Errorf("--eviction-hard: %s: percentage %q must be a number in (0, 100]", sig, val)
			}
			t.Percent = f
		} else {
			q, err := quantity.ParseNonNegative(val)
			if err != nil {
				return nil, fmt.Errorf("--eviction-hard: %s: %w", sig, err)
			}
			if q.IsZero() {
				return nil, fmt.Errorf("--eviction-hard: %s: quantity must be positive", sig)
			}
			t.Quantity = q.Value()
		}
		out = append(out, t)
	}
	return out, nil
}

// NodeStats are the node's eviction signals as measured.
type NodeStats struct {
	MemoryAvailable, MemoryCapacity int64 // bytes
	NodefsAvailable, NodefsCapacity int64 // bytes of the root dir's filesystem
	InodesFree, Inodes              int64
	PIDAvailable, PIDCapacity       int64
}

// available returns the signal's available amount and capacity.
func (s NodeStats) available(signal string) (avail, capacity int64) {
	switch signal {
	case SignalMemoryAvailable:
		return s.MemoryAvailable, s.MemoryCapacity
	case SignalNodefsAvailable:
		return s.NodefsAvailable, s.NodefsCapacity
	case SignalNodefsInodes:
		return s.InodesFree, s.Inodes
	default:
		return s.PIDAvailable, s.PIDCapacity
	}
}

// PodStats is one pod's usage, for ranking eviction candidates.
type PodStats struct {
	Memory    int64 // resident bytes of its containers' processes
	Ephemeral int64 // bytes in its pod directory (logs, emptyDirs)
}

// StatsSource measures the node and its pods. The agent uses procStats;
// tests feed their own to cross thresholds without exhausting the host.
type StatsSource interface {
	NodeStats() (NodeStats, error)
	PodStats(uid string) PodStats
}

// newStatsSource builds the agent's source; tests replace it.
var newStatsSource = func(a *Agent) StatsSource {
	return &procStats{proc: "/proc", root: a.cfg.RootDir, exec: a.exec}
}

// procStats reads /proc and statfs(2) of the root dir.
type procStats struct {
	proc string
	root string
	exec *execRuntime // nil with the fake runtime: pods use nothing
}

// NodeStats implements StatsSource.
func (p *procStats) NodeStats() (NodeStats, error) {
	var s NodeStats
	mem, err := readMeminfo(filepath.Join(p.proc, "meminfo"))
	if err != nil {
		return s, err
	}
	s.MemoryCapacity, s.MemoryAvailable = mem["MemTotal"], mem["MemAvailable"]
	var fs syscall.Statfs_t
	if err := syscall.Statfs(existingParent(p.root), &fs); err != nil {
		return s, fmt.Errorf("statfs %s: %w", p.root, err)
	}
	bs := int64(fs.Bsize) //nolint:unconvert // int64 on some platforms only
	s.NodefsCapacity, s.NodefsAvailable = int64(fs.Blocks)*bs, int64(fs.Bavail)*bs
	s.Inodes, s.InodesFree = int64(fs.Files), int64(fs.Ffree)
	b, err := os.ReadFile(filepath.Join(p.proc, "sys/kernel/pid_max"))
	if err != nil {
		return s, fmt.Errorf("read pid_max: %w", err)
	}
	if s.PIDCapacity, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return s, fmt.Errorf("parse pid_max: %w", err)
	}
	// The fourth field of loadavg is running/total scheduling entities:
	// every thread holds a pid.
	b, err = os.ReadFile(filepath.Join(p.proc, "loadavg"))
	if err != nil {
		return s, fmt.Errorf("read loadavg: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return s, fmt.Errorf("parse loadavg: %q", b)
	}
	_, total, _ := strings.Cut(f[3], "/")
	used, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		return s, fmt.Errorf("parse loadavg: %w", err)
	}
	s.PIDAvailable = s.PIDCapacity - used
	return s, nil
}

// PodStats implements StatsSource: the resident memory of the
// containers' main processes and the size of the pod directory.
func (p *procStats) PodStats(uid string) PodStats {
	var out PodStats
	if p.exec == nil {
		return out
	}
	for _, pid := range p.exec.podPids(uid) {
		st, err := readMeminfo(filepath.Join(p.proc, strconv.Itoa(pid), "status"))
		if err == nil {
			out.Memory += st["VmRSS"]
		}
	}
	out.Ephemeral = dirSize(p.exec.podDir(uid))
	return out
}

// readMeminfo reads "Key: N kB" lines (meminfo, a process's status) into
// bytes.
func readMeminfo(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	// Only read: a failed Close loses nothing.
	defer func() { _ = f.Close() }()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[k] = n * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// existingParent is dir or its nearest existing ancestor (the root dir
// may not exist yet with the fake runtime).
func existingParent(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || dir == filepath.Dir(dir) {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// pressure is the outcome of the last measurement, read by the node
// status.
type pressure struct {
	mu sync.Mutex
	// crossed: signal -> message, for thresholds crossed now.
	crossed map[string]string
	// lastCrossed: condition type -> when one of its thresholds was last
	// crossed; the condition stays True for the transition period after.
	lastCrossed map[string]time.Time
	// evicted: uids evicted for pressure; while one still runs nothing
	// more is evicted.
	evicted map[string]bool
}

// pressureConditions are the pressure conditions at time at.
func (a *Agent) pressureConditions(at time.Time) []*kplanev1.Condition {
	a.press.mu.Lock()
	defer a.press.mu.Unlock()
	type words struct{ reasonOK, msgOK, reasonBad, msgBad string }
	w := map[string]words{
		NodeMemoryPressure: {"KubeletHasSufficientMemory", "node agent has sufficient memory available", "KubeletHasInsufficientMemory", "node agent has insufficient memory available"},
		NodeDiskPressure:   {"KubeletHasNoDiskPressure", "node agent has no disk pressure", "KubeletHasDiskPressure", "node agent has disk pressure"},
		NodePIDPressure:    {"KubeletHasSufficientPID", "node agent has sufficient PID available", "KubeletHasInsufficientPID", "node agent has insufficient PID available"},
	}
	var out []*kplanev1.Condition
	for _, typ := range []string{NodeMemoryPressure, NodeDiskPressure, NodePIDPressure} {
		c := &kplanev1.Condition{Type: typ, Status: kplanev1.ConditionFalse, Reason: w[typ].reasonOK, Message: w[typ].msgOK}
		crossedNow := false
		for sig := range a.press.crossed {
			crossedNow = crossedNow || signalCondition[sig].cond == typ
		}
		if t, ok := a.press.lastCrossed[typ]; crossedNow || (ok && at.Sub(t) < a.cfg.PressureTransition) {
			c.Status, c.Reason, c.Message = kplanev1.ConditionTrue, w[typ].reasonBad, w[typ].msgBad
		}
		out = append(out, c)
	}
	return out
}

// checkPressure measures the node, records crossed thresholds and evicts
// one pod when any is crossed.
func (a *Agent) checkPressure(ctx context.Context) {
	if len(a.cfg.thresholds) == 0 {
		return
	}
	st, err := a.stats.NodeStats()
	if err != nil {
		a.log.Warn("measuring node pressure failed", "error", err)
		return
	}
	now := time.Now()
	crossed := map[string]string{}
	var first *Threshold
	for i, t := range a.cfg.thresholds {
		avail, capacity := st.available(t.Signal)
		if avail >= t.min(capacity) {
			continue
		}
		res := signalCondition[t.Signal].resource
		crossed[t.Signal] = fmt.Sprintf("The node was low on resource: %s. Threshold %s crossed, available: %d.", res, t.text, avail)
		if first == nil {
			first = &a.cfg.thresholds[i]
		}
	}
	a.press.mu.Lock()
	for sig := range crossed {
		if _, was := a.press.crossed[sig]; !was {
			a.log.Warn("eviction threshold crossed", "signal", sig, "message", crossed[sig])
		}
		a.press.lastCrossed[signalCondition[sig].cond] = now
	}
	for sig := range a.press.crossed {
		if _, is := crossed[sig]; !is {
			a.log.Info("eviction threshold no longer crossed", "signal", sig)
		}
	}
	a.press.crossed = crossed
	a.press.mu.Unlock()
	if first == nil {
		return
	}
	a.evictForPressure(ctx, *first, crossed[first.Signal])
}

// candidate is a running pod considered for eviction.
type candidate struct {
	pod      *kplanev1.Pod
	usage    int64
	request  int64
	priority int32
}

// rankForEviction orders candidates as the kubelet does: pods using more
// than they requested first, then lower priority, then the bigger overuse.
func rankForEviction(cs []candidate) {
	slices.SortStableFunc(cs, func(x, y candidate) int {
		xo, yo := x.usage > x.request, y.usage > y.request
		if xo != yo {
			if xo {
				return -1
			}
			return 1
		}
		if x.priority != y.priority {
			if x.priority < y.priority {
				return -1
			}
			return 1
		}
		dx, dy := x.usage-x.request, y.usage-y.request
		switch {
		case dx > dy:
			return -1
		case dx < dy:
			return 1
		}
		return 0
	})
}

// evictForPressure evicts the first ranked pod. While a pod evicted
// earlier still runs, nothing more is evicted: its resources are not
// released yet (the kubelet waits for the cleanup too).
func (a *Agent) evictForPressure(ctx context.Context, t Threshold, msg string) {
	var cs []candidate
	running := map[string]bool{}
	for _, rp := range a.rt.Pods() {
		running[rp.UID] = rp.Running
	}
	a.press.mu.Lock()
	for uid := range a.press.evicted {
		if !running[uid] {
			delete(a.press.evicted, uid)
		}
	}
	waiting := len(a.press.evicted) > 0
	a.press.mu.Unlock()
	if waiting {
		return
	}
	for _, rp := range a.rt.Pods() {
		if !rp.Running {
			continue
		}
		o, ok := a.pods.Store().Get(rp.Key())
		if !ok || o.Meta().GetUid() != rp.UID {
			continue
		}
		pod := o.GetPod()
		if !a.nodes[pod.GetSpec().GetNodeName()] {
			continue
		}
		if pod.GetStatus().GetReason() == ReasonEvicted {
			continue // evicted for its emptyDir; being stopped
		}
		ps := a.stats.PodStats(rp.UID)
		c := candidate{pod: pod, priority: pod.GetSpec().GetPriority()}
		switch t.Signal {
		case SignalMemoryAvailable:
			c.usage, c.request = ps.Memory, podRequest(pod, "memory")
		case SignalNodefsAvailable:
			c.usage, c.request = ps.Ephemeral, podRequest(pod, "ephemeral-storage")
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return
	}
	rankForEviction(cs)
	victim := cs[0].pod
	a.press.mu.Lock()
	a.press.evicted[victim.GetMetadata().GetUid()] = true
	a.press.mu.Unlock()
	if err := a.evict(ctx, victim, msg); err != nil {
		// Not marked Failed: the next pass ranks the pods again rather than
		// waiting for a victim that may be restarted.
		a.press.mu.Lock()
		delete(a.press.evicted, victim.GetMetadata().GetUid())
		a.press.mu.Unlock()
		a.log.Warn("eviction failed", "pod", victim.GetMetadata().GetNamespace()+"/"+victim.GetMetadata().GetName(), "error", err)
	}
}

// podRequest sums the app containers' requests of resource in bytes.
func podRequest(pod *kplanev1.Pod, resource string) int64 {
	var n int64
	for _, c := range pod.GetSpec().GetContainers() {
		if v := c.GetResources().GetRequests()[resource]; v != "" {
			if q, err := quantity.Parse(v); err == nil {
				n += q.Value()
			}
		}
	}
	return n
}

// nodeResources fills the capacity (flags, or the host for
// ephemeral-storage) and the allocatable: the capacity less the hard
// eviction thresholds of memory and nodefs, as the kubelet reserves them.
func (a *Agent) nodeResources() error {
	eph := a.cfg.EphemeralStorage
	if eph == "" {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(existingParent(a.cfg.RootDir), &fs); err != nil {
			return fmt.Errorf("--ephemeral-storage: measure %s: %w", a.cfg.RootDir, err)
		}
		eph = quantity.NewQuantity(int64(fs.Blocks)*int64(fs.Bsize), quantity.BinarySI).String() //nolint:unconvert // int64 on some platforms only
	}
	a.capacity = map[string]string{"cpu": a.cfg.CPU, "memory": a.cfg.Memory, "pods": strconv.Itoa(a.cfg.MaxPods), "ephemeral-storage": eph}
	a.allocatable = map[string]string{}
	for k, v := range a.capacity {
		a.allocatable[k] = v
	}
	for _, t := range a.cfg.thresholds {
		res := map[string]string{SignalMemoryAvailable: "memory", SignalNodefsAvailable: "ephemeral-storage"}[t.Signal]
		if res == "" {
			continue
		}
		q, err := quantity.Parse(a.capacity[res])
		if err != nil {
			return fmt.Errorf("%s capacity: %w", res, err)
		}
		left := q.Value() - t.min(q.Value())
		if left < 0 {
			left = 0
		}
		a.allocatable[res] = quantity.NewQuantity(left, quantity.BinarySI).String()
	}
	return nil
}
