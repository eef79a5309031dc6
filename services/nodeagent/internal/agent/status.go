package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apijson"
)

// Reasons the agent reports, as the kubelet spells them.
const (
	ReasonContainerCreating = "ContainerCreating"
	ReasonCrashLoopBackOff  = "CrashLoopBackOff"
	ReasonCreateError       = "CreateContainerError"
	ReasonCompleted         = "Completed"
	ReasonError             = "Error"
	ReasonStartError        = "StartError"
	ReasonContainersNotRdy  = "ContainersNotReady"
	ReasonPodCompleted      = "PodCompleted"
)

// Backoff is Kubernetes' crash-loop back-off: the first restart is
// immediate, then Base, doubling up to Max. A run that lasted ResetAfter
// or longer starts the sequence over, as the kubelet forgets a back-off
// entry that was quiet for twice the maximum.
type Backoff struct {
	Base, Max, ResetAfter time.Duration
}

// DefaultBackoff is the kubelet's: 10s doubling to 5m, reset after 10m.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 5 * time.Minute, ResetAfter: 10 * time.Minute}

// Delay is the wait before the next run of a container that has been
// restarted `restarts` times and whose last run lasted `lastRun`.
func (b Backoff) Delay(restarts int, lastRun time.Duration) time.Duration {
	if restarts <= 0 || (b.ResetAfter > 0 && lastRun >= b.ResetAfter) {
		return 0
	}
	d := b.Base
	for i := 1; i < restarts; i++ {
		d *= 2
		if d >= b.Max {
			return b.Max
		}
	}
	if d > b.Max {
		return b.Max
	}
	return d
}

// shouldRestart applies the restart policy to a container that exited.
func shouldRestart(policy string, e *Exit) bool {
	switch policy {
	case kplanev1.RestartPolicyNever:
		return false
	case kplanev1.RestartPolicyOnFailure:
		return e.Code != 0
	default:
		return true
	}
}

// containerInput is everything the status of one container depends on.
type containerInput struct {
	Spec  *kplanev1.Container
	State ContainerState
	// Ready is the readiness probe's verdict (true when there is no probe).
	Ready bool
	// NotStarted: the startup probe has not succeeded yet.
	NotStarted bool
	// Initializing: the container waits for the init containers before it.
	Initializing bool
	// BackOff: the container exited, will be restarted, and waits until
	// RestartAt; BackOffDelay is the delay it waits for the message.
	BackOff      bool
	BackOffDelay time.Duration
	// CreateError is why the last start failed before any process ran;
	// CreateReason is CreateContainerError or CreateContainerConfigError.
	CreateError, CreateReason string
}

// containerStatus renders one container's status.
func containerStatus(in containerInput, runtimeName, podUID, podName string) *kplanev1.ContainerStatus {
	st := in.State
	cs := &kplanev1.ContainerStatus{
		Name:         in.Spec.GetName(),
		Image:        in.Spec.GetImage(),
		RestartCount: int32(st.Attempt),
		Started:      proto.Bool(st.Running && !in.NotStarted),
		Ready:        st.Running && !in.NotStarted && in.Ready,
	}
	if st.Created {
		cs.ContainerId = fmt.Sprintf("%s://%s/%s/%d", runtimeName, podUID, in.Spec.GetName(), st.Attempt)
	}
	switch {
	case in.Initializing:
		cs.State = waiting(ReasonPodInitializing, "")
	case !st.Running && in.CreateError != "":
		reason := in.CreateReason
		if reason == "" {
			reason = ReasonCreateError
		}
		cs.State = waiting(reason, in.CreateError)
		if st.Exit != nil {
			cs.LastState = terminated(st.Exit, cs.ContainerId)
		}
	case !st.Created || st.Waiting:
		cs.State = waiting(ReasonContainerCreating, "")
		if st.Previous != nil {
			cs.LastState = terminated(st.Previous, cs.ContainerId)
		}
	case st.Running:
		cs.State = &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: ts(st.StartedAt)}}
		if st.Previous != nil {
			cs.LastState = terminated(st.Previous, "")
		}
	case st.Exit != nil && in.BackOff:
		cs.State = waiting(ReasonCrashLoopBackOff, fmt.Sprintf("back-off %s restarting failed container=%s pod=%s",
			in.BackOffDelay, in.Spec.GetName(), podName))
		cs.LastState = terminated(st.Exit, cs.ContainerId)
	case st.Exit != nil:
		cs.State = terminated(st.Exit, cs.ContainerId)
		if st.Previous != nil {
			cs.LastState = terminated(st.Previous, "")
		}
	default:
		cs.State = waiting(ReasonContainerCreating, "")
	}
	if cs.LastState == nil {
		cs.LastState = &kplanev1.ContainerState{}
	}
	return cs
}

func waiting(reason, msg string) *kplanev1.ContainerState {
	return &kplanev1.ContainerState{Waiting: &kplanev1.ContainerStateWaiting{Reason: reason, Message: msg}}
}

func terminated(e *Exit, id string) *kplanev1.ContainerState {
	reason := ReasonError
	switch {
	case e.StartError:
		reason = ReasonStartError
	case e.Code == 0:
		reason = ReasonCompleted
	}
	return &kplanev1.ContainerState{Terminated: &kplanev1.ContainerStateTerminated{
		ExitCode: int32(e.Code), Signal: int32(e.Signal), Reason: reason, Message: e.Message,
		StartedAt: ts(e.StartedAt), FinishedAt: ts(e.FinishedAt), ContainerId: id,
	}}
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// podPhase derives the phase from the container statuses with the
// kubelet's rules: any container that never ran keeps the pod Pending; a
// running one makes it Running; when all have stopped, the restart policy
// decides between Running (will restart), Succeeded and Failed. A
// container waiting to restart counts as stopped.
func podPhase(policy string, statuses []*kplanev1.ContainerStatus) string {
	var pending, running, stopped, succeeded int
	for _, cs := range statuses {
		switch s := cs.GetState(); {
		case s.GetRunning() != nil:
			running++
		case s.GetTerminated() != nil:
			stopped++
			if s.GetTerminated().GetExitCode() == 0 {
				succeeded++
			}
		case cs.GetLastState().GetTerminated() != nil:
			stopped++
		default:
			pending++
		}
	}
	switch {
	case len(statuses) == 0 || pending > 0:
		return kplanev1.PodPending
	case running > 0:
		return kplanev1.PodRunning
	case policy == kplanev1.RestartPolicyAlways:
		return kplanev1.PodRunning
	case stopped == succeeded:
		return kplanev1.PodSucceeded
	case policy == kplanev1.RestartPolicyNever:
		return kplanev1.PodFailed
	default: // OnFailure: failed containers restart
		return kplanev1.PodRunning
	}
}

// statusInput is everything a pod's status depends on.
type statusInput struct {
	Pod            *kplanev1.Pod
	Containers     []containerInput
	InitContainers []containerInput
	// InitPending: an init container has not completed (or, a sidecar,
	// started) yet; InitFailed: one failed under restartPolicy Never.
	InitPending, InitFailed bool
	// Failure fails the pod (activeDeadlineSeconds).
	Failure   *podFailure
	Runtime   string
	PodIP     string
	HostIP    string
	StartTime time.Time
	Now       time.Time
}

// buildStatus computes the pod's status from what the runtime observed,
// keeping from the current status what did not change (transition times,
// the QoS class, conditions owned by others), so that an unchanged pod
// yields a status equal to the stored one and nothing is written.
func buildStatus(in statusInput) *kplanev1.PodStatus {
	old := in.Pod.GetStatus()
	policy := in.Pod.GetSpec().GetRestartPolicy()
	uid, name := in.Pod.GetMetadata().GetUid(), in.Pod.GetMetadata().GetName()
	st := &kplanev1.PodStatus{
		HostIp:            in.HostIP,
		PodIp:             in.PodIP,
		StartTime:         ts(in.StartTime),
		QosClass:          old.GetQosClass(),
		NominatedNodeName: old.GetNominatedNodeName(),
		Reason:            old.GetReason(),
		Message:           old.GetMessage(),
	}
	// The plural forms, as the kubelet writes them (the apiserver would
	// fill them anyway; written here, the status compares equal to the
	// stored one).
	if in.HostIP != "" {
		st.HostIps = []*kplanev1.HostIP{{Ip: in.HostIP}}
	}
	if in.PodIP != "" {
		st.PodIps = []*kplanev1.PodIP{{Ip: in.PodIP}}
	}
	var notReady, notInit []string
	sidecarRunning := false
	for _, c := range in.InitContainers {
		cs := containerStatus(c, in.Runtime, uid, name)
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
		if isSidecar(c.Spec) {
			// A sidecar's readiness counts toward the pod's, as in Kubernetes.
			if !cs.Ready {
				notReady = append(notReady, cs.Name)
			}
			sidecarRunning = sidecarRunning || cs.GetState().GetRunning() != nil
			if !cs.GetStarted() {
				notInit = append(notInit, cs.Name)
			}
		} else if cs.GetState().GetTerminated().GetExitCode() != 0 || cs.GetState().GetTerminated() == nil {
			notInit = append(notInit, cs.Name)
		}
	}
	if !in.InitPending {
		notInit = nil
	}
	for _, c := range in.Containers {
		cs := containerStatus(c, in.Runtime, uid, name)
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		if !cs.Ready {
			notReady = append(notReady, cs.Name)
		}
	}
	switch {
	case in.InitFailed:
		st.Phase = kplanev1.PodFailed
	case in.InitPending:
		st.Phase = kplanev1.PodPending
	default:
		st.Phase = podPhase(policy, st.ContainerStatuses)
		if apiutil.IsTerminalPhase(st.Phase) && sidecarRunning {
			st.Phase = kplanev1.PodRunning // done once its sidecars have stopped too
		}
	}
	if f := in.Failure; f != nil {
		st.Phase, st.Reason, st.Message = kplanev1.PodFailed, f.reason, f.message
	}
	if p := old.GetPhase(); apiutil.IsTerminalPhase(p) {
		st.Phase = p // terminal phases are final
	}

	ready := &kplanev1.Condition{Type: kplanev1.ContainersReady, Status: kplanev1.ConditionTrue}
	switch {
	case apiutil.IsTerminalPhase(st.Phase):
		ready.Status, ready.Reason = kplanev1.ConditionFalse, ReasonPodCompleted
	case len(notReady) > 0:
		sort.Strings(notReady)
		ready.Status, ready.Reason = kplanev1.ConditionFalse, ReasonContainersNotRdy
		ready.Message = "containers with unready status: [" + strings.Join(notReady, " ") + "]"
	}
	podReady := proto.Clone(ready).(*kplanev1.Condition)
	podReady.Type = kplanev1.PodReady
	initialized := &kplanev1.Condition{Type: kplanev1.PodInitialized, Status: kplanev1.ConditionTrue}
	if len(notInit) > 0 {
		initialized.Status, initialized.Reason = kplanev1.ConditionFalse, ReasonNotInitialized
		initialized.Message = "containers with incomplete status: [" + strings.Join(notInit, " ") + "]"
	}
	owned := []*kplanev1.Condition{
		initialized,
		podReady,
		ready,
		{Type: kplanev1.PodScheduled, Status: kplanev1.ConditionTrue},
	}
	st.Conditions = mergeConditions(old.GetConditions(), owned, in.Now)
	// The apiserver keeps timestamps to the second; so does the status
	// compared with the stored one, or every sync would look like a change.
	apijson.TruncateTimes(st)
	return st
}

// mergeConditions returns old with each owned condition set in it (see
// apiutil.SetStatusCondition): its transition time is now unless its
// status did not change; conditions of other types stay.
func mergeConditions(old, owned []*kplanev1.Condition, now time.Time) []*kplanev1.Condition {
	out := old
	for _, c := range owned {
		c.LastTransitionTime = timestamppb.New(now)
		out = apiutil.SetStatusCondition(out, c)
	}
	return out
}

// statusEqual reports whether writing next over cur would change nothing.
func statusEqual(cur, next *kplanev1.PodStatus) bool {
	return proto.Equal(cur, next)
}
