package agent

import (
	"bufio"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/pkg/quantity"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/nodeagent/internal/ipam"
	"github.com/kplane/kplane/services/nodeagent/internal/podnet"
)

// Config holds the node agent's own flags.
type Config struct {
	NodeName   string
	NodeLabels string
	// CloudProvider is "" or "external" (kplanev1.CloudProviderExternal):
	// the Node is registered with the uninitialized taint and a
	// NetworkUnavailable condition, and its addresses are left to the
	// cloud controller manager (cloudctl).
	CloudProvider string
	// CloudRoutesFrom is cloudsim's API address: when set, the cloud's
	// routes (other nodes' pod CIDRs) are programmed into this host's
	// routing table (package cloudroutes).
	CloudRoutesFrom   string
	CloudRoutesEvery  time.Duration
	NodeIP            string
	CPU               string
	Memory            string
	MaxPods           int
	HeartbeatInterval time.Duration
	LeaseDuration     time.Duration
	Runtime           string
	RootDir           string
	PodCIDR           string
	PodAddressIface   string
	BackoffBase       time.Duration
	BackoffMax        time.Duration
	LogsAddr          string
	FakeNodes         int
	ShimBinary        string
	HousekeepingEvery time.Duration
	EphemeralStorage  string
	EvictionHard      string
	// PressureTransition: how long a pressure condition stays True after
	// its threshold was last crossed (the kubelet's
	// --eviction-pressure-transition-period).
	PressureTransition time.Duration

	labels     map[string]string
	thresholds []Threshold
}

// AddFlags registers the flags with host-derived defaults.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.NodeName, "node-name", strings.ToLower(host), "name of the Node to register (with --fake-nodes, the prefix of the names)")
	fs.StringVar(&c.NodeLabels, "node-labels", "", "labels of the Node, k=v,k2=v2")
	fs.StringVar(&c.CloudProvider, "cloud-provider", "", "external: the cloud controller manager (cloudctl) initialises the Node; it registers with the node.cloudprovider.kubernetes.io/uninitialized taint, NetworkUnavailable until its route exists, and the addresses are the cloud's")
	fs.StringVar(&c.CloudRoutesFrom, "cloud-routes-from", "", "cloudsim's API address: program the cloud's routes (every other node's pod CIDR via its instance's InternalIP) into this host's routing table (needs CAP_NET_ADMIN); empty: off")
	fs.DurationVar(&c.CloudRoutesEvery, "cloud-routes-interval", 2*time.Second, "with --cloud-routes-from: how often the cloud's routes are read")
	fs.StringVar(&c.NodeIP, "node-ip", "127.0.0.1", "the node's InternalIP (the pods' hostIP; where kpctl logs connects)")
	fs.StringVar(&c.CPU, "cpu", strconv.Itoa(runtime.NumCPU()), "cpu capacity of the node")
	fs.StringVar(&c.Memory, "memory", hostMemory(), "memory capacity of the node")
	fs.IntVar(&c.MaxPods, "max-pods", 110, "number of pods the node accepts")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", 10*time.Second, "how often the node lease is renewed")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", 40*time.Second, "leaseDurationSeconds of the node lease")
	fs.StringVar(&c.Runtime, "runtime", "exec", "container runtime: exec (child processes) or fake (no processes)")
	fs.StringVar(&c.RootDir, "root-dir", "/var/lib/kplane/nodeagent", "directory for pod working directories, logs and runtime state")
	fs.StringVar(&c.PodCIDR, "pod-cidr", "", "override for a single agent: allocate pod IPs from this range rather than the Node's spec.podCIDR (which ipamctl assigns); the Node is registered with it")
	fs.StringVar(&c.PodAddressIface, "pod-address-interface", podnet.ModeAuto, "where pod IPs are added as addresses so that other hosts reach them: auto (nothing for ranges inside 127.0.0.0/8, which the loopback interface answers; otherwise the interface carrying --node-ip, which needs CAP_NET_ADMIN), none, or an interface name")
	fs.DurationVar(&c.BackoffBase, "restart-backoff-base", DefaultBackoff.Base, "first crash-loop back-off delay; doubles per restart")
	fs.DurationVar(&c.BackoffMax, "restart-backoff-max", DefaultBackoff.Max, "maximum crash-loop back-off delay")
	fs.StringVar(&c.LogsAddr, "logs-addr", ":10250", "address of the HTTP server for container logs (its port is published in the Node status)")
	fs.IntVar(&c.FakeNodes, "fake-nodes", 0, "with --runtime=fake, register this many nodes <node-name>-0 ... -N-1 from one process")
	fs.StringVar(&c.ShimBinary, "shim-binary", "", "binary run as the container shim (default: this executable)")
	fs.StringVar(&c.EphemeralStorage, "ephemeral-storage", "", "ephemeral-storage capacity of the node (default: the size of the filesystem holding --root-dir)")
	fs.StringVar(&c.EvictionHard, "eviction-hard", DefaultEvictionHard, "hard eviction thresholds, signal<quantity or signal<percent, comma-separated (signals: memory.available, nodefs.available, nodefs.inodesFree, pid.available); checked every --housekeeping-interval; empty disables eviction")
	fs.DurationVar(&c.PressureTransition, "eviction-pressure-transition-period", 5*time.Minute, "how long a pressure condition stays True after its threshold was last crossed")
	fs.DurationVar(&c.HousekeepingEvery, "housekeeping-interval", 10*time.Second, "how often runtime pods are checked against the apiserver's")
}

// validate checks the flags and fills derived values.
func (c *Config) validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("--node-name is required (the hostname could not be read)")
	}
	switch c.Runtime {
	case "exec", "fake":
	default:
		return fmt.Errorf("--runtime must be exec or fake, not %q", c.Runtime)
	}
	if c.FakeNodes < 0 || (c.FakeNodes > 0 && c.Runtime != "fake") {
		return fmt.Errorf("--fake-nodes needs --runtime=fake and a non-negative count")
	}
	if c.CloudProvider != "" && c.CloudProvider != kplanev1.CloudProviderExternal {
		return fmt.Errorf("--cloud-provider must be empty or %q, not %q", kplanev1.CloudProviderExternal, c.CloudProvider)
	}
	if c.CloudRoutesFrom != "" && (c.FakeNodes > 0 || c.CloudRoutesEvery <= 0) {
		return fmt.Errorf("--cloud-routes-from needs one real node (no --fake-nodes) and a positive --cloud-routes-interval")
	}
	if _, err := netip.ParseAddr(c.NodeIP); err != nil {
		return fmt.Errorf("--node-ip: %w", err)
	}
	if c.PodCIDR != "" {
		if c.FakeNodes > 0 {
			return fmt.Errorf("--pod-cidr overrides one node's range; with --fake-nodes each node uses its Node's spec.podCIDR")
		}
		if _, err := ipam.New(c.PodCIDR); err != nil {
			return fmt.Errorf("--pod-cidr: %w", err)
		}
	}
	if c.PodAddressIface == "" {
		return fmt.Errorf("--pod-address-interface must be auto, none or an interface name")
	}
	for name, v := range map[string]string{"--cpu": c.CPU, "--memory": c.Memory, "--ephemeral-storage": c.EphemeralStorage} {
		if name == "--ephemeral-storage" && v == "" {
			continue // measured
		}
		if _, err := quantity.ParseNonNegative(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.MaxPods <= 0 {
		return fmt.Errorf("--max-pods must be positive")
	}
	if c.HeartbeatInterval <= 0 || c.LeaseDuration <= 0 || c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase || c.HousekeepingEvery <= 0 {
		return fmt.Errorf("durations must be positive and --restart-backoff-max at least --restart-backoff-base")
	}
	if c.PressureTransition < 0 {
		return fmt.Errorf("--eviction-pressure-transition-period must not be negative")
	}
	th, err := ParseEvictionHard(c.EvictionHard)
	if err != nil {
		return err
	}
	c.thresholds = th
	set, err := parseLabels(c.NodeLabels)
	if err != nil {
		return fmt.Errorf("--node-labels: %w", err)
	}
	c.labels = set
	return nil
}

// parseLabels parses "k=v,k2=v2" (the apiserver validates keys and values).
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// nodeNames are the nodes this process registers.
func (c *Config) nodeNames() []string {
	if c.FakeNodes == 0 {
		return []string{c.NodeName}
	}
	out := make([]string, c.FakeNodes)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", c.NodeName, i)
	}
	return out
}

// hostMemory reads MemTotal from /proc/meminfo ("0" when unknown).
func hostMemory() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "0"
	}
	// Only read: a failed Close loses nothing.
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			return fields[1] + "Ki"
		}
	}
	return "0"
}
