// Package job is the Job controller: it creates the pods a Job's work
// needs, counts every finished pod exactly once through the
// batch.kubernetes.io/job-tracking finalizer, and finishes the Job
// (Complete or Failed) as Kubernetes 1.31+ does.
package job

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const kindJob = "Job"

// The pod failure back-off, as in Kubernetes: 10 s after the first
// failure, doubling, at most 6 minutes (--backoff-scale scales both).
const (
	defaultBackoffBase = 10 * time.Second
	defaultBackoffCap  = 6 * time.Minute
)

// finalizerWorkers bounds the concurrent finalizer removals of one reconcile.
const finalizerWorkers = 64

// defaultBatchPeriod gathers the pod events of a Job into one reconcile
// (and one status write), as Kubernetes' syncJobBatchPeriod does: pods of
// a parallel Job change status by the hundred.
const defaultBatchPeriod = 100 * time.Millisecond

type jobController struct {
	backoffScale float64
	batchPeriod  time.Duration

	api      *client.Client
	log      hclog.Logger
	recorder *record.Recorder
	ctx      *app.Context
	pods     *informer.Informer
	jobs     *informer.Informer
	exp      *controller.Expectations
	control  *controller.ObjectControl
	backoff  Backoff
	now      func() time.Time

	finalizerRemovals atomic.Int64
}

// NewService returns jobctl: the binary's main runs it with app.Main.
func NewService() app.Service { return newJobController().service() }

func newJobController() *jobController {
	return &jobController{backoffScale: 1, batchPeriod: defaultBatchPeriod, exp: controller.NewExpectations(0), now: time.Now}
}

// service describes the binary. RequireCatchUp: a new leader must see
// pods at least as new as the Job statuses it reads, or a pod whose
// outcome was already moved into a counter could look uncounted and be
// counted again.
func (r *jobController) service() app.Service {
	return app.Service{
		Name:           "jobctl",
		HealthAddr:     ":10261",
		LeaderElected:  true,
		RequireCatchUp: true,
		Workers:        5,
		Watches:        []app.Watch{{Kind: kindJob}},
		AddFlags: func(fs *flag.FlagSet) {
			fs.Float64Var(&r.backoffScale, "backoff-scale", 1,
				"multiplies the failed-pod back-off (10s doubling, capped at 6m); 0 turns it off (for tests)")
			fs.DurationVar(&r.batchPeriod, "sync-batch-period", defaultBatchPeriod,
				"a Job is reconciled at most this long after a change of one of its pods, so that one reconcile handles the pod changes of that period; 0 reconciles at once")
		},
		Setup: r.setup,
	}
}

func (r *jobController) setup(c *app.Context) (app.Reconciler, error) {
	if r.backoffScale < 0 {
		return nil, fmt.Errorf("--backoff-scale must not be negative, not %v", r.backoffScale)
	}
	if r.batchPeriod < 0 {
		return nil, fmt.Errorf("--sync-batch-period must not be negative, not %v", r.batchPeriod)
	}
	r.backoff = Backoff{
		Base: time.Duration(float64(defaultBackoffBase) * r.backoffScale),
		Cap:  time.Duration(float64(defaultBackoffCap) * r.backoffScale),
	}
	r.api, r.log, r.ctx = c.Client, c.Logger, c
	r.recorder = record.New(c.Client, "job-controller", c.Identity, c.Logger)
	r.control = &controller.ObjectControl{API: c.Client, Expectations: r.exp, OwnerKey: jobKeyOf}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_jobctl_pod_create_calls_total", Help: "Pod create calls made, successful or not.", Value: &r.control.Counts.Creates},
		app.Counter{Name: "kplane_jobctl_pod_create_failures_total", Help: "Pod create calls that failed.", Value: &r.control.Counts.CreateFailures},
		app.Counter{Name: "kplane_jobctl_pod_delete_calls_total", Help: "Pod delete calls made, successful or not.", Value: &r.control.Counts.Deletes},
		app.Counter{Name: "kplane_jobctl_finalizer_removals_total", Help: "job-tracking finalizers removed from pods.", Value: &r.finalizerRemovals},
	); err != nil {
		return nil, err
	}
	r.pods = c.Informers.ForKind("Pod")
	r.jobs = c.Informers.ForKind(kindJob)
	// Expectations first, then the Job (see docs/writing-a-controller.md).
	r.pods.AddEventHandler(r.control.Handler(podJobKeys, func(key string) { r.ctx.EnqueueAfter(key, r.batchPeriod) }, nil))
	r.jobs.AddEventHandler(informer.Handler{OnDelete: func(obj any) {
		if o, ok := informer.ObjectOf(obj); ok {
			r.exp.Delete(o.Key())
		}
	}})
	return r, nil
}

// jobKeyOf is the key of the Job controlling pod.
func jobKeyOf(pod *kplanev1.Object) (string, bool) {
	ref := controller.ControllerRef(pod.Meta())
	if ref == nil || ref.GetKind() != kindJob {
		return "", false
	}
	return kplanev1.MetaKey(pod.Meta().GetNamespace(), ref.GetName()), true
}

// podJobKeys maps a pod to the Job controlling it, if any.
func podJobKeys(pod *kplanev1.Object) []string {
	if key, ok := jobKeyOf(pod); ok {
		return []string{key}
	}
	return nil
}

// Reconcile implements app.Reconciler.
func (r *jobController) Reconcile(ctx context.Context, key string) error {
	namespace, name := kplanev1.SplitKey(key)
	obj, ok := r.jobs.Store().GetByName(namespace, name)
	if !ok {
		r.exp.Delete(key)
		return r.releaseOrphans(ctx, namespace, name)
	}
	j, ok := jobOf(obj)
	if !ok {
		return nil
	}
	manage, err := r.control.SatisfiedAt(ctx, key, r.pods)
	if err != nil {
		return err
	}
	owned, err := r.pods.Store().ByIndex(informer.OwnerUIDIndex, j.GetMetadata().GetUid())
	if err != nil {
		return fmt.Errorf("pods of job %s: %w", key, err)
	}
	pods := controlledBy(j.GetMetadata().GetUid(), owned)
	if j.GetMetadata().GetDeletionTimestamp() != nil {
		// Being deleted (foreground or with finalizers): its pods go with
		// it, and their outcomes no longer matter.
		return r.removeFinalizers(ctx, withFinalizer(pods))
	}
	in := Input{Job: j, Pods: pods, Now: r.now(), Manage: manage, Backoff: r.backoff}
	plan, err := Decide(in)
	if err != nil {
		r.recorder.Eventf(ctx, obj, record.Warning, "InvalidStatus", "%v", err)
		return nil // retrying cannot fix it; a change of the Job will requeue
	}
	if !proto.Equal(plan.Status, j.GetStatus()) {
		written, err := r.updateStatus(ctx, j, in)
		if err != nil {
			return err
		}
		if written == nil {
			return nil // gone or replaced
		}
		r.announce(ctx, j, written)
		in.Job = written
		if plan, err = Decide(in); err != nil {
			return err
		}
	}
	// Finalizer removals and pod creates or deletes are independent (the
	// plan counted the recorded outcomes already): run them side by side,
	// the slow-start batches of the creates would otherwise wait for every
	// removal.
	var manageErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		switch {
		case len(plan.Delete) > 0:
			manageErr = r.deletePods(ctx, key, in.Job, plan.Delete)
		case plan.Create > 0:
			manageErr = r.createPods(ctx, key, in.Job, plan.Create, func(int) int { return -1 }, nil)
		case len(plan.CreateIndexes) > 0:
			manageErr = r.createPods(ctx, key, in.Job, len(plan.CreateIndexes),
				func(i int) int { return plan.CreateIndexes[i] }, plan.IndexFailures)
		}
	})
	finErr := r.removeFinalizers(ctx, plan.RemoveFinalizers)
	wg.Wait()
	if err := errors.Join(finErr, manageErr); err != nil {
		return err
	}
	if plan.Expired {
		return r.deleteExpired(ctx, in.Job)
	}
	if plan.RecheckAfter > 0 {
		return app.RequeueAfter(plan.RecheckAfter)
	}
	return nil
}

// updateStatus writes the decided status with compare-and-swap; after a
// conflict it decides again on the reread Job, so an outcome recorded by
// an earlier write is never recorded twice.
func (r *jobController) updateStatus(ctx context.Context, j *kplanev1.Job, in Input) (*kplanev1.Job, error) {
	var decideErr error
	out, _, err := controller.UpdateStatus(ctx, r.api, j, func(cur *kplanev1.Job) *kplanev1.Job {
		in.Job = cur
		p, err := Decide(in)
		if err != nil {
			decideErr = err
			return nil
		}
		if proto.Equal(p.Status, cur.GetStatus()) {
			return nil
		}
		next := proto.Clone(cur).(*kplanev1.Job)
		next.Status = p.Status
		return next
	})
	if err == nil {
		err = decideErr
	}
	if err != nil {
		return nil, fmt.Errorf("update status of job %s: %w", kplanev1.MetaKey(j.GetMetadata().GetNamespace(), j.GetMetadata().GetName()), err)
	}
	return out, nil
}

// announce records an Event for each condition the write turned True.
func (r *jobController) announce(ctx context.Context, before, after *kplanev1.Job) {
	obj := kplanev1.MustWrap(after)
	for _, c := range after.GetStatus().GetConditions() {
		if c.GetStatus() != kplanev1.ConditionTrue {
			continue
		}
		if old := findCond(before.GetStatus().GetConditions(), c.GetType()); old != nil && old.GetStatus() == kplanev1.ConditionTrue {
			continue
		}
		switch c.GetType() {
		case kplanev1.JobComplete:
			r.recorder.Eventf(ctx, obj, record.Normal, "Completed", "Job completed")
			r.log.Info("job complete", "job", obj.Key(), "succeeded", after.GetStatus().GetSucceeded(), "failed", after.GetStatus().GetFailed())
		case kplanev1.JobFailed:
			r.recorder.Eventf(ctx, obj, record.Warning, c.GetReason(), "%s", c.GetMessage())
			r.log.Info("job failed", "job", obj.Key(), "reason", c.GetReason(), "succeeded", after.GetStatus().GetSucceeded(), "failed", after.GetStatus().GetFailed())
		case kplanev1.JobSuspended:
			r.recorder.Eventf(ctx, obj, record.Normal, "Suspended", "Job suspended")
		}
	}
	if findCond(before.GetStatus().GetConditions(), kplanev1.JobSuspended).GetStatus() == kplanev1.ConditionTrue &&
		findCond(after.GetStatus().GetConditions(), kplanev1.JobSuspended).GetStatus() == kplanev1.ConditionFalse {
		r.recorder.Eventf(ctx, obj, record.Normal, "Resumed", "Job resumed")
	}
}

func findCond(conds []*kplanev1.Condition, typ string) *kplanev1.Condition {
	for _, c := range conds {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// createPods creates n pods; indexOf(i) is the i-th pod's completion
// index (-1 for NonIndexed).
func (r *jobController) createPods(ctx context.Context, key string, j *kplanev1.Job, n int, indexOf func(int) int, failures map[int]int) error {
	var next atomic.Int64
	ok, err := r.control.Create(ctx, key, n, func() (*kplanev1.Object, error) {
		idx := indexOf(int(next.Add(1) - 1))
		return kplanev1.Wrap(NewPod(j, idx, failures[idx]))
	})
	obj := kplanev1.MustWrap(j)
	if ok > 0 {
		r.recorder.Eventf(ctx, obj, record.Normal, "SuccessfulCreate", "Created %d pod(s)", ok)
	}
	if err != nil {
		r.recorder.Eventf(ctx, obj, record.Warning, "FailedCreate", "Error creating: %v", err)
		return fmt.Errorf("create pods for job %s: %w", key, err)
	}
	return nil
}

func (r *jobController) deletePods(ctx context.Context, key string, j *kplanev1.Job, victims []*kplanev1.Pod) error {
	objs := make([]*kplanev1.Object, len(victims))
	for i, p := range victims {
		objs[i] = kplanev1.MustWrap(p)
	}
	n, err := r.control.Delete(ctx, key, objs, client.DeleteOptions{})
	obj := kplanev1.MustWrap(j)
	if n > 0 {
		r.recorder.Eventf(ctx, obj, record.Normal, "SuccessfulDelete", "Deleted %d pod(s)", n)
	}
	if err != nil {
		r.recorder.Eventf(ctx, obj, record.Warning, "FailedDelete", "Error deleting: %v", err)
		return fmt.Errorf("delete pods of job %s: %w", key, err)
	}
	return nil
}

// removeFinalizers drops the job-tracking finalizer from pods,
// concurrently; a pod gone meanwhile is fine.
func (r *jobController) removeFinalizers(ctx context.Context, pods []*kplanev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, finalizerWorkers)
	)
	for _, pod := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, wrote, err := controller.Update(ctx, r.api, pod, func(cur *kplanev1.Pod) *kplanev1.Pod {
				if !hasFinalizer(cur) {
					return nil
				}
				next := proto.Clone(cur).(*kplanev1.Pod)
				next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == kplanev1.FinalizerJobTracking })
				return next
			})
			if wrote {
				r.finalizerRemovals.Add(1)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("remove finalizer of pod %s: %w", pod.GetMetadata().GetName(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func withFinalizer(pods []*kplanev1.Pod) []*kplanev1.Pod {
	var out []*kplanev1.Pod
	for _, p := range pods {
		if hasFinalizer(p) {
			out = append(out, p)
		}
	}
	return out
}

// releaseOrphans removes the finalizer from pods whose Job is gone: nothing
// will count them any more, and the finalizer would keep them forever. A
// Job missing from the cache may only be late in it, so the apiserver is
// asked before.
func (r *jobController) releaseOrphans(ctx context.Context, namespace, name string) error {
	objs, err := r.pods.Store().ByIndex(informer.NamespaceIndex, namespace)
	if err != nil {
		return fmt.Errorf("pods of namespace %s: %w", namespace, err)
	}
	var orphans []*kplanev1.Pod
	for _, o := range objs {
		ref := controller.ControllerRef(o.Meta())
		if ref != nil && ref.GetKind() == kindJob && ref.GetName() == name && hasFinalizer(o.GetPod()) {
			orphans = append(orphans, o.GetPod())
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	resp, err := r.api.Get(ctx, &kplanev1.GetRequest{Kind: kindJob, Namespace: namespace, Name: name})
	var liveUID string
	switch {
	case client.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("recheck job %s/%s: %w", namespace, name, err)
	default:
		liveUID = resp.GetObject().Meta().GetUid()
	}
	orphans = slices.DeleteFunc(orphans, func(p *kplanev1.Pod) bool {
		return controller.ControllerRef(p.GetMetadata()).GetUid() == liveUID
	})
	return r.removeFinalizers(ctx, orphans)
}

// deleteExpired deletes a finished Job whose ttlSecondsAfterFinished has
// passed; the garbage collector deletes its pods.
func (r *jobController) deleteExpired(ctx context.Context, j *kplanev1.Job) error {
	obj := kplanev1.MustWrap(j)
	_, deleted, err := controller.DeleteIfSameUID(ctx, r.api, obj, client.DeleteOptions{PropagationPolicy: kplanev1.DeletePropagationBackground})
	if err != nil {
		return fmt.Errorf("delete expired job %s: %w", obj.Key(), err)
	}
	if deleted {
		r.log.Info("deleted finished job after its ttl", "job", obj.Key())
	}
	return nil
}
