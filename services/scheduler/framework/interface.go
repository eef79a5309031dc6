// Package framework is the scheduler's plugin interface, shaped after
// kube-scheduler's scheduling framework: a scheduling cycle runs the
// PreFilter, Filter, PostFilter, PreScore, Score (+ NormalizeScore) and
// Reserve plugins of the pod's profile against the scheduler's cache, one
// pod at a time; the binding cycle then runs Permit, PreBind, Bind and
// PostBind off the decision path. Each extension point is a small
// interface; a plugin implements the ones it needs. Profiles (one per
// schedulerName) enable, disable and weigh plugins, read from a
// KubeSchedulerConfiguration-shaped file (see LoadConfig).
//
// A plugin of your own is registered with a Registry entry; see
// services/scheduler/app.WithPlugin and examples/scheduler-plugin.
package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// PodInfo is a pod parsed once for scheduling (requests, selectors,
// tolerations, owner). The Pod field is shared with the informer cache:
// never modify it. Of a pod already assigned to a node (NodeInfo.Pods,
// preemption's victims) the cache holds a trimmed copy: identity,
// labels, controller owner, creation and deletion timestamps, nodeName,
// priority, the containers' names, requests and host ports, pod
// (anti-)affinity and status.phase, nothing else. A plugin that writes
// such a pod reads it from the apiserver first.
type PodInfo = core.PodInfo

// NodeInfo is a node as the scheduler's cache sees it: its parsed state
// (Allocatable, Labels, Taints, ...) and what has been assigned to it
// (Requested, Pods()).
type NodeInfo = core.NodeInfo

// Resources is an amount of cpu (milli), memory (bytes) and pod slots.
type Resources = core.Resources

// MaxNodeScore is the highest score a Score plugin gives (after
// NormalizeScore); MinNodeScore the lowest.
const (
	MaxNodeScore = core.MaxNodeScore
	MinNodeScore = 0
)

// Code is the outcome of a plugin call.
type Code int

// The codes, as Kubernetes names them.
const (
	// Success: go on. A nil *Status is Success.
	Success Code = iota
	// Error: something went wrong that has nothing to do with the pod
	// fitting; the pod is retried after its back-off.
	Error
	// Unschedulable: the pod does not fit (here); preemption may help.
	Unschedulable
	// UnschedulableAndUnresolvable: the pod does not fit (here) and
	// evicting pods would not change that.
	UnschedulableAndUnresolvable
	// Wait (Permit only): hold the pod in the binding cycle until a
	// plugin allows or rejects it, or the timeout passes.
	Wait
	// Skip (PreFilter, PreScore): the plugin has nothing to do for this
	// pod; its Filter or Score is not called.
	Skip
	// Pending (PreBind only): the plugin started work the pod must wait
	// for (VolumeBinding wrote the node on the pod's claims); the pod is
	// not bound now and comes back on the cluster event that finishes it.
	Pending
)

var codeNames = [...]string{"Success", "Error", "Unschedulable", "UnschedulableAndUnresolvable", "Wait", "Skip", "Pending"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Status is a plugin's answer: a code and, for anything but Success, the
// reasons (worded for users: they end up in "0/3 nodes are available:
// ..." and in Events). A nil *Status means Success.
type Status struct {
	code    Code
	reasons []string
	plugin  string
	err     error
}

// NewStatus returns a status with code and reasons.
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{code: code, reasons: reasons}
}

// AsStatus wraps an error as an Error status (nil for a nil error).
func AsStatus(err error) *Status {
	if err == nil {
		return nil
	}
	return &Status{code: Error, reasons: []string{err.Error()}, err: err}
}

// Code returns the status code (Success for nil).
func (s *Status) Code() Code {
	if s == nil {
		return Success
	}
	return s.code
}

// IsSuccess reports whether the status is Success.
func (s *Status) IsSuccess() bool { return s.Code() == Success }

// IsRejected reports whether the pod does not fit (Unschedulable or
// UnschedulableAndUnresolvable).
func (s *Status) IsRejected() bool {
	c := s.Code()
	return c == Unschedulable || c == UnschedulableAndUnresolvable
}

// Reasons returns the status's reasons.
func (s *Status) Reasons() []string {
	if s == nil {
		return nil
	}
	return s.reasons
}

// Plugin returns the name of the plugin that gave the status ("" when not
// known).
func (s *Status) Plugin() string {
	if s == nil {
		return ""
	}
	return s.plugin
}

// WithPlugin records which plugin gave the status.
func (s *Status) WithPlugin(name string) *Status {
	if s != nil {
		s.plugin = name
	}
	return s
}

// Message joins the reasons.
func (s *Status) Message() string { return strings.Join(s.Reasons(), ", ") }

// AsError returns the status as an error (nil for Success).
func (s *Status) AsError() error {
	if s.IsSuccess() {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	return fmt.Errorf("%s: %s", s.code, s.Message())
}

// CycleState is per-attempt scratch space: what a plugin's PreFilter or
// PreScore computed for the pod, read back by its Filter or Score. One
// scheduling attempt uses it from one goroutine at a time.
type CycleState struct {
	data   map[string]any
	nodes  []*NodeInfo
	filter func(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status
}

// RunFilterPlugins runs the profile's Filter plugins on node (possibly a
// clone with pods removed): for PostFilter plugins that simulate, as
// preemption does. Success when called outside PostFilter.
func (c *CycleState) RunFilterPlugins(ctx context.Context, pod *PodInfo, node *NodeInfo) *Status {
	if c.filter == nil {
		return nil
	}
	return c.filter(ctx, c, pod, node)
}

// Nodes returns every node of the snapshot the current Filter, PostFilter,
// PreScore or Score call runs against (not only the feasible ones), for
// plugins that count pods across topology domains. Valid only during
// those calls: the cache's lock protects it.
func (c *CycleState) Nodes() []*NodeInfo { return c.nodes }

// NewCycleState returns an empty state.
func NewCycleState() *CycleState { return &CycleState{data: map[string]any{}} }

// Write stores v under key (by convention the plugin's name).
func (c *CycleState) Write(key string, v any) { c.data[key] = v }

// Read returns what was stored under key.
func (c *CycleState) Read(key string) (any, bool) {
	v, ok := c.data[key]
	return v, ok
}

// NodeScore is one node's score.
type NodeScore struct {
	Name  string
	Score int64
}

// NodeScoreList is the scores of the feasible nodes, in the order the
// nodes were given.
type NodeScoreList []NodeScore

// Plugin is what every plugin is.
type Plugin interface {
	Name() string
}

// QueuedPodInfo is a pod waiting in the scheduling queue.
type QueuedPodInfo struct {
	Pod *kplanev1.Pod
	// Timestamp is when the pod was added to the queue.
	Timestamp time.Time
	// Attempts made to schedule it.
	Attempts int
}

// QueueSortPlugin orders the scheduling queue. Every profile of a
// process must use the same one (there is one queue).
type QueueSortPlugin interface {
	Plugin
	Less(a, b *QueuedPodInfo) bool
}

// PreFilterPlugin runs once per attempt before the filters: it checks
// what does not depend on the node and precomputes for Filter. A rejected
// status ends the attempt for every node.
type PreFilterPlugin interface {
	Plugin
	PreFilter(ctx context.Context, state *CycleState, pod *PodInfo) *Status
}

// FilterPlugin decides whether the pod may go to a node. It must be
// cheap and must not block: it runs under the cache lock, for every node.
type FilterPlugin interface {
	Plugin
	Filter(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status
}

// NodeToStatus is why each rejected node was rejected, by node name.
type NodeToStatus map[string]*Status

// PostFilterResult is what a PostFilter plugin achieved: the node
// nominated for the pod (it will fit there once victims are gone).
type PostFilterResult struct {
	NominatedNodeName string
}

// PostFilterPlugin runs when the pod fits no node (preemption). It gets
// the snapshot of nodes the filters saw and why each rejected the pod.
type PostFilterPlugin interface {
	Plugin
	PostFilter(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo, filtered NodeToStatus) (*PostFilterResult, *Status)
}

// PreScorePlugin runs once before scoring, with the nodes that passed the
// filters.
type PreScorePlugin interface {
	Plugin
	PreScore(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) *Status
}

// ScorePlugin ranks a feasible node. Scores are weighted by the
// profile's weight for the plugin and summed.
type ScorePlugin interface {
	Plugin
	Score(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) (int64, *Status)
	// ScoreExtensions returns the NormalizeScore step, or nil when the
	// raw scores already lie in MinNodeScore..MaxNodeScore.
	ScoreExtensions() ScoreExtensions
}

// ScoreExtensions maps a Score plugin's raw scores of all feasible nodes
// (in place) onto MinNodeScore..MaxNodeScore.
type ScoreExtensions interface {
	NormalizeScore(ctx context.Context, state *CycleState, pod *PodInfo, scores NodeScoreList) *Status
}

// ReservePlugin is told when the pod is assumed on a node (Reserve) and
// when that is undone because a later step failed (Unreserve, which must
// be idempotent).
type ReservePlugin interface {
	Plugin
	Reserve(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string) *Status
	Unreserve(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string)
}

// PermitPlugin approves, rejects or holds (Wait, with a timeout) the
// binding of a pod to its node. A held pod is released through
// Handle.WaitingPod.
type PermitPlugin interface {
	Plugin
	Permit(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string) (*Status, time.Duration)
}

// PreBindPlugin does what must happen before the pod is bound.
type PreBindPlugin interface {
	Plugin
	PreBind(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string) *Status
}

// BindPlugin binds the pod. It returns Skip to let the next Bind plugin
// do it.
type BindPlugin interface {
	Plugin
	Bind(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string) *Status
}

// PostBindPlugin is told the pod was bound.
type PostBindPlugin interface {
	Plugin
	PostBind(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string)
}

// WaitingPod is a pod held by a Permit plugin.
type WaitingPod interface {
	// Allow releases the hold of the named plugin; the pod is bound once
	// every holding plugin allowed it.
	Allow(plugin string)
	// Reject fails the binding with msg.
	Reject(plugin, msg string)
}

// Handle is what plugins get from the scheduler.
type Handle interface {
	// Client is the apiserver client.
	Client() kplanev1.ResourcesClient
	// Informer returns the shared informer of a kind. Call it only from a
	// plugin factory: informers are started after the plugins are built.
	// The "Pod" informer holds assigned pods trimmed (see PodInfo).
	Informer(kind string) *informer.Informer
	// Logger is the scheduler's logger.
	Logger() hclog.Logger
	// WaitingPod returns the pod held by Permit plugins, by uid (nil when
	// none is).
	WaitingPod(uid string) WaitingPod
	// Event records an Event about obj (rate limited; dropped under
	// pressure).
	Event(obj *kplanev1.Object, eventType, reason, message string)
	// Go runs fn in a goroutine of the current leadership term, for work
	// the scheduling cycle must not wait on (preemption deletes its
	// victims so): ctx ends with the term, and the term does not end
	// before fn returns. When the scheduler is not leading, fn is called
	// at once with an ended ctx.
	Go(fn func(ctx context.Context))
}

// Fork returns an empty state that runs the same filters
// (RunFilterPlugins): preemption evaluates each simulated cluster on a
// fork, so that plugins which count pods across nodes (InterPodAffinity,
// PodTopologySpread) count the simulation, not what PreFilter saw.
func (c *CycleState) Fork() *CycleState {
	return &CycleState{data: map[string]any{}, filter: c.filter}
}

// SetNodes sets what Nodes returns, for tests and tools that call plugins
// directly rather than through a Framework.
func (c *CycleState) SetNodes(nodes []*NodeInfo) { c.nodes = nodes }
