package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// NodeIP is the address of node i (1-based) in a Cloud stack: a loopback
// address of this process's own, its instance's InternalIP.
func (o Options) NodeIP(i int) string { return fmt.Sprintf("127.245.%d.%d", os.Getpid()%250, i) }

// CloudStateFile is cloudsim's state file in a Cloud stack.
func (o Options) CloudStateFile() string { return filepath.Join(o.DataDir, "cloudsim", "state.json") }

// startCloud writes the instances file (one instance per node, at
// NodeIP) and starts cloudsim, ready once its gRPC health check serves.
func (s *Stack) startCloud(ctx context.Context) error {
	o := s.opts
	dir := filepath.Dir(o.CloudStateFile())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("stack: cloudsim dir: %w", err)
	}
	var b strings.Builder
	b.WriteString("instances:\n")
	zones := []string{"zone-a", "zone-b", "zone-c"}
	// Exec agents are node-1...; the fake agent registers node-0...
	first := 1
	if o.Runtime == RuntimeFake {
		first = 0
	}
	for i := first; i < first+o.Nodes; i++ {
		fmt.Fprintf(&b, "- name: node-%d\n  zone: %s\n  region: region-1\n  instanceType: sim.small\n  addresses:\n  - {type: InternalIP, address: %s}\n",
			i, zones[i%len(zones)], o.NodeIP(i+1-first))
	}
	instances := filepath.Join(dir, "instances.yaml")
	if err := os.WriteFile(instances, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("stack: cloudsim instances: %w", err)
	}
	args := []string{"serve", "--listen", o.CloudAddr, "--state-file", o.CloudStateFile(), "--instances", instances,
		"--lb-ip-range", o.CloudLBRange, "--health-check-interval", "500ms"}
	svc, err := s.add("cloudsim", "cloudsim", "", "", args, o.CloudAddr)
	if err != nil {
		return err
	}
	return svc.WaitReady(ctx)
}
