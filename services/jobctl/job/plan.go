package job

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/controller"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Backoff is the delay between a failed pod and its replacement: Base
// after the first failure, doubling per further failure, at most Cap.
type Backoff struct {
	Base, Cap time.Duration
}

// Delay is the wait after n consecutive failures (0 for none).
func (b Backoff) Delay(n int) time.Duration {
	if n <= 0 || b.Base <= 0 {
		return 0
	}
	d := b.Base
	for i := 1; i < n && d < b.Cap; i++ {
		d *= 2
	}
	return min(d, b.Cap)
}

// Input is what one decision is made from.
type Input struct {
	// Job as cached (or as just written).
	Job *kplanev1.Job
	// Pods the Job controls (controller reference with its uid), in any order.
	Pods []*kplanev1.Pod
	// Now is the decision's clock.
	Now time.Time
	// Manage is false while earlier creates or deletes are not yet in the
	// cache (expectations): the plan then accounts but creates and deletes nothing.
	Manage  bool
	Backoff Backoff
}

// Plan is what one reconcile does for a Job.
type Plan struct {
	// Status is the status the Job should have now.
	Status *kplanev1.JobStatus
	// RemoveFinalizers are finished pods whose outcome Input.Job's status
	// already records: their job-tracking finalizer can go.
	RemoveFinalizers []*kplanev1.Pod
	// Create is the number of NonIndexed pods to create; CreateIndexes the
	// indexes of the Indexed pods to create, with their per-index failure
	// counts in IndexFailures.
	Create        int
	CreateIndexes []int
	IndexFailures map[int]int
	// Delete are active pods to delete (suspend, excess, finishing).
	Delete []*kplanev1.Pod
	// RecheckAfter, when positive, is when the decision changes with time
	// alone (back-off end, deadline, TTL).
	RecheckAfter time.Duration
	// Expired is true when a finished Job's ttlSecondsAfterFinished has passed.
	Expired bool
}

// outcome is what a pod's end means for the job.
type outcome int

const (
	running   outcome = iota
	succeeded         // counts as a completion
	failed            // counts as a failure (subject to the failure policy)
	dropped           // deleted while the job is suspended: counts as nothing
)

func podOutcome(p *kplanev1.Pod, suspended bool) outcome {
	switch p.GetStatus().GetPhase() {
	case kplanev1.PodSucceeded:
		return succeeded
	case kplanev1.PodFailed:
		return failed
	}
	if p.GetMetadata().GetDeletionTimestamp() != nil {
		// A pod being deleted will not finish its work: a failure, as in
		// Kubernetes, unless the job is suspended (suspension stops work
		// on purpose).
		if suspended {
			return dropped
		}
		return failed
	}
	return running
}

func hasFinalizer(p *kplanev1.Pod) bool {
	return slices.Contains(p.GetMetadata().GetFinalizers(), kplanev1.FinalizerJobTracking)
}

// podIndex is an Indexed Job pod's completion index, -1 when it has none
// or an invalid one.
func podIndex(p *kplanev1.Pod, completions int) int {
	v, ok := p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i >= completions {
		return -1
	}
	return i
}

func priorIndexFailures(p *kplanev1.Pod) int {
	n, err := strconv.Atoi(p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobIndexFailureCount])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// IsFinished reports whether the Job has its final Complete or Failed condition.
func IsFinished(st *kplanev1.JobStatus) (string, *kplanev1.Condition) {
	for _, t := range []string{kplanev1.JobComplete, kplanev1.JobFailed} {
		if c := apiutil.FindCondition(st.GetConditions(), t); c.GetStatus() == kplanev1.ConditionTrue {
			return t, c
		}
	}
	return "", nil
}

// target is the interim condition of a job about to finish.
func target(st *kplanev1.JobStatus) *kplanev1.Condition {
	for _, t := range []string{kplanev1.JobFailureTarget, kplanev1.JobSuccessCriteriaMet} {
		if c := apiutil.FindCondition(st.GetConditions(), t); c.GetStatus() == kplanev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func isIndexed(j *kplanev1.Job) bool {
	return j.GetSpec().GetCompletionMode() == kplanev1.JobCompletionIndexed
}

func replacementPolicy(j *kplanev1.Job) string {
	if p := j.GetSpec().PodReplacementPolicy; p != nil {
		return *p
	}
	if j.GetSpec().GetPodFailurePolicy() != nil {
		return kplanev1.JobPodReplacementFailed
	}
	return kplanev1.JobPodReplacementTerminatingOrFailed
}

// Decide computes the Job's status and the writes that bring it closer to
// done. It is exact by construction: a finished pod's outcome is first
// recorded in the status (its uid in uncountedTerminatedPods, or its index
// in completedIndexes), and only once Input.Job's status shows that
// record is its finalizer removed (RemoveFinalizers); a uid in
// uncountedTerminatedPods whose pod has no finalizer any more (or is gone)
// moves into succeeded or failed. Every step is a set operation on uids or
// indexes, so running it again on the same or a newer state adds nothing
// twice.
func Decide(in Input) (Plan, error) {
	j := in.Job
	spec := j.GetSpec()
	var p Plan
	old := j.GetStatus()
	if old == nil {
		old = &kplanev1.JobStatus{}
	}
	st := proto.Clone(old).(*kplanev1.JobStatus)
	p.Status = st
	if st.UncountedTerminatedPods == nil {
		st.UncountedTerminatedPods = &kplanev1.UncountedTerminatedPods{}
	}
	indexed := isIndexed(j)
	completions := -1
	if spec.Completions != nil {
		completions = int(spec.GetCompletions())
	}
	completed, err := parseIndexes(old.GetCompletedIndexes(), max(completions, 0))
	if err != nil && indexed {
		return p, fmt.Errorf("status.completedIndexes: %w", err)
	}
	failedIdx, err := parseIndexes(old.GetFailedIndexes(), max(completions, 0))
	if err != nil && indexed {
		return p, fmt.Errorf("status.failedIndexes: %w", err)
	}
	suspended := spec.GetSuspend()
	finishedType, _ := IsFinished(old)
	tgt := target(old)
	perIndex := indexed && spec.BackoffLimitPerIndex != nil

	recSucc := toSet(old.GetUncountedTerminatedPods().GetSucceeded())
	recFail := toSet(old.GetUncountedTerminatedPods().GetFailed())
	newSucc, newFail := map[string]bool{}, map[string]bool{}
	present := map[string]*kplanev1.Pod{}

	var (
		active, terminating []*kplanev1.Pod
		ready               int32
		restarts            int32
		failJob             *kplanev1.Condition
		// Back-off: the newest failure and the failures since the newest success.
		lastFail, lastSucc time.Time
		failTimes          []time.Time
		indexFailures      = map[int]int{}
	)
	for _, pod := range in.Pods {
		uid := pod.GetMetadata().GetUid()
		present[uid] = pod
		oc := podOutcome(pod, suspended)
		idx := -1
		if indexed {
			idx = podIndex(pod, completions)
		}
		switch oc {
		case running:
			active = append(active, pod)
			if apiutil.IsPodReady(pod) {
				ready++
			}
			if spec.GetTemplate().GetSpec().GetRestartPolicy() == kplanev1.RestartPolicyOnFailure {
				for _, cs := range pod.GetStatus().GetContainerStatuses() {
					restarts += cs.GetRestartCount()
				}
			}
			continue
		case succeeded:
			if t := finishTime(pod); t.After(lastSucc) {
				lastSucc = t
			}
		case failed, dropped:
			if pod.GetMetadata().GetDeletionTimestamp() != nil && pod.GetStatus().GetPhase() != kplanev1.PodFailed {
				terminating = append(terminating, pod)
			}
		}
		var action string
		if oc == failed {
			action = failureAction(spec.GetPodFailurePolicy(), pod)
			if action != kplanev1.PodFailurePolicyActionIgnore {
				t := finishTime(pod)
				failTimes = append(failTimes, t)
				if t.After(lastFail) {
					lastFail = t
				}
				if idx >= 0 {
					indexFailures[idx] = max(indexFailures[idx], priorIndexFailures(pod)+1)
					if action == kplanev1.PodFailurePolicyActionFailIndex && perIndex {
						indexFailures[idx] = max(indexFailures[idx], int(spec.GetBackoffLimitPerIndex())+1)
					}
				}
			}
		}
		if !hasFinalizer(pod) {
			continue // counted already (or never tracked)
		}
		switch oc {
		case succeeded:
			switch {
			case recSucc[uid]:
				p.RemoveFinalizers = append(p.RemoveFinalizers, pod)
			case indexed && idx >= 0 && completed.has(idx):
				p.RemoveFinalizers = append(p.RemoveFinalizers, pod)
			case indexed && idx >= 0:
				newSucc[uid] = true // recorded through its index below
			case indexed:
				// An index we never gave out: nothing to count.
				p.RemoveFinalizers = append(p.RemoveFinalizers, pod)
			default:
				newSucc[uid] = true
			}
		case failed:
			switch {
			case recFail[uid]:
				p.RemoveFinalizers = append(p.RemoveFinalizers, pod)
			case action == kplanev1.PodFailurePolicyActionIgnore:
				p.RemoveFinalizers = append(p.RemoveFinalizers, pod)
			default:
				newFail[uid] = true
				if action == kplanev1.PodFailurePolicyActionFailJob && failJob == nil {
					failJob = &kplanev1.Condition{Type: kplanev1.JobFailureTarget, Status: kplanev1.ConditionTrue,
						Reason: kplanev1.JobReasonPodFailurePolicy,
						Message: fmt.Sprintf("Pod %s/%s has condition or exit code matching a FailJob rule of the pod failure policy",
							pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName())}
				}
			}
		case dropped:
			p.RemoveFinalizers = append(p.RemoveFinalizers, pod)
		}
	}

	// Record: new outcomes into the uncounted lists (or completedIndexes).
	unc := st.UncountedTerminatedPods
	for _, uid := range sortedKeys(newSucc) {
		if indexed {
			completed.add(podIndex(present[uid], completions))
		} else {
			unc.Succeeded = append(unc.Succeeded, uid)
		}
	}
	unc.Failed = append(unc.Failed, sortedKeys(newFail)...)
	// Move: recorded uids whose pod has lost its finalizer (or is gone).
	counted := func(uid string) bool {
		pod, ok := present[uid]
		return !ok || !hasFinalizer(pod)
	}
	var movedSucc, movedFail int32
	unc.Succeeded = slices.DeleteFunc(unc.Succeeded, func(uid string) bool {
		if recSucc[uid] && counted(uid) {
			movedSucc++
			return true
		}
		return false
	})
	unc.Failed = slices.DeleteFunc(unc.Failed, func(uid string) bool {
		if recFail[uid] && counted(uid) {
			movedFail++
			return true
		}
		return false
	})
	st.Failed += movedFail
	if indexed {
		st.CompletedIndexes = completed.String()
		st.Succeeded = int32(len(completed))
	} else {
		st.Succeeded += movedSucc
	}
	if len(unc.Succeeded) == 0 && len(unc.Failed) == 0 {
		st.UncountedTerminatedPods = nil
	}
	if perIndex {
		for idx, n := range indexFailures {
			if n > int(spec.GetBackoffLimitPerIndex()) && !completed.has(idx) {
				failedIdx.add(idx)
			}
		}
		st.FailedIndexes = proto.String(failedIdx.String())
	}
	succTotal := int(st.Succeeded) + len(st.GetUncountedTerminatedPods().GetSucceeded())
	failTotal := int(st.Failed) + len(st.GetUncountedTerminatedPods().GetFailed())

	st.Active = int32(len(active))
	st.Ready = proto.Int32(ready)
	st.Terminating = proto.Int32(int32(len(terminating)))
	now := timestamppb.New(in.Now)

	if finishedType != "" {
		// Done: account for stragglers, stop anything still running.
		if in.Manage {
			p.Delete = active
		}
		p.RecheckAfter, p.Expired = ttlLeft(j, old, in.Now)
		return p, nil
	}

	// Suspension.
	suspCond := apiutil.FindCondition(old.GetConditions(), kplanev1.JobSuspended)
	if tgt == nil {
		switch {
		case suspended && suspCond.GetStatus() != kplanev1.ConditionTrue:
			st.Conditions = apiutil.SetStatusCondition(st.Conditions, &kplanev1.Condition{Type: kplanev1.JobSuspended,
				Status: kplanev1.ConditionTrue, Reason: kplanev1.JobReasonSuspended, Message: "Job suspended", LastTransitionTime: now})
		case !suspended && suspCond.GetStatus() == kplanev1.ConditionTrue:
			st.Conditions = apiutil.SetStatusCondition(st.Conditions, &kplanev1.Condition{Type: kplanev1.JobSuspended,
				Status: kplanev1.ConditionFalse, Reason: kplanev1.JobReasonResumed, Message: "Job resumed", LastTransitionTime: now})
			// The active deadline counts from the resume.
			st.StartTime = now
		}
	}
	if !suspended && st.StartTime == nil {
		st.StartTime = now
	}

	// Is the job going to finish? The first reason found wins, as the
	// interim condition records it.
	if tgt == nil {
		tgt = finishReason(in, st, failJob, completed, failedIdx, succTotal, failTotal+int(restarts), len(active))
		if tgt != nil {
			tgt.LastTransitionTime = now
			st.Conditions = apiutil.SetStatusCondition(st.Conditions, tgt)
		}
	}
	if tgt != nil {
		if in.Manage {
			p.Delete = active
		}
		// The final condition once nothing runs and every outcome is counted.
		if len(active) == 0 && len(terminating) == 0 && st.GetUncountedTerminatedPods() == nil && len(p.RemoveFinalizers) == 0 && len(newSucc)+len(newFail) == 0 {
			final := kplanev1.JobComplete
			if tgt.GetType() == kplanev1.JobFailureTarget {
				final = kplanev1.JobFailed
			} else {
				st.CompletionTime = now
			}
			st.Conditions = apiutil.SetStatusCondition(st.Conditions, &kplanev1.Condition{Type: final, Status: kplanev1.ConditionTrue,
				Reason: tgt.GetReason(), Message: tgt.GetMessage(), LastTransitionTime: now})
			p.RecheckAfter, p.Expired = ttlLeft(j, st, in.Now)
		}
		return p, nil
	}

	if suspended {
		if in.Manage {
			p.Delete = active
		}
		return p, nil
	}
	if ads := spec.ActiveDeadlineSeconds; ads != nil {
		left := st.GetStartTime().AsTime().Add(time.Duration(*ads) * time.Second).Sub(in.Now)
		p.RecheckAfter = left
	}
	if !in.Manage || j.GetMetadata().GetDeletionTimestamp() != nil {
		return p, nil
	}

	// Back-off before replacing failed pods.
	if !lastFail.IsZero() {
		n := 0
		for _, t := range failTimes {
			if t.After(lastSucc) {
				n++
			}
		}
		if wait := lastFail.Add(in.Backoff.Delay(n)).Sub(in.Now); wait > 0 {
			p.RecheckAfter = minPositive(p.RecheckAfter, wait)
			if indexed {
				p.Delete = excessIndexed(active, completions, completed, failedIdx, int(spec.GetParallelism()))
			}
			return p, nil
		}
	}
	busy := len(active)
	if replacementPolicy(j) == kplanev1.JobPodReplacementFailed {
		busy += len(terminating)
	}
	parallelism := int(spec.GetParallelism())
	if indexed {
		p.Delete = excessIndexed(active, completions, completed, failedIdx, parallelism)
		taken := map[int]bool{}
		for _, pod := range active {
			taken[podIndex(pod, completions)] = true
		}
		if replacementPolicy(j) == kplanev1.JobPodReplacementFailed {
			for _, pod := range terminating {
				taken[podIndex(pod, completions)] = true
			}
		}
		room := parallelism - (busy - len(p.Delete))
		for i := 0; i < completions && room > 0; i++ {
			if completed.has(i) || failedIdx.has(i) || taken[i] {
				continue
			}
			p.CreateIndexes = append(p.CreateIndexes, i)
			room--
		}
		if len(p.CreateIndexes) > 0 {
			p.IndexFailures = map[int]int{}
			for _, i := range p.CreateIndexes {
				if n := indexFailures[i]; n > 0 {
					p.IndexFailures[i] = n
				}
			}
		}
		return p, nil
	}
	want := parallelism
	switch {
	case spec.Completions != nil:
		want = min(parallelism, completions-succTotal)
	case succTotal > 0:
		// A work queue with a success: no new pods, the rest finish.
		return p, nil
	}
	want = max(want, 0)
	switch {
	case busy < want:
		p.Create = want - busy
	case len(active) > want:
		p.Delete = victims(active, len(active)-want)
	}
	return p, nil
}

// finishReason returns the interim condition when the job has met a
// reason to finish, nil otherwise.
func finishReason(in Input, st *kplanev1.JobStatus, failJob *kplanev1.Condition, completed, failedIdx indexSet,
	succTotal, failures, active int) *kplanev1.Condition {
	spec := in.Job.GetSpec()
	fail := func(reason, msg string) *kplanev1.Condition {
		return &kplanev1.Condition{Type: kplanev1.JobFailureTarget, Status: kplanev1.ConditionTrue, Reason: reason, Message: msg}
	}
	succeed := func(reason, msg string) *kplanev1.Condition {
		return &kplanev1.Condition{Type: kplanev1.JobSuccessCriteriaMet, Status: kplanev1.ConditionTrue, Reason: reason, Message: msg}
	}
	indexed := isIndexed(in.Job)
	completions := int(spec.GetCompletions())
	perIndex := indexed && spec.BackoffLimitPerIndex != nil
	switch {
	case failJob != nil:
		return failJob
	case perIndex && spec.MaxFailedIndexes != nil && len(failedIdx) > int(spec.GetMaxFailedIndexes()):
		return fail(kplanev1.JobReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes")
	case !perIndex && failures > int(spec.GetBackoffLimit()):
		return fail(kplanev1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	}
	if ads := spec.ActiveDeadlineSeconds; ads != nil && !spec.GetSuspend() && st.GetStartTime() != nil &&
		!in.Now.Before(st.GetStartTime().AsTime().Add(time.Duration(*ads)*time.Second)) {
		return fail(kplanev1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")
	}
	if indexed && successPolicyMet(spec.GetSuccessPolicy(), completed, completions) {
		return succeed(kplanev1.JobReasonSuccessPolicy, "Matched rules at index(es) of the success policy")
	}
	switch {
	case indexed && len(completed)+len(failedIdx) >= completions && len(failedIdx) > 0:
		return fail(kplanev1.JobReasonFailedIndexes, "Job has failed indexes")
	case indexed && len(completed) >= completions:
		return succeed(kplanev1.JobReasonCompletionsReached, "Reached expected number of succeeded pods")
	case !indexed && spec.Completions != nil && succTotal >= completions:
		return succeed(kplanev1.JobReasonCompletionsReached, "Reached expected number of succeeded pods")
	case !indexed && spec.Completions == nil && succTotal > 0 && active == 0:
		return succeed(kplanev1.JobReasonCompletionsReached, "Reached expected number of succeeded pods")
	}
	return nil
}

// successPolicyMet reports whether any rule of the policy holds: its
// listed indexes (all of [0, completions) when unset) include at least
// succeededCount completed ones (all of them when unset).
func successPolicyMet(sp *kplanev1.SuccessPolicy, completed indexSet, completions int) bool {
	for _, r := range sp.GetRules() {
		var set indexSet
		if r.SucceededIndexes != nil {
			s, err := parseIndexes(r.GetSucceededIndexes(), completions)
			if err != nil {
				continue // validation rejects it; a bad rule never matches
			}
			set = s
		} else {
			set = indexSet{}
			for i := range completions {
				set.add(i)
			}
		}
		n := 0
		for i := range set {
			if completed.has(i) {
				n++
			}
		}
		need := len(set)
		if r.SucceededCount != nil {
			need = int(r.GetSucceededCount())
		}
		if n >= need && need > 0 {
			return true
		}
	}
	return false
}

// failureAction is the action of the first pod failure policy rule that
// matches the failed pod, Count when none does.
func failureAction(fp *kplanev1.PodFailurePolicy, pod *kplanev1.Pod) string {
	for _, r := range fp.GetRules() {
		if ec := r.GetOnExitCodes(); ec != nil {
			if exitCodesMatch(ec, pod) {
				return r.GetAction()
			}
			continue
		}
		for _, pat := range r.GetOnPodConditions() {
			want := pat.GetStatus()
			if want == "" {
				want = kplanev1.ConditionTrue
			}
			if c := apiutil.FindCondition(pod.GetStatus().GetConditions(), pat.GetType()); c != nil && c.GetStatus() == want {
				return r.GetAction()
			}
		}
	}
	return kplanev1.PodFailurePolicyActionCount
}

// exitCodesMatch: some terminated container (of the named one, if given)
// exited with a code the operator accepts; exit code 0 never matches, as
// in Kubernetes.
func exitCodesMatch(ec *kplanev1.PodFailurePolicyOnExitCodesRequirement, pod *kplanev1.Pod) bool {
	for _, cs := range pod.GetStatus().GetContainerStatuses() {
		if ec.ContainerName != nil && cs.GetName() != ec.GetContainerName() {
			continue
		}
		term := cs.GetState().GetTerminated()
		if term == nil || term.GetExitCode() == 0 {
			continue
		}
		in := slices.Contains(ec.GetValues(), term.GetExitCode())
		if (ec.GetOperator() == kplanev1.PodFailurePolicyOpIn) == in {
			return true
		}
	}
	return false
}

// finishTime is when the pod's last container ended (the newest ready
// transition or creation when no container says).
func finishTime(p *kplanev1.Pod) time.Time {
	var t time.Time
	for _, cs := range p.GetStatus().GetContainerStatuses() {
		if f := cs.GetState().GetTerminated().GetFinishedAt(); f != nil && f.AsTime().After(t) {
			t = f.AsTime()
		}
	}
	if t.IsZero() {
		if c := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodReady); c.GetLastTransitionTime() != nil {
			t = c.GetLastTransitionTime().AsTime()
		}
	}
	if dt := p.GetMetadata().GetDeletionTimestamp(); t.IsZero() && dt != nil {
		t = dt.AsTime()
	}
	return t
}

// excessIndexed are the active pods of an Indexed job to delete: those
// without a valid index, for an index already done, duplicates of an
// index (the newer go), and beyond parallelism (the highest indexes go).
func excessIndexed(active []*kplanev1.Pod, completions int, completed, failedIdx indexSet, parallelism int) []*kplanev1.Pod {
	byIndex := map[int][]*kplanev1.Pod{}
	var out []*kplanev1.Pod
	for _, pod := range active {
		i := podIndex(pod, completions)
		if i < 0 || completed.has(i) || failedIdx.has(i) {
			out = append(out, pod)
			continue
		}
		byIndex[i] = append(byIndex[i], pod)
	}
	keep := make([]int, 0, len(byIndex))
	for i, pods := range byIndex {
		sort.SliceStable(pods, func(a, b int) bool { return olderFirst(pods[a], pods[b]) })
		out = append(out, pods[1:]...)
		keep = append(keep, i)
	}
	slices.Sort(keep)
	for len(keep) > parallelism {
		out = append(out, byIndex[keep[len(keep)-1]][0])
		keep = keep[:len(keep)-1]
	}
	return out
}

func olderFirst(a, b *kplanev1.Pod) bool {
	ta, tb := a.GetMetadata().GetCreationTimestamp().AsTime(), b.GetMetadata().GetCreationTimestamp().AsTime()
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.GetMetadata().GetName() < b.GetMetadata().GetName()
}

// victims picks n active pods to delete: unscheduled, then not running,
// then not ready, then the newest.
func victims(active []*kplanev1.Pod, n int) []*kplanev1.Pod {
	ranked := slices.Clone(active)
	rank := func(p *kplanev1.Pod) int {
		switch {
		case p.GetSpec().GetNodeName() == "":
			return 0
		case p.GetStatus().GetPhase() != kplanev1.PodRunning:
			return 1
		case !apiutil.IsPodReady(p):
			return 2
		}
		return 3
	}
	sort.SliceStable(ranked, func(i, j int) bool {
		if ri, rj := rank(ranked[i]), rank(ranked[j]); ri != rj {
			return ri < rj
		}
		return olderFirst(ranked[j], ranked[i])
	})
	return ranked[:min(n, len(ranked))]
}

// ttlLeft is how long a finished job has left before ttlSecondsAfterFinished
// deletes it, and whether that time has come.
func ttlLeft(j *kplanev1.Job, st *kplanev1.JobStatus, now time.Time) (time.Duration, bool) {
	ttl := j.GetSpec().TtlSecondsAfterFinished
	_, c := IsFinished(st)
	if ttl == nil || c == nil {
		return 0, false
	}
	finished := c.GetLastTransitionTime().AsTime()
	if st.GetCompletionTime() != nil {
		finished = st.GetCompletionTime().AsTime()
	}
	left := finished.Add(time.Duration(*ttl) * time.Second).Sub(now)
	if left <= 0 {
		return 0, true
	}
	return left, false
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	return min(a, b)
}

func toSet(s []string) map[string]bool {
	out := make(map[string]bool, len(s))
	for _, v := range s {
		out[v] = true
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// NewPod is the pod the job creates: the template, controlled by the job,
// carrying the job-tracking finalizer; for an Indexed job index >= 0 names
// it <job>-<index>-<suffix> and gives it its index as annotation, label,
// environment variable and hostname.
func NewPod(j *kplanev1.Job, index, priorFailures int) *kplanev1.Pod {
	t := j.GetSpec().GetTemplate()
	meta := &kplanev1.ObjectMeta{
		Namespace:    j.GetMetadata().GetNamespace(),
		GenerateName: j.GetMetadata().GetName() + "-",
		Labels:       map[string]string{},
		Annotations:  map[string]string{},
		Finalizers:   []string{kplanev1.FinalizerJobTracking},
		OwnerReferences: []*kplanev1.OwnerReference{{
			ApiVersion: kplanev1.APIVersion("Job"), Kind: "Job", Name: j.GetMetadata().GetName(), Uid: j.GetMetadata().GetUid(),
			Controller: true, BlockOwnerDeletion: true,
		}},
	}
	for k, v := range t.GetMetadata().GetLabels() {
		meta.Labels[k] = v
	}
	for k, v := range t.GetMetadata().GetAnnotations() {
		meta.Annotations[k] = v
	}
	spec := proto.Clone(t.GetSpec()).(*kplanev1.PodSpec)
	if index >= 0 {
		is := strconv.Itoa(index)
		meta.GenerateName = fmt.Sprintf("%s-%d-", j.GetMetadata().GetName(), index)
		meta.Annotations[kplanev1.AnnotationJobCompletionIndex] = is
		meta.Labels[kplanev1.AnnotationJobCompletionIndex] = is
		if perIndex := j.GetSpec().BackoffLimitPerIndex != nil; perIndex {
			meta.Annotations[kplanev1.AnnotationJobIndexFailureCount] = strconv.Itoa(priorFailures)
		}
		if spec.Hostname == "" {
			spec.Hostname = fmt.Sprintf("%s-%d", j.GetMetadata().GetName(), index)
		}
		for _, c := range spec.GetContainers() {
			c.Env = append(c.Env, &kplanev1.EnvVar{Name: kplanev1.EnvJobCompletionIndex, Value: is})
		}
		for _, c := range spec.GetInitContainers() {
			c.Env = append(c.Env, &kplanev1.EnvVar{Name: kplanev1.EnvJobCompletionIndex, Value: is})
		}
	}
	return &kplanev1.Pod{Metadata: meta, Spec: spec}
}

// jobOf reads the Job out of an object.
func jobOf(o *kplanev1.Object) (*kplanev1.Job, bool) {
	j := o.GetJob()
	return j, j != nil
}

// controlledBy filters the pods controlled by the job's uid.
func controlledBy(uid string, objs []*kplanev1.Object) []*kplanev1.Pod {
	var out []*kplanev1.Pod
	for _, o := range objs {
		if controller.IsControlledBy(o, uid) {
			out = append(out, o.GetPod())
		}
	}
	return out
}
