package agent

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The node status cadence.
const (
	// statusEveryBeats: the node status is written at least every this many
	// heartbeats even when nothing changed (lastHeartbeatTime moves).
	statusEveryBeats = 4
	// heartbeatParallelism bounds concurrent heartbeats with many fake nodes.
	heartbeatParallelism = 16
	agentVersion         = "kplane-nodeagent/v0.1.0"
)

// nodeState is one registered node's heartbeat bookkeeping.
type nodeState struct {
	name      string
	lease     *kplanev1.Lease
	node      *kplanev1.Node // as last written or read
	beats     int
	lastWrite time.Time
}

// runNodes registers every node and heartbeats them until ctx ends.
func (a *Agent) runNodes(ctx context.Context) error {
	names := a.cfg.nodeNames()
	states := make([]*nodeState, len(names))
	for i, n := range names {
		states[i] = &nodeState{name: n}
	}
	info := a.systemInfo()
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		a.heartbeatAll(ctx, states, info)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.netReady:
		}
	}
}

// heartbeatAll renews every node's lease and status with bounded parallelism.
func (a *Agent) heartbeatAll(ctx context.Context, states []*nodeState, info *kplanev1.NodeSystemInfo) {
	health := a.rt.Healthy()
	sem := make(chan struct{}, heartbeatParallelism)
	var wg sync.WaitGroup
	for _, ns := range states {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := a.heartbeat(ctx, ns, info, health)
			a.m.heartbeats.WithLabelValues(result(err)).Inc()
			if err != nil && ctx.Err() == nil {
				a.log.Warn("node heartbeat failed", "node", ns.name, "error", err)
			}
		}()
	}
	wg.Wait()
}

func (a *Agent) heartbeat(ctx context.Context, ns *nodeState, info *kplanev1.NodeSystemInfo, health error) error {
	if err := a.renewLease(ctx, ns); err != nil {
		return err
	}
	nodes := client.For[*kplanev1.Node](a.api)
	cur, err := nodes.Get(ctx, "", ns.name)
	if client.IsNotFound(err) {
		cur, err = a.register(ctx, ns.name)
	}
	if err != nil {
		return err
	}
	now := time.Now()
	ns.beats++
	// Unchanged but for the heartbeat, the status is written only every
	// statusEveryBeats beats.
	every := ns.beats%statusEveryBeats == 0 || ns.lastWrite.IsZero()
	out, wrote, err := controller.UpdateStatus(ctx, a.api, cur, func(cur *kplanev1.Node) *kplanev1.Node {
		want := a.nodeStatus(ns.name, cur.GetStatus(), info, health, now)
		if !every && sameIgnoringHeartbeat(cur.GetStatus(), want) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Node)
		next.Status = want
		return next
	})
	if err != nil {
		return fmt.Errorf("update node status: %w", err)
	}
	if !wrote {
		return nil // nothing new, or the node is gone (registered again next beat)
	}
	if r := readyOf(cur.GetStatus()); r != readyOf(out.GetStatus()) {
		a.log.Info("node ready condition changed", "node", ns.name, "from", r, "to", readyOf(out.GetStatus()))
	}
	ns.node, ns.lastWrite = out, now
	return nil
}

// register creates the Node with its labels (the status follows).
func (a *Agent) register(ctx context.Context, name string) (*kplanev1.Node, error) {
	lbls := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH}
	for k, v := range a.cfg.labels {
		lbls[k] = v
	}
	// With --pod-cidr the Node says which range its pods use; otherwise
	// ipamctl assigns one.
	n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name, Labels: lbls}, Spec: &kplanev1.NodeSpec{PodCidr: a.cfg.PodCIDR}}
	if a.cfg.CloudProvider == kplanev1.CloudProviderExternal {
		// Kept off by the scheduler until cloudctl has filled in what the
		// cloud knows (providerID, addresses, zone) and removed it.
		n.Spec.Taints = []*kplanev1.Taint{{Key: kplanev1.TaintNodeUninitialized, Value: "true", Effect: kplanev1.TaintEffectNoSchedule}}
	}
	out, err := client.For[*kplanev1.Node](a.api).Create(ctx, n)
	if client.IsAlreadyExists(err) {
		return client.For[*kplanev1.Node](a.api).Get(ctx, "", name)
	}
	if err != nil {
		return nil, fmt.Errorf("register node %s: %w", name, err)
	}
	a.log.Info("registered node", "node", name, "labels", lbls)
	return out, nil
}

// renewLease creates or renews kplane-node-lease/<node>: a CAS update of
// the lease last written (pkg/controller rereads on a conflict), or, when
// it does not exist (any more), a create.
func (a *Agent) renewLease(ctx context.Context, ns *nodeState) error {
	leases := client.For[*kplanev1.Lease](a.api)
	now := timestamppb.Now()
	dur := int32(a.cfg.LeaseDuration / time.Second)
	for attempt := 0; attempt < 2; attempt++ {
		if ns.lease == nil {
			l, err := leases.Get(ctx, kplanev1.NamespaceNodeLease, ns.name)
			if client.IsNotFound(err) {
				l, err = leases.Create(ctx, &kplanev1.Lease{
					Metadata: &kplanev1.ObjectMeta{Name: ns.name, Namespace: kplanev1.NamespaceNodeLease},
					Spec:     &kplanev1.LeaseSpec{HolderIdentity: ns.name, LeaseDurationSeconds: dur, AcquireTime: now, RenewTime: now},
				})
				if err == nil {
					ns.lease = l
					return nil
				}
				if client.IsAlreadyExists(err) {
					continue // created meanwhile: read it
				}
				return fmt.Errorf("create node lease: %w", err)
			}
			if err != nil {
				return fmt.Errorf("get node lease: %w", err)
			}
			ns.lease = l
		}
		out, _, err := controller.Update(ctx, a.api, ns.lease, func(cur *kplanev1.Lease) *kplanev1.Lease {
			next := proto.Clone(cur).(*kplanev1.Lease)
			if next.Spec == nil {
				next.Spec = &kplanev1.LeaseSpec{}
			}
			if next.Spec.HolderIdentity != ns.name {
				next.Spec.HolderIdentity, next.Spec.AcquireTime = ns.name, now
				next.Spec.LeaseTransitions++
			}
			next.Spec.LeaseDurationSeconds, next.Spec.RenewTime = dur, now
			return next
		})
		ns.lease = out // nil when deleted or replaced meanwhile: read or create it again
		if err != nil {
			return fmt.Errorf("renew node lease: %w", err)
		}
		if out != nil {
			return nil
		}
	}
	return fmt.Errorf("renew node lease: deleted or recreated while being renewed")
}

// nodeStatus is the status the agent reports for node name.
func (a *Agent) nodeStatus(name string, old *kplanev1.NodeStatus, info *kplanev1.NodeSystemInfo, health error, now time.Time) *kplanev1.NodeStatus {
	ready := &kplanev1.Condition{Type: kplanev1.NodeReady, Status: kplanev1.ConditionTrue, Reason: "KubeletReady", Message: "node agent is posting ready status"}
	if health != nil {
		ready.Status, ready.Reason, ready.Message = kplanev1.ConditionFalse, "KubeletNotReady", "container runtime is not healthy: "+health.Error()
	} else if why := a.networkNotReady(name); why != "" {
		ready.Status, ready.Reason, ready.Message = kplanev1.ConditionFalse, "KubeletNotReady", why
	}
	ready.LastHeartbeatTime = timestamppb.New(now)
	ready.LastTransitionTime = timestamppb.New(now)
	conds := apiutil.SetStatusCondition(old.GetConditions(), ready) // conditions owned by others stay
	if a.cfg.CloudProvider == kplanev1.CloudProviderExternal && apiutil.FindCondition(conds, kplanev1.NodeNetworkUnavailable) == nil {
		// The cloud's route controller turns it False once the route of
		// the node's pod CIDR exists; until then the network is not there.
		conds = apiutil.SetStatusCondition(conds, &kplanev1.Condition{Type: kplanev1.NodeNetworkUnavailable, Status: kplanev1.ConditionTrue,
			Reason: "NoRouteCreated", Message: "waiting for the cloud route of the node's pod CIDR",
			LastHeartbeatTime: timestamppb.New(now), LastTransitionTime: timestamppb.New(now)})
	}
	addresses := []*kplanev1.NodeAddress{
		{Type: kplanev1.NodeInternalIP, Address: a.cfg.NodeIP},
		{Type: kplanev1.NodeHostName, Address: name},
	}
	if a.cfg.CloudProvider == kplanev1.CloudProviderExternal && len(old.GetAddresses()) > 0 {
		addresses = old.GetAddresses() // the cloud's, written by cloudctl
	}
	for _, c := range a.pressureConditions(now) {
		c.LastHeartbeatTime, c.LastTransitionTime = timestamppb.New(now), timestamppb.New(now)
		conds = apiutil.SetStatusCondition(conds, c)
	}
	return &kplanev1.NodeStatus{
		Capacity:        maps.Clone(a.capacity),
		Allocatable:     maps.Clone(a.allocatable),
		Conditions:      conds,
		Addresses:       addresses,
		DaemonEndpoints: &kplanev1.NodeDaemonEndpoints{KubeletEndpoint: &kplanev1.DaemonEndpoint{Port: int32(a.logsPort)}},
		NodeInfo:        info,
	}
}

func readyOf(s *kplanev1.NodeStatus) string {
	return apiutil.FindCondition(s.GetConditions(), kplanev1.NodeReady).GetStatus()
}

// sameIgnoringHeartbeat compares node statuses without lastHeartbeatTime.
func sameIgnoringHeartbeat(a, b *kplanev1.NodeStatus) bool {
	strip := func(s *kplanev1.NodeStatus) *kplanev1.NodeStatus {
		s = proto.Clone(s).(*kplanev1.NodeStatus)
		if s == nil {
			return &kplanev1.NodeStatus{}
		}
		for _, c := range s.Conditions {
			c.LastHeartbeatTime = nil
		}
		return s
	}
	return proto.Equal(strip(a), strip(b))
}

func (a *Agent) systemInfo() *kplanev1.NodeSystemInfo {
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	return &kplanev1.NodeSystemInfo{
		MachineId:               read("/etc/machine-id"),
		KernelVersion:           read("/proc/sys/kernel/osrelease"),
		OsImage:                 osImage(),
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
		KubeletVersion:          agentVersion,
		ContainerRuntimeVersion: a.rt.Name() + "://" + agentVersion,
	}
}

func osImage() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	// Only read: a failed Close loses nothing.
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}
