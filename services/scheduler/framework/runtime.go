package framework

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// FitError says why a pod fits no node ("0/3 nodes are available: ...").
type FitError = core.FitError

// weighted is an enabled Score plugin and its weight.
type weighted struct {
	ScorePlugin
	weight int64
	ext    ScoreExtensions
}

// Framework is one profile: the plugins enabled at each extension point,
// in order, and the Score weights. The scheduling-cycle methods are
// called from the one deciding goroutine; the binding-cycle ones from
// any binder.
type Framework struct {
	name       string
	handle     Handle
	queueSort  QueueSortPlugin
	preFilter  []PreFilterPlugin
	filter     []FilterPlugin
	postFilter []PostFilterPlugin
	preScore   []PreScorePlugin
	score      []weighted
	reserve    []ReservePlugin
	permit     []PermitPlugin
	preBind    []PreBindPlugin
	bind       []BindPlugin
	postBind   []PostBindPlugin
	waiting    *waitingPods

	// percentToScore is the configuration's percentageOfNodesToScore (0:
	// adaptive); nextStart is where the next cycle's filtering starts, so
	// successive pods look at different nodes.
	percentToScore int
	nextStart      int

	// scratch reused by SelectNode (one decision at a time).
	active   []FilterPlugin
	rnd      *rand.Rand
	feasible []*NodeInfo
	totals   []int64
	raw      NodeScoreList
}

// ProfileName is the schedulerName the profile serves.
func (f *Framework) ProfileName() string { return f.name }

// Handle is what the profile's plugins were given.
func (f *Framework) Handle() Handle { return f.handle }

// QueueSort is the profile's QueueSort plugin (nil when none).
func (f *Framework) QueueSort() QueueSortPlugin { return f.queueSort }

// HasPostFilter reports whether a PostFilter plugin is enabled.
func (f *Framework) HasPostFilter() bool { return len(f.postFilter) > 0 }

// PluginNames lists the enabled plugins per extension point, for logs and
// tests.
func (f *Framework) PluginNames() map[string][]string {
	out := map[string][]string{}
	add := func(point string, p Plugin) { out[point] = append(out[point], p.Name()) }
	if f.queueSort != nil {
		add("queueSort", f.queueSort)
	}
	for _, p := range f.preFilter {
		add("preFilter", p)
	}
	for _, p := range f.filter {
		add("filter", p)
	}
	for _, p := range f.postFilter {
		add("postFilter", p)
	}
	for _, p := range f.preScore {
		add("preScore", p)
	}
	for _, p := range f.score {
		out["score"] = append(out["score"], fmt.Sprintf("%s:%d", p.Name(), p.weight))
	}
	for _, p := range f.reserve {
		add("reserve", p)
	}
	for _, p := range f.permit {
		add("permit", p)
	}
	for _, p := range f.preBind {
		add("preBind", p)
	}
	for _, p := range f.bind {
		add("bind", p)
	}
	for _, p := range f.postBind {
		add("postBind", p)
	}
	return out
}

// RunPreFilterPlugins runs every PreFilter plugin; the first that does
// not succeed ends the attempt (its status is returned). Plugins that
// return Skip are remembered so their Filter is not called.
func (f *Framework) RunPreFilterPlugins(ctx context.Context, state *CycleState, pod *PodInfo) *Status {
	for _, p := range f.preFilter {
		st := p.PreFilter(ctx, state, pod)
		switch st.Code() {
		case Success:
		case Skip:
			state.skipFilter(p.Name())
		default:
			return st.WithPlugin(p.Name())
		}
	}
	return nil
}

// RunFilterPlugins runs the Filter plugins on one node and returns the
// first rejection (nil when the pod fits).
func (f *Framework) RunFilterPlugins(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status {
	for _, p := range f.filter {
		if state.skippedFilter(p.Name()) {
			continue
		}
		if st := p.Filter(ctx, state, pod, node); !st.IsSuccess() {
			return st.WithPlugin(p.Name())
		}
	}
	return nil
}

// runFilters is what PostFilter plugins simulate with: the filters on
// node with the pods nominated there that are at least as important as
// pod counted, as SelectNode counts them (Kubernetes'
// RunFilterPluginsWithNominatedPods), so that preemption does not pick
// room already promised to another preemptor.
func (f *Framework) runFilters(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status {
	return f.RunFilterPlugins(ctx, state, pod, withNominated(pod, node))
}

func (f *Framework) runActiveFilters(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status {
	for _, p := range f.active {
		if st := p.Filter(ctx, state, pod, node); !st.IsSuccess() {
			return st.WithPlugin(p.Name())
		}
	}
	return nil
}

// SelectNode runs the filters on every node, scores the feasible ones and
// returns the best (ties broken at random). When none fits it returns the
// FitError and why each node was rejected. nodes must not change during
// the call (the cache holds its lock).
func (f *Framework) SelectNode(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) (*NodeInfo, NodeToStatus, error) {
	f.feasible = f.feasible[:0]
	state.nodes = nodes
	defer func() { state.nodes = nil }()
	var filtered NodeToStatus
	var fit *FitError
	// The filters this pod needs (PreFilter may have skipped some),
	// decided once rather than per node.
	f.active = f.active[:0]
	for _, p := range f.filter {
		if !state.skippedFilter(p.Name()) {
			f.active = append(f.active, p)
		}
	}
	want := f.numFeasibleNodesToFind(len(nodes))
	start := 0
	if len(nodes) > 0 {
		start = f.nextStart % len(nodes)
	}
	looked := 0
	for i := range nodes {
		if len(f.feasible) >= want {
			break
		}
		n := nodes[(start+i)%len(nodes)]
		looked++
		st := f.runActiveFilters(ctx, state, pod, withNominated(pod, n))
		if st.IsSuccess() {
			f.feasible = append(f.feasible, n)
			continue
		}
		if st.Code() == Error {
			return nil, nil, fmt.Errorf("filter %s on node %s: %w", st.Plugin(), n.Name, st.AsError())
		}
		if fit == nil {
			fit = &FitError{Reasons: map[string]int{}}
			filtered = NodeToStatus{}
		}
		filtered[n.Name] = st
		for _, r := range st.Reasons() {
			fit.Reasons[r]++
		}
	}
	if len(nodes) > 0 {
		f.nextStart = (start + looked) % len(nodes)
	}
	if len(f.feasible) == 0 {
		if fit == nil {
			fit = &FitError{Reasons: map[string]int{}}
		}
		fit.NumNodes = len(nodes)
		return nil, filtered, fit
	}
	if len(f.feasible) == 1 {
		return f.feasible[0], nil, nil
	}
	totals, err := f.prioritize(ctx, state, pod, f.feasible)
	if err != nil {
		return nil, nil, err
	}
	return f.feasible[core.SelectHost(totals, f.rnd)], nil, nil
}

// minFeasibleNodesToFind and minFeasibleNodesPercentageToFind are
// Kubernetes' floors for percentageOfNodesToScore.
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

// numFeasibleNodesToFind is how many feasible nodes a cycle looks for
// among total before it stops filtering and scores them (every node
// below 100 nodes, or at 100%).
func (f *Framework) numFeasibleNodesToFind(total int) int {
	if total < minFeasibleNodesToFind || f.percentToScore >= 100 {
		return total
	}
	pct := f.percentToScore
	if pct <= 0 {
		pct = max(50-total/125, minFeasibleNodesPercentageToFind)
	}
	return max(total*pct/100, minFeasibleNodesToFind)
}

// prioritize runs PreScore and the weighted Score (+ NormalizeScore)
// plugins and returns each node's total.
func (f *Framework) prioritize(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) ([]int64, error) {
	for _, p := range f.preScore {
		st := p.PreScore(ctx, state, pod, nodes)
		switch st.Code() {
		case Success:
		case Skip:
			state.skipScore(p.Name())
		default:
			return nil, fmt.Errorf("prescore %s: %w", p.Name(), st.AsError())
		}
	}
	f.totals = append(f.totals[:0], make([]int64, len(nodes))...)
	if cap(f.raw) < len(nodes) {
		f.raw = make(NodeScoreList, len(nodes))
	}
	raw := f.raw[:len(nodes)]
	for _, p := range f.score {
		if state.skippedScore(p.Name()) {
			continue
		}
		for i, n := range nodes {
			s, st := p.Score(ctx, state, pod, n)
			if !st.IsSuccess() {
				return nil, fmt.Errorf("score %s on node %s: %w", p.Name(), n.Name, st.AsError())
			}
			raw[i] = NodeScore{Name: n.Name, Score: s}
		}
		if p.ext != nil {
			if st := p.ext.NormalizeScore(ctx, state, pod, raw); !st.IsSuccess() {
				return nil, fmt.Errorf("normalize score %s: %w", p.Name(), st.AsError())
			}
		}
		for i := range nodes {
			f.totals[i] += p.weight * raw[i].Score
		}
	}
	return f.totals, nil
}

// RunScorePlugins returns each node's weighted total score, for tests and
// tools that rank nodes without choosing.
func (f *Framework) RunScorePlugins(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) ([]int64, error) {
	if state.nodes == nil {
		state.nodes = nodes
		defer func() { state.nodes = nil }()
	}
	totals, err := f.prioritize(ctx, state, pod, nodes)
	return append([]int64(nil), totals...), err
}

// RunPostFilterPlugins runs the PostFilter plugins until one succeeds.
// When none does, the result is the last non-nil one a plugin returned
// with its rejection (an empty NominatedNodeName there tells the
// scheduler to clear the pod's nomination, as Kubernetes' ModeOverride).
func (f *Framework) RunPostFilterPlugins(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo, filtered NodeToStatus) (*PostFilterResult, *Status) {
	state.nodes, state.filter = nodes, f.runFilters
	defer func() { state.nodes, state.filter = nil, nil }()
	var last *Status
	var result *PostFilterResult
	for _, p := range f.postFilter {
		r, st := p.PostFilter(ctx, state, pod, nodes, filtered)
		if st.IsSuccess() {
			return r, nil
		}
		if st.Code() == Error {
			return nil, st.WithPlugin(p.Name())
		}
		last = st.WithPlugin(p.Name())
		if r != nil {
			result = r
		}
	}
	if last == nil {
		last = NewStatus(Unschedulable, "no PostFilter plugin")
	}
	return result, last
}

// RunReservePlugins runs Reserve; on failure it unreserves the plugins
// already run and returns the failure.
func (f *Framework) RunReservePlugins(ctx context.Context, state *CycleState, pod *PodInfo, node string) *Status {
	for i, p := range f.reserve {
		if st := p.Reserve(ctx, state, pod, node); !st.IsSuccess() {
			for j := i; j >= 0; j-- {
				f.reserve[j].Unreserve(ctx, state, pod, node)
			}
			return st.WithPlugin(p.Name())
		}
	}
	return nil
}

// RunUnreservePlugins undoes Reserve, in reverse order.
func (f *Framework) RunUnreservePlugins(ctx context.Context, state *CycleState, pod *PodInfo, node string) {
	for i := len(f.reserve) - 1; i >= 0; i-- {
		f.reserve[i].Unreserve(ctx, state, pod, node)
	}
}

// RunPermitPlugins asks every Permit plugin; when some return Wait it
// holds the pod until all of them allow it (Success), one rejects it,
// the shortest timeout passes (Unschedulable), or ctx ends.
func (f *Framework) RunPermitPlugins(ctx context.Context, state *CycleState, pod *PodInfo, node string) *Status {
	var waitFor map[string]time.Duration
	for _, p := range f.permit {
		st, timeout := p.Permit(ctx, state, pod, node)
		switch st.Code() {
		case Success:
		case Wait:
			if waitFor == nil {
				waitFor = map[string]time.Duration{}
			}
			waitFor[p.Name()] = timeout
		default:
			return st.WithPlugin(p.Name())
		}
	}
	if len(waitFor) == 0 {
		return nil
	}
	return f.waiting.wait(ctx, pod.UID, waitFor)
}

// RunPreBindPlugins runs PreBind; the first status that is not Success
// (an error, or Pending) is returned.
func (f *Framework) RunPreBindPlugins(ctx context.Context, state *CycleState, pod *PodInfo, node string) *Status {
	for _, p := range f.preBind {
		if st := p.PreBind(ctx, state, pod, node); !st.IsSuccess() {
			return st.WithPlugin(p.Name())
		}
	}
	return nil
}

// RunBindPlugins asks the Bind plugins in order until one does not Skip.
func (f *Framework) RunBindPlugins(ctx context.Context, state *CycleState, pod *PodInfo, node string) *Status {
	for _, p := range f.bind {
		st := p.Bind(ctx, state, pod, node)
		if st.Code() != Skip {
			return st.WithPlugin(p.Name())
		}
	}
	return NewStatus(Error, "no Bind plugin bound the pod")
}

// RunPostBindPlugins tells the PostBind plugins.
func (f *Framework) RunPostBindPlugins(ctx context.Context, state *CycleState, pod *PodInfo, node string) {
	for _, p := range f.postBind {
		p.PostBind(ctx, state, pod, node)
	}
}

// skip bookkeeping lives in the CycleState under reserved keys.
const (
	skipFilterKey = "\x00skipFilter"
	skipScoreKey  = "\x00skipScore"
)

func (c *CycleState) skipFilter(name string) { c.addSkip(skipFilterKey, name) }
func (c *CycleState) skipScore(name string)  { c.addSkip(skipScoreKey, name) }

func (c *CycleState) addSkip(key, name string) {
	m, _ := c.data[key].(map[string]bool)
	if m == nil {
		m = map[string]bool{}
		c.data[key] = m
	}
	m[name] = true
}

func (c *CycleState) skippedFilter(name string) bool { return c.skipped(skipFilterKey, name) }
func (c *CycleState) skippedScore(name string) bool  { return c.skipped(skipScoreKey, name) }

func (c *CycleState) skipped(key, name string) bool {
	if c == nil || len(c.data) == 0 {
		return false
	}
	m, _ := c.data[key].(map[string]bool)
	return m[name]
}

// waitingPods are the pods held by Permit plugins, shared by a process's
// profiles.
type waitingPods struct {
	mu   sync.Mutex
	pods map[string]*waitingPod
}

type waitingPod struct {
	mu      sync.Mutex
	pending map[string]bool
	done    chan *Status
}

func (w *waitingPods) get(uid string) WaitingPod {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.pods[uid]; p != nil {
		return p
	}
	return nil
}

func (w *waitingPods) wait(ctx context.Context, uid string, waitFor map[string]time.Duration) *Status {
	p := &waitingPod{pending: map[string]bool{}, done: make(chan *Status, 1)}
	var timeout time.Duration
	for name, d := range waitFor {
		p.pending[name] = true
		if timeout == 0 || d < timeout {
			timeout = d
		}
	}
	w.mu.Lock()
	w.pods[uid] = p
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.pods, uid)
		w.mu.Unlock()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case st := <-p.done:
		return st
	case <-timer.C:
		return NewStatus(Unschedulable, fmt.Sprintf("rejected due to timeout after waiting %v at plugin(s) permit", timeout))
	case <-ctx.Done():
		return AsStatus(ctx.Err())
	}
}

func (p *waitingPod) Allow(plugin string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, plugin)
	if len(p.pending) == 0 {
		select {
		case p.done <- nil:
		default:
		}
	}
}

func (p *waitingPod) Reject(plugin, msg string) {
	select {
	case p.done <- NewStatus(Unschedulable, msg).WithPlugin(plugin):
	default:
	}
}

// withNominated returns node as pod must see it: with the pods that
// preemption nominated there and that are at least as important (other
// than pod itself) counted as if bound, so that a lower-priority pod does
// not take the room made for them. The node itself when there are none.
func withNominated(pod *PodInfo, node *NodeInfo) *NodeInfo {
	if node.NumNominated() == 0 {
		return node
	}
	prio := pod.Pod.GetSpec().GetPriority()
	var sim *NodeInfo
	node.NominatedPods(func(p *PodInfo) {
		if p.UID == pod.UID || p.Pod.GetSpec().GetPriority() < prio {
			return
		}
		if sim == nil {
			sim = node.Clone()
		}
		sim.AddPod(p)
	})
	if sim == nil {
		return node
	}
	return sim
}

// UseFilters makes state.RunFilterPlugins run f's filters, for tests and
// tools that call PostFilter plugins directly (the framework does it
// itself around RunPostFilterPlugins).
func (f *Framework) UseFilters(state *CycleState) { state.filter = f.runFilters }
