package agent

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Annotations that drive the fake runtime.
const (
	AnnotationFakeStartDelay = "kplane.io/fake-start-delay"
	AnnotationFakeExitAfter  = "kplane.io/fake-exit-after"
	AnnotationFakeExitCode   = "kplane.io/fake-exit-code"
)

// fakeRuntime runs no processes: containers are timestamps. A container
// is created, running after the pod's start delay, and exits after the
// exit delay with the annotated code. Nothing polls: the agent asks
// NextChange and requeues the pod for that moment, so thousands of pods
// cost nothing while they wait.
type fakeRuntime struct {
	mu   sync.Mutex
	pods map[string]*fakePod
}

type fakePod struct {
	meta       RuntimePod
	startDelay time.Duration
	exitAfter  time.Duration // 0 = runs forever
	exitCode   int
	// containers: a pod has a few, so a slice searched by name costs less
	// than a map per pod (100,000 fake pods).
	containers []*fakeContainer
}

// container returns the pod's container name, nil if it never started.
func (p *fakePod) container(name string) *fakeContainer {
	for _, c := range p.containers {
		if c.name == name {
			return c
		}
	}
	return nil
}

type fakeContainer struct {
	name string
	// initExit: a regular init container, which completes (exit 0) as
	// soon as it has started.
	initExit bool
	attempt  int
	created  time.Time
	prev     *Exit
	stopped  *Exit // set by Signal
}

func newFakeRuntime() *fakeRuntime { return &fakeRuntime{pods: map[string]*fakePod{}} }

func (r *fakeRuntime) Name() string { return "fake" }

// fakeTimings parses the pod's annotations; bad values count as absent.
func fakeTimings(pod *kplanev1.Pod) (startDelay, exitAfter time.Duration, code int) {
	ann := pod.GetMetadata().GetAnnotations()
	startDelay, _ = time.ParseDuration(ann[AnnotationFakeStartDelay])
	exitAfter, _ = time.ParseDuration(ann[AnnotationFakeExitAfter])
	code, _ = strconv.Atoi(ann[AnnotationFakeExitCode])
	return max(startDelay, 0), max(exitAfter, 0), code
}

// PreparePod implements Runtime.
func (r *fakeRuntime) PreparePod(pod *kplanev1.Pod, _ string) error {
	md := pod.GetMetadata()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pods[md.GetUid()]; ok {
		return nil
	}
	sd, ea, code := fakeTimings(pod)
	r.pods[md.GetUid()] = &fakePod{
		meta:       RuntimePod{UID: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), Node: pod.GetSpec().GetNodeName()},
		startDelay: sd, exitAfter: ea, exitCode: code,
	}
	return nil
}

// StartContainer implements Runtime. The first run of a container that
// the pod's status already shows running (the agent restarted) continues
// from that start time instead of starting over.
func (r *fakeRuntime) StartContainer(_ context.Context, pod *kplanev1.Pod, c *kplanev1.Container, attempt int, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[pod.GetMetadata().GetUid()]
	if !ok {
		return fmt.Errorf("pod %s not prepared", pod.GetMetadata().GetUid())
	}
	now := time.Now()
	fc := &fakeContainer{name: c.GetName(), attempt: attempt, created: now}
	for _, ic := range pod.GetSpec().GetInitContainers() {
		if ic.GetName() == c.GetName() && !isSidecar(ic) {
			fc.initExit = true
		}
	}
	old := p.container(c.GetName())
	if old != nil {
		fc.prev = r.stateLocked(p, old, now).Exit
	} else {
		for _, cs := range pod.GetStatus().GetContainerStatuses() {
			if cs.GetName() == c.GetName() && cs.GetState().GetRunning().GetStartedAt() != nil {
				fc.created = cs.GetState().GetRunning().GetStartedAt().AsTime().Add(-p.startDelay)
				fc.attempt = int(cs.GetRestartCount())
			}
		}
	}
	if i := slices.Index(p.containers, old); old != nil {
		p.containers[i] = fc
	} else {
		p.containers = append(p.containers, fc)
	}
	return nil
}

// State implements Runtime.
func (r *fakeRuntime) State(uid, name string, now time.Time) ContainerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return ContainerState{}
	}
	c := p.container(name)
	if c == nil {
		return ContainerState{}
	}
	return r.stateLocked(p, c, now)
}

func (r *fakeRuntime) stateLocked(p *fakePod, c *fakeContainer, now time.Time) ContainerState {
	if now.Before(c.created) {
		// The caller's clock was read before it started the container (a
		// sync reads it once): the state is the one at creation, so a
		// container without a start delay is running at once and its pod
		// goes to Running in one status write.
		now = c.created
	}
	st := ContainerState{Created: true, Attempt: c.attempt, Previous: c.prev}
	started := c.created.Add(p.startDelay)
	switch {
	case c.stopped != nil:
		st.Exit = c.stopped
		st.StartedAt = started
	case now.Before(started):
		st.Waiting, st.Reason = true, ReasonContainerCreating
	case c.initExit:
		st.StartedAt = started
		st.Exit = &Exit{StartedAt: started, FinishedAt: started}
	case p.exitAfter > 0 && !now.Before(started.Add(p.exitAfter)):
		st.StartedAt = started
		st.Exit = &Exit{Code: p.exitCode, StartedAt: started, FinishedAt: started.Add(p.exitAfter)}
	default:
		st.Running, st.StartedAt = true, started
	}
	return st
}

// NextChange implements Runtime: the earliest start or exit still ahead.
func (r *fakeRuntime) NextChange(uid string, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return time.Time{}
	}
	var next time.Time
	for _, c := range p.containers {
		if c.stopped != nil {
			continue
		}
		started := c.created.Add(p.startDelay)
		var t time.Time
		switch {
		case started.After(now) && p.startDelay > 0: // as of creation at the latest (stateLocked)
			t = started
		case c.initExit:
			continue
		case p.exitAfter > 0 && started.Add(p.exitAfter).After(now):
			t = started.Add(p.exitAfter)
		default:
			continue
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Signal implements Runtime: fake containers stop at once (143 for
// SIGTERM, 137 for SIGKILL).
func (r *fakeRuntime) Signal(uid string, kill bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return nil
	}
	now := time.Now()
	sig := 15
	if kill {
		sig = 9
	}
	for _, c := range p.containers {
		if st := r.stateLocked(p, c, now); st.Running || st.Waiting {
			c.stopped = &Exit{Code: 128 + sig, Signal: sig, StartedAt: st.StartedAt, FinishedAt: now}
		}
	}
	return nil
}

// StopContainer implements Runtime: the container stops at once.
func (r *fakeRuntime) StopContainer(uid, name string, kill bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return nil
	}
	c := p.container(name)
	if c == nil {
		return nil
	}
	now := time.Now()
	sig := 15
	if kill {
		sig = 9
	}
	if st := r.stateLocked(p, c, now); st.Running || st.Waiting {
		c.stopped = &Exit{Code: 128 + sig, Signal: sig, StartedAt: st.StartedAt, FinishedAt: now}
	}
	return nil
}

// RemovePod implements Runtime.
func (r *fakeRuntime) RemovePod(uid string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, uid)
	return nil
}

// Pods implements Runtime.
func (r *fakeRuntime) Pods() []RuntimePod {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := make([]RuntimePod, 0, len(r.pods))
	for _, p := range r.pods {
		rp := p.meta
		rp.Running = r.runningLocked(p, now)
		out = append(out, rp)
	}
	return out
}

// Running implements Runtime.
func (r *fakeRuntime) Running(uid string) (known, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return false, false
	}
	return true, r.runningLocked(p, time.Now())
}

// RunningPods implements Runtime.
func (r *fakeRuntime) RunningPods() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	n := 0
	for _, p := range r.pods {
		if r.runningLocked(p, now) {
			n++
		}
	}
	return n
}

func (r *fakeRuntime) runningLocked(p *fakePod, now time.Time) bool {
	for _, c := range p.containers {
		if r.stateLocked(p, c, now).Running {
			return true
		}
	}
	return false
}

// Logs implements Runtime with one synthetic line.
func (r *fakeRuntime) Logs(_ context.Context, pod *kplanev1.Pod, container string, opts LogOptions, w io.Writer) error {
	if opts.Previous {
		// The fake keeps no log, so no earlier run's either.
		return fmt.Errorf("previous terminated container %q in pod %q not found", container, pod.GetMetadata().GetName())
	}
	if opts.TailLines == 0 {
		return nil
	}
	// The one line was "written" when the container started.
	started := r.State(pod.GetMetadata().GetUid(), container, time.Now()).StartedAt
	if !opts.Since.IsZero() && started.Before(opts.Since) {
		return nil
	}
	if opts.Timestamps {
		if _, err := io.WriteString(w, started.UTC().Format(rfc3339NanoFixed)+" "); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "fake runtime: container %s of pod %s/%s on node %s (no process runs)\n",
		container, pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), pod.GetSpec().GetNodeName())
	return err
}

// Healthy implements Runtime.
func (r *fakeRuntime) Healthy() error { return nil }
