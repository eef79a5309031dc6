package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Reasons and messages of a pod's lifecycle, as the kubelet's.
const (
	ReasonPodInitializing    = "PodInitializing"
	ReasonNotInitialized     = "ContainersNotInitialized"
	ReasonDeadlineExceeded   = "DeadlineExceeded"
	messageDeadlineExceeded  = "Pod was active on the node longer than the specified deadline"
	containerRestartAlways   = "Always"
	hookFailedPostStartEvent = "FailedPostStartHook"
	hookFailedPreStopEvent   = "FailedPreStopHook"
)

// podFailure ends a pod as Failed with a reason and message.
type podFailure struct{ reason, message string }

func isSidecar(c *kplanev1.Container) bool { return c.GetRestartPolicy() == containerRestartAlways }

func allContainers(s *kplanev1.PodSpec) []*kplanev1.Container {
	return append(append([]*kplanev1.Container(nil), s.GetInitContainers()...), s.GetContainers()...)
}

func sidecars(s *kplanev1.PodSpec) []*kplanev1.Container {
	var out []*kplanev1.Container
	for _, c := range s.GetInitContainers() {
		if isSidecar(c) {
			out = append(out, c)
		}
	}
	return out
}

// appsFinished: every app container exited and will not be restarted.
func appsFinished(ins []containerInput, policy string) bool {
	for _, in := range ins {
		if in.State.Exit == nil || in.State.Running || in.BackOff || shouldRestart(policy, in.State.Exit) {
			return false
		}
	}
	return len(ins) > 0
}

// syncInitContainers runs the init containers one by one: each regular
// one must exit 0 before the next starts (a failed one is restarted with
// back-off unless the pod's restartPolicy is Never, which fails the pod);
// a sidecar (restartPolicy Always) must have started, and keeps running
// and restarting beside the app. done: all have; failed: the pod failed.
//
// Once the app containers have been started the pod stays initialized,
// as in Kubernetes: a sidecar that stops later does not hold them back.
func (a *Agent) syncInitContainers(ctx context.Context, sc *syncCtx, terminal bool) (ins []containerInput, done, failed bool) {
	for _, c := range sc.pod.GetSpec().GetContainers() {
		if a.rt.State(sc.uid, c.GetName(), sc.now).Created {
			sc.st.initialized = true
		}
	}
	// The fake runtime forgets everything when the agent restarts; the
	// reported status remembers that the app containers ran.
	for _, cs := range sc.pod.GetStatus().GetContainerStatuses() {
		if cs.GetState().GetRunning() != nil || cs.GetState().GetTerminated() != nil || cs.GetLastState().GetTerminated() != nil {
			sc.st.initialized = true
		}
	}
	defer func() {
		if sc.st.initialized {
			done, failed = true, false
		}
		sc.st.initialized = done
	}()
	policy := kplanev1.RestartPolicyOnFailure
	if sc.pod.GetSpec().GetRestartPolicy() == kplanev1.RestartPolicyNever {
		policy = kplanev1.RestartPolicyNever
	}
	done = true
	for _, c := range sc.pod.GetSpec().GetInitContainers() {
		cs := a.rt.State(sc.uid, c.GetName(), sc.now)
		if !done {
			// An earlier one is not through: this one waits, unless it ran
			// already (the agent restarted meanwhile) and is shown as it is.
			ins = append(ins, containerInput{Spec: c, State: cs, Initializing: !cs.Created})
			continue
		}
		if isSidecar(c) {
			in := a.syncContainer(ctx, sc, c, kplanev1.RestartPolicyAlways, terminal)
			ins = append(ins, in)
			if !in.State.Running || in.NotStarted {
				done = false
			}
			continue
		}
		if (cs.Exit != nil && cs.Exit.Code == 0) || sc.st.initialized {
			ins = append(ins, containerInput{Spec: c, State: cs, Ready: true})
			continue
		}
		in := a.syncContainer(ctx, sc, c, policy, terminal)
		ins = append(ins, in)
		done = false
		if e := in.State.Exit; e != nil && !in.State.Running && e.Code != 0 && policy == kplanev1.RestartPolicyNever {
			failed = true
		}
	}
	return ins, done, failed
}

// checkDeadline fails a pod that has been active longer than its
// activeDeadlineSeconds; until then it wakes the pod at the deadline.
func (a *Agent) checkDeadline(ctx context.Context, sc *syncCtx) *podFailure {
	ads := sc.pod.GetSpec().ActiveDeadlineSeconds
	if ads == nil {
		return nil
	}
	deadline := sc.st.startTime.Add(time.Duration(*ads) * time.Second)
	if sc.now.Before(deadline) {
		sc.wake(deadline)
		return nil
	}
	if sc.pod.GetStatus().GetReason() != ReasonDeadlineExceeded {
		a.log.Info("pod exceeded its active deadline", "pod", sc.pod.GetMetadata().GetNamespace()+"/"+sc.pod.GetMetadata().GetName(),
			"active_deadline_seconds", *ads)
		a.event(ctx, sc.pod, record.Warning, ReasonDeadlineExceeded, "%s", messageDeadlineExceeded)
	}
	return &podFailure{reason: ReasonDeadlineExceeded, message: messageDeadlineExceeded}
}

// gracePeriod is the pod's terminationGracePeriodSeconds (default 30).
func gracePeriod(pod *kplanev1.Pod) time.Duration {
	if g := pod.GetSpec().TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// stopContainers stops the running ones of cs for good: preStop hook,
// SIGTERM, SIGKILL after the pod's grace period. They are not restarted.
func (a *Agent) stopContainers(ctx context.Context, sc *syncCtx, cs []*kplanev1.Container) {
	for _, c := range cs {
		state := a.rt.State(sc.uid, c.GetName(), sc.now)
		if !state.Running && !state.Waiting {
			continue
		}
		if k := sc.st.kills[c.GetName()]; k != nil && k.attempt == state.Attempt {
			k.final = true
			a.finishKill(sc.pod, c, k, sc.now, sc.wake)
			continue
		}
		grace := gracePeriod(sc.pod)
		k := &killState{attempt: state.Attempt, deadline: sc.now.Add(grace), final: true}
		put(&sc.st.kills, c.GetName(), k)
		a.log.Info("stopping container", "pod", sc.pod.GetMetadata().GetNamespace()+"/"+sc.pod.GetMetadata().GetName(),
			"container", c.GetName(), "grace_period", grace)
		a.preStop(ctx, sc.pod, c, sc.ip, sc.st, k.deadline)
		if err := a.rt.StopContainer(sc.uid, c.GetName(), grace == 0); err != nil {
			a.log.Warn("could not stop container", "container", c.GetName(), "error", err)
		}
		k.killed = grace == 0
		sc.wake(k.deadline)
	}
}

// finishStop sends SIGKILL to a container being stopped once its grace
// period is over.
func (a *Agent) finishStop(sc *syncCtx, c *kplanev1.Container, cs ContainerState) {
	if k := sc.st.kills[c.GetName()]; k != nil && k.attempt == cs.Attempt {
		a.finishKill(sc.pod, c, k, sc.now, sc.wake)
	}
}

// hookTarget is where a container's hooks and exec probes run.
func (a *Agent) hookTarget(pod *kplanev1.Pod, c *kplanev1.Container, ip string, st *podState) probeTarget {
	dir := a.exec.containerDir(pod.GetMetadata().GetUid(), c.GetName())
	spec := c
	if r := st.resolved[c.GetName()]; r != nil {
		spec = r
	}
	return probeTarget{Container: c, PodIP: ip, Dir: dir, Env: containerEnv(pod, spec, ip, dir)}
}

// runHook runs an exec or httpGet lifecycle handler until ctx ends.
func runHook(ctx context.Context, h *kplanev1.LifecycleHandler, target probeTarget) error {
	switch {
	case h.GetExec() != nil:
		return runExec(ctx, h.GetExec().GetCommand(), target, time.Second)
	case h.GetHttpGet() != nil:
		return httpGet(ctx, h.GetHttpGet(), target)
	}
	return fmt.Errorf("hook has no handler")
}

// postStart runs the container's postStart hook right after it started,
// within the pod's grace period; the container does not count as running
// until it returns. A failed hook kills the container (the restart
// policy then applies), as in Kubernetes. The fake runtime runs no hooks.
func (a *Agent) postStart(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, ip string, st *podState) {
	h := c.GetLifecycle().GetPostStart()
	if h == nil || a.exec == nil {
		return
	}
	hctx, cancel := context.WithTimeout(ctx, gracePeriod(pod))
	defer cancel()
	if err := runHook(hctx, h, a.hookTarget(pod, c, ip, st)); err != nil {
		a.log.Warn("postStart hook failed; killing the container", "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName(),
			"container", c.GetName(), "error", err)
		a.event(ctx, pod, record.Warning, hookFailedPostStartEvent, "PostStartHook failed: %v", err)
		if err := a.rt.StopContainer(pod.GetMetadata().GetUid(), c.GetName(), true); err != nil {
			a.log.Warn("could not kill container", "container", c.GetName(), "error", err)
		}
	}
}

// preStop runs the container's preStop hook before it is sent SIGTERM,
// cut off at the end of the grace period. The fake runtime runs no hooks.
func (a *Agent) preStop(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, ip string, st *podState, deadline time.Time) {
	h := c.GetLifecycle().GetPreStop()
	if h == nil || a.exec == nil {
		return
	}
	hctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := runHook(hctx, h, a.hookTarget(pod, c, ip, st)); err != nil {
		a.log.Warn("preStop hook failed", "pod", pod.GetMetadata().GetNamespace()+"/"+pod.GetMetadata().GetName(),
			"container", c.GetName(), "error", err)
		a.event(ctx, pod, record.Warning, hookFailedPreStopEvent, "PreStopHook failed: %v", err)
	}
}
