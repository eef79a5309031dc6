package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The workload's Jobs: one runs at a time, alternating an Indexed Job of
// jobCompletions completions and a NonIndexed one, each with pods that
// succeed after a moment (the fake runtime's exit annotations; a short
// sleep under the exec runtime). backoffLimit is large: pods deleted by
// node eviction count as failures and must not fail the Job.
const (
	jobCompletions = 200
	jobParallelism = 10
	jobPodRuntime  = 200 * time.Millisecond
)

func (w *workload) job(seq int) *kplanev1.Object {
	mode := kplanev1.JobCompletionIndexed
	if seq%2 == 1 {
		mode = kplanev1.JobCompletionNonIndexed
	}
	return kplanev1.MustWrap(&kplanev1.Job{
		Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("chaos-job-%d", seq), Namespace: w.ns, Labels: map[string]string{labelChaos: "true"}},
		Spec: &kplanev1.JobSpec{
			Completions: proto.Int32(jobCompletions), Parallelism: proto.Int32(jobParallelism),
			CompletionMode: mode, BackoffLimit: proto.Int32(100000),
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{labelChaos: "true"}, Annotations: map[string]string{
					"kplane.io/fake-exit-after": jobPodRuntime.String(), "kplane.io/fake-exit-code": "0"}},
				Spec: &kplanev1.PodSpec{
					RestartPolicy:                 kplanev1.RestartPolicyNever,
					Containers:                    []*kplanev1.Container{{Name: "work", Image: "busybox", Command: []string{"sleep", "0.2"}}},
					TerminationGracePeriodSeconds: proto.Int64(1),
				},
			},
		},
	})
}

// jobStep starts the next Job once the current one has finished (or, after
// a create with an unknown outcome, exists).
func (w *workload) jobStep(ctx context.Context) {
	if w.jobSeq > 0 {
		cctx, cancel := w.call(ctx)
		resp, err := w.api.Get(cctx, &kplanev1.GetRequest{Kind: "Job", Namespace: w.ns, Name: fmt.Sprintf("chaos-job-%d", w.jobSeq-1)})
		cancel()
		if err != nil || !jobFinished(resp.GetObject().GetJob()) {
			return // still running, or unknown (a failed create is retried below)
		}
	}
	cctx, cancel := w.call(ctx)
	defer cancel()
	w.writes.Add(1)
	_, err := w.api.Create(cctx, &kplanev1.CreateRequest{Object: w.job(w.jobSeq)})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		w.failures.Add(1)
		return // the next step tries the same name again
	}
	// AlreadyExists: an earlier create whose outcome was unknown made it.
	w.jobSeq++
	w.jobs.Add(1)
}

func jobFinished(j *kplanev1.Job) bool {
	for _, c := range j.GetStatus().GetConditions() {
		if (c.GetType() == kplanev1.JobComplete || c.GetType() == kplanev1.JobFailed) && c.GetStatus() == kplanev1.ConditionTrue {
			return true
		}
	}
	return false
}

// checkJobs: every Job has finished Complete, and its counts equal its
// pods' outcomes: nothing is left uncounted or carrying the tracking
// finalizer; succeeded equals the Succeeded pods (Indexed: the distinct
// indexes with a Succeeded pod, no index twice, completedIndexes that
// set); failed is at least the Failed pods still present (a pod deleted
// early was counted failed and may be gone).
func checkJobs(jobs []*kplanev1.Job, pods []*kplanev1.Pod) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	byJob := map[string][]*kplanev1.Pod{}
	for _, p := range pods {
		for _, r := range p.GetMetadata().GetOwnerReferences() {
			if r.GetController() && r.GetKind() == "Job" {
				byJob[r.GetUid()] = append(byJob[r.GetUid()], p)
			}
		}
	}
	for _, j := range jobs {
		name, st := j.GetMetadata().GetName(), j.GetStatus()
		complete := false
		for _, c := range st.GetConditions() {
			if c.GetStatus() != kplanev1.ConditionTrue {
				continue
			}
			switch c.GetType() {
			case kplanev1.JobComplete:
				complete = true
			case kplanev1.JobFailed:
				add("job %s failed: %s: %s", name, c.GetReason(), c.GetMessage())
			}
		}
		if !complete {
			add("job %s has not completed (%d/%d succeeded, %d active)", name, st.GetSucceeded(), j.GetSpec().GetCompletions(), st.GetActive())
			continue
		}
		if u := st.GetUncountedTerminatedPods(); len(u.GetSucceeded())+len(u.GetFailed()) > 0 {
			add("job %s finished with uncounted pods %v", name, u)
		}
		succeededPods, failedPods := 0, 0
		perIndex := map[int]int{}
		for _, p := range byJob[j.GetMetadata().GetUid()] {
			for _, f := range p.GetMetadata().GetFinalizers() {
				if f == kplanev1.FinalizerJobTracking {
					add("pod %s of finished job %s keeps the job-tracking finalizer", p.GetMetadata().GetName(), name)
				}
			}
			switch p.GetStatus().GetPhase() {
			case kplanev1.PodSucceeded:
				succeededPods++
				if i, err := strconv.Atoi(p.GetMetadata().GetAnnotations()[kplanev1.AnnotationJobCompletionIndex]); err == nil {
					perIndex[i]++
				}
			case kplanev1.PodFailed:
				failedPods++
			}
		}
		want := int(j.GetSpec().GetCompletions())
		if j.GetSpec().GetCompletionMode() == kplanev1.JobCompletionIndexed {
			var twice []int
			for i, n := range perIndex {
				if n > 1 {
					twice = append(twice, i)
				}
			}
			sort.Ints(twice)
			if len(twice) > 0 {
				add("job %s: indexes %v succeeded more than once", name, twice)
			}
			if len(perIndex) != want || int(st.GetSucceeded()) != want || st.GetCompletedIndexes() != fmt.Sprintf("0-%d", want-1) {
				add("job %s: succeeded %d, completedIndexes %q, %d distinct indexes succeeded; want %d", name, st.GetSucceeded(), st.GetCompletedIndexes(), len(perIndex), want)
			}
		} else if int(st.GetSucceeded()) != succeededPods || succeededPods != want {
			add("job %s: succeeded %d, %d Succeeded pods, completions %d", name, st.GetSucceeded(), succeededPods, want)
		}
		if int(st.GetFailed()) < failedPods {
			add("job %s: failed %d, but %d pods Failed", name, st.GetFailed(), failedPods)
		}
	}
	return out
}
