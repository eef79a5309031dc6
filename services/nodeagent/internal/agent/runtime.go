package agent

import (
	"context"
	"io"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Exit is how one run of a container ended.
type Exit struct {
	Code       int
	Signal     int
	Message    string
	StartedAt  time.Time
	FinishedAt time.Time
	// StartError: the command never ran (bad command, missing binary).
	StartError bool
}

// ContainerState is what a runtime observes about one container of a pod.
// Attempt counts runs: attempt n is the (n+1)th run, so the restart count
// of a container that has run at all is Attempt.
type ContainerState struct {
	// Created: at least one run was started.
	Created bool
	Attempt int
	// Running: the current run is alive.
	Running   bool
	StartedAt time.Time
	// Exit of the current run once it ended (nil while running).
	Exit *Exit
	// Previous is the exit of the run before the current one, if known.
	Previous *Exit
	// Waiting: created but not running yet (e.g. the fake start delay);
	// Reason explains it.
	Waiting bool
	Reason  string
	// Pid of the container process (exec runtime), for logs and tests.
	Pid int
}

// RuntimePod is a pod the runtime holds containers (or state) for.
type RuntimePod struct {
	UID, Namespace, Name, Node string
	// Running: at least one container process is alive.
	Running bool
}

// Key is the pod's "namespace/name".
func (p RuntimePod) Key() string { return p.Namespace + "/" + p.Name }

// Runtime runs containers. Implementations must be safe for concurrent use
// by different pods; calls for one pod are serialised by the agent.
type Runtime interface {
	// Name is "exec" or "fake".
	Name() string
	// PreparePod records the pod (its identity and IP) before the first
	// container starts.
	PreparePod(pod *kplanev1.Pod, podIP string) error
	// StartContainer starts run number attempt of container c.
	StartContainer(ctx context.Context, pod *kplanev1.Pod, c *kplanev1.Container, attempt int, podIP string) error
	// State observes one container.
	State(uid, container string, now time.Time) ContainerState
	// NextChange is when State of the pod may change without a process
	// exiting (fake runtime timers); zero when there is nothing pending.
	NextChange(uid string, now time.Time) time.Time
	// Signal sends SIGTERM (kill=false) or SIGKILL (kill=true) to every
	// container of the pod.
	Signal(uid string, kill bool) error
	// StopContainer sends SIGTERM (kill=false) or SIGKILL (kill=true) to
	// one container of the pod (a failed liveness probe restarts it).
	StopContainer(uid, container string, kill bool) error
	// RemovePod forgets the pod and deletes its files; its containers must
	// have stopped.
	RemovePod(uid string) error
	// Pods lists the pods the runtime knows.
	Pods() []RuntimePod
	// Running reports whether the runtime knows the pod and whether one of
	// its containers runs; RunningPods counts the pods with a running
	// container. Both answer without listing every pod, which at 100,000
	// fake pods matters.
	Running(uid string) (known, running bool)
	RunningPods() int
	// Logs writes the log of the container to w as opts asks: the last
	// opts.TailLines lines (all when negative), then, with opts.Follow,
	// new lines until ctx ends or the container stops.
	Logs(ctx context.Context, pod *kplanev1.Pod, container string, opts LogOptions, w io.Writer) error
	// Healthy reports why the runtime cannot run pods (nil = fine).
	Healthy() error
}
