package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/stack"
)

// TestCronJobController runs bin/cronjobctl against bin/apiserver on the
// real clock: a CronJob whose last run is three minutes old gets one
// catch-up Job at once (the missed-run path after downtime), the next Job
// at the next minute, and, with a successful history of 1, the first Job
// is deleted once the second has completed. The test plays the Job
// controller by writing the Jobs' status.
func TestCronJobController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := startStack(ctx, t, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Controllers: []string{"cronjobctl"},
		Runtime: stack.RuntimeFake, Nodes: 1,
	})
	c := dialStack(ctx, t, s)
	cronJobs, jobs := client.CronJobs(c), client.Jobs(c)

	cj, err := cronJobs.Create(ctx, &kplanev1.CronJob{
		Metadata: &kplanev1.ObjectMeta{Name: "minutely", Namespace: "default"},
		Spec: &kplanev1.CronJobSpec{
			Schedule: "* * * * *", TimeZone: proto.String("UTC"), SuccessfulJobsHistoryLimit: proto.Int32(1),
			JobTemplate: &kplanev1.JobTemplateSpec{Spec: &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{
				Spec: &kplanev1.PodSpec{RestartPolicy: kplanev1.RestartPolicyNever,
					Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"}}}}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// As if cronjobctl had been down for three minutes.
	cj.Status = &kplanev1.CronJobStatus{LastScheduleTime: timestamppb.New(time.Now().Add(-3 * time.Minute).Truncate(time.Minute))}
	if _, err := cronJobs.UpdateStatus(ctx, cj); err != nil {
		t.Fatal(err)
	}

	ownJobs := func() []*kplanev1.Job {
		list, _, err := jobs.List(ctx, "default", client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*kplanev1.Job
		for _, j := range list {
			if ref := j.GetMetadata().GetOwnerReferences(); len(ref) == 1 && ref[0].GetUid() == cj.GetMetadata().GetUid() {
				out = append(out, j)
			}
		}
		return out
	}
	complete := func(j *kplanev1.Job) {
		t.Helper()
		now := timestamppb.Now()
		j.Status = &kplanev1.JobStatus{StartTime: j.GetMetadata().GetCreationTimestamp(), CompletionTime: now, Succeeded: 1,
			Conditions: []*kplanev1.Condition{{Type: "Complete", Status: kplanev1.ConditionTrue, LastTransitionTime: now}}}
		if _, err := jobs.UpdateStatus(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	var first *kplanev1.Job
	testutil.Eventually(t, 30*time.Second, "the catch-up job", func() bool {
		js := ownJobs()
		if len(js) > 0 {
			first = js[0]
		}
		return len(js) == 1
	})
	ts, err := time.Parse(time.RFC3339, first.GetMetadata().GetAnnotations()[kplanev1.AnnotationCronJobScheduledTimestamp])
	if err != nil {
		t.Fatalf("scheduled-timestamp annotation: %v", err)
	}
	if want := fmt.Sprintf("minutely-%d", ts.Unix()/60); first.GetMetadata().GetName() != want {
		t.Errorf("job name %s, want %s", first.GetMetadata().GetName(), want)
	}
	if since := time.Since(ts); since < 0 || since > 2*time.Minute {
		t.Errorf("catch-up run for %v, not the latest missed minute", ts)
	}
	complete(first)

	// The next run, at the next minute, and the history trimmed to one.
	var second *kplanev1.Job
	testutil.Eventually(t, 90*time.Second, "the next minute's job", func() bool {
		for _, j := range ownJobs() {
			if j.GetMetadata().GetName() != first.GetMetadata().GetName() {
				second = j
			}
		}
		return second != nil
	})
	testutil.Eventually(t, 30*time.Second, "the second job in status.active", func() bool {
		got, err := cronJobs.Get(ctx, "default", "minutely")
		if err != nil {
			t.Fatal(err)
		}
		a := got.GetStatus().GetActive()
		return len(a) == 1 && a[0].GetName() == second.GetMetadata().GetName() && got.GetStatus().GetLastSuccessfulTime() != nil
	})
	complete(second)
	testutil.Eventually(t, 30*time.Second, "history of one successful job", func() bool {
		js := ownJobs()
		return len(js) == 1 && js[0].GetMetadata().GetName() == second.GetMetadata().GetName()
	})
}
