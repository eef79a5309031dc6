// Package cronjob is the CronJob controller: it creates a Job for each run
// of a CronJob's schedule (in its time zone), applies the concurrency
// policy (Allow, Forbid, Replace) and the starting deadline, keeps the
// status (active Jobs, lastScheduleTime, lastSuccessfulTime), and deletes
// finished Jobs beyond the history limits. Missed runs after downtime
// start at most one catch-up Job; more than a hundred missed runs are
// reported with a TooManyMissedTimes event.
package cronjob

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Clock is the controller's source of time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Stepped delivers whenever the time jumps, so that every CronJob is
	// looked at again at once; a real clock's channel never delivers (its
	// time passes evenly and reconciles are requeued for the next run).
	Stepped() <-chan struct{}
}

type realClock struct{}

func (realClock) Now() time.Time           { return time.Now() }
func (realClock) Stepped() <-chan struct{} { return nil }

// Option configures the service.
type Option func(*cronJobController)

// WithClock makes the controller read the time from c (tests drive a fake
// clock).
func WithClock(c Clock) Option { return func(r *cronJobController) { r.clock = c } }

type cronJobController struct {
	clock Clock
	// Counters behind /metrics (see setup).
	created, deleted, skipped *prometheus.CounterVec
	api                       *client.Client
	log                       hclog.Logger
	recorder                  *record.Recorder
	ctx                       *app.Context
	cronJobs                  *informer.Informer
	jobs                      *informer.Informer
	// written holds the statuses this controller wrote until the CronJob
	// cache shows them: a reconcile woken before the watch event (by the
	// clock, or by the Job it just created) must still see the run it
	// started, or Forbid would start a second one.
	written *controller.MutationCache
}

// NewService returns cronjobctl: the binary's main runs it with app.Main.
func NewService(opts ...Option) app.Service {
	r := &cronJobController{clock: realClock{}}
	for _, o := range opts {
		o(r)
	}
	return app.Service{
		Name:          "cronjobctl",
		HealthAddr:    ":10262",
		LeaderElected: true,
		Workers:       5,
		Watches: []app.Watch{
			{Kind: kindCronJob},
			{Kind: kindJob, MapToKey: app.OwnerKey(kindCronJob)},
		},
		Setup: r.setup,
		Run:   r.run,
	}
}

func (r *cronJobController) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	r.written = controller.NewMutationCache()
	r.created = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kplane_cronjobctl_jobs_created_total",
		Help: "Jobs created for scheduled runs."}, nil)
	r.deleted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kplane_cronjobctl_jobs_deleted_total",
		Help: "Jobs deleted, by reason: Replace (concurrency policy) or history (beyond the history limits)."}, []string{"reason"})
	r.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kplane_cronjobctl_runs_skipped_total",
		Help: "Due runs not started or reported missed, by event reason: JobAlreadyActive, MissedSchedule, TooManyMissedTimes."}, []string{"reason"})
	for _, m := range []prometheus.Collector{r.created, r.deleted, r.skipped} {
		if err := c.Registry.Register(m); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	r.recorder = record.New(c.Client, "cronjob-controller", c.Identity, c.Logger)
	r.cronJobs = c.Informers.ForKind(kindCronJob)
	r.jobs = c.Informers.ForKind(kindJob)
	return r, nil
}

// run queues every CronJob when the clock jumps.
func (r *cronJobController) run(ctx context.Context, c *app.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock.Stepped():
			for _, o := range r.cronJobs.Store().List() {
				c.Enqueue(o.Key())
			}
		}
	}
}

// Reconcile implements app.Reconciler.
func (r *cronJobController) Reconcile(ctx context.Context, key string) error {
	namespace, name := kplanev1.SplitKey(key)
	obj, ok := r.cronJobs.Store().GetByName(namespace, name)
	if !ok {
		r.written.Forget(key)
		return nil
	}
	obj = r.written.Newest(obj)
	cj := obj.GetCronJob()
	jobs, err := r.children(ctx, cj)
	if err != nil {
		return err
	}
	now := r.clock.Now()
	plan := Decide(cj, jobs, now)
	for _, e := range plan.Events {
		// Counted before it is reported, so whoever sees the Event sees
		// the count too.
		switch e.Reason {
		case "JobAlreadyActive", "MissedSchedule", "TooManyMissedTimes":
			r.skipped.WithLabelValues(e.Reason).Inc()
		}
		r.recorder.Eventf(ctx, obj, e.Type, e.Reason, "%s", e.Message)
	}
	st := plan.Status
	if err := r.deleteJobs(ctx, obj, plan.DeleteActive, "Replace"); err != nil {
		return err
	}
	if plan.Create != nil {
		job, err := r.create(ctx, obj, plan.Create)
		if err != nil {
			return err
		}
		if job != nil {
			st.Active = append(st.Active, JobRef(job))
		}
	}
	if st != nil {
		if err := r.updateStatus(ctx, cj, st); err != nil {
			return err
		}
	}
	if err := r.deleteJobs(ctx, obj, plan.DeleteHistory, "history"); err != nil {
		return err
	}
	if plan.RequeueAfter > 0 {
		return app.RequeueAfter(plan.RequeueAfter)
	}
	return nil
}

// children returns the Jobs cj controls: those in the cache, plus those
// of its active list the cache does not show yet (asked of the apiserver,
// so that a lagging Job cache never drops a running Job from the list).
func (r *cronJobController) children(ctx context.Context, cj *kplanev1.CronJob) ([]*kplanev1.Job, error) {
	uid := cj.GetMetadata().GetUid()
	objs, err := r.jobs.Store().ByIndex(informer.OwnerUIDIndex, uid)
	if err != nil {
		return nil, fmt.Errorf("list jobs of %s: %w", cj.GetMetadata().GetName(), err)
	}
	seen := map[string]bool{}
	var out []*kplanev1.Job
	for _, o := range objs {
		if controller.IsControlledBy(o, uid) {
			out = append(out, o.GetJob())
			seen[o.Meta().GetUid()] = true
		}
	}
	for _, ref := range cj.GetStatus().GetActive() {
		if seen[ref.GetUid()] {
			continue
		}
		j, err := client.Jobs(r.api).Get(ctx, ref.GetNamespace(), ref.GetName())
		switch {
		case client.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("get active job %s: %w", ref.GetName(), err)
		case j.GetMetadata().GetUid() == ref.GetUid():
			out = append(out, j)
		}
	}
	return out, nil
}

// create creates the run's Job. A Job of that name that cj already
// controls is the same run (an earlier attempt whose outcome was lost):
// it is returned as if created.
func (r *cronJobController) create(ctx context.Context, cj *kplanev1.Object, job *kplanev1.Job) (*kplanev1.Job, error) {
	jobs := client.Jobs(r.api)
	created, err := jobs.Create(ctx, job)
	if client.IsAlreadyExists(err) {
		existing, gerr := jobs.Get(ctx, job.GetMetadata().GetNamespace(), job.GetMetadata().GetName())
		if gerr == nil && controller.IsControlledBy(kplanev1.MustWrap(existing), cj.Meta().GetUid()) {
			return existing, nil
		}
	}
	if err != nil {
		r.recorder.Eventf(ctx, cj, record.Warning, "FailedCreate", "Error creating job: %v", err)
		return nil, fmt.Errorf("create job %s: %w", job.GetMetadata().GetName(), err)
	}
	r.created.WithLabelValues().Inc()
	r.log.Info("created job", "cronjob", cj.Key(), "job", created.GetMetadata().GetName())
	r.recorder.Eventf(ctx, cj, record.Normal, "SuccessfulCreate", "Created job %v", created.GetMetadata().GetName())
	return created, nil
}

// deleteJobs deletes jobs (and, in the background, their pods); a Job
// already gone or replaced counts as deleted.
func (r *cronJobController) deleteJobs(ctx context.Context, cj *kplanev1.Object, jobs []*kplanev1.Job, reason string) error {
	for _, j := range jobs {
		if j == nil {
			continue
		}
		_, deleted, err := controller.DeleteIfSameUID(ctx, r.api, kplanev1.MustWrap(j),
			client.DeleteOptions{PropagationPolicy: client.PropagationBackground})
		if err != nil {
			r.recorder.Eventf(ctx, cj, record.Warning, "FailedDelete", "Error deleting job: %v", err)
			return fmt.Errorf("delete job %s: %w", j.GetMetadata().GetName(), err)
		}
		if !deleted {
			continue // gone already: an earlier reconcile's delete, seen late
		}
		r.deleted.WithLabelValues(reason).Inc()
		r.recorder.Eventf(ctx, cj, record.Normal, "SuccessfulDelete", "Deleted job %v", j.GetMetadata().GetName())
		r.log.Info("deleted job", "cronjob", cj.Key(), "job", j.GetMetadata().GetName(), "reason", reason)
	}
	return nil
}

// updateStatus writes st with a compare-and-swap. After a conflict the
// fresh status's lastScheduleTime wins when it is later (another writer
// has moved on), so a run is never recorded twice.
func (r *cronJobController) updateStatus(ctx context.Context, cj *kplanev1.CronJob, st *kplanev1.CronJobStatus) error {
	if statusEqual(cj.GetStatus(), st) {
		return nil
	}
	written, wrote, err := controller.UpdateStatus(ctx, r.api, cj, func(cur *kplanev1.CronJob) *kplanev1.CronJob {
		if statusEqual(cur.GetStatus(), st) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.CronJob)
		ns := proto.Clone(st).(*kplanev1.CronJobStatus)
		if last := cur.GetStatus().GetLastScheduleTime(); last != nil && (ns.LastScheduleTime == nil || last.AsTime().After(ns.LastScheduleTime.AsTime())) {
			ns.LastScheduleTime = last
		}
		next.Status = ns
		return next
	})
	if err != nil {
		return fmt.Errorf("update status of %s/%s: %w", cj.GetMetadata().GetNamespace(), cj.GetMetadata().GetName(), err)
	}
	if wrote {
		r.written.Wrote(kplanev1.MustWrap(written))
	}
	return nil
}
