package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/rollout"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The workload's Deployments: rolled to a new template (a template
// annotation counts revisions) or back to an earlier one all through the
// chaos, with fixed replicas so the bounds are fixed too. An Observer per
// Deployment checks maxSurge at every pod event and, once the first
// rollout has made every replica available, maxUnavailable as well.
const (
	chaosDeployments     = 2
	deployReplicas       = 4
	deploySurge          = 1
	deployUnavailable    = 1
	deployHistoryLimit   = 3
	deployStartDelay     = 300 * time.Millisecond
	labelChaosDeployment = "kplane.io/chaos-deployment"
	annotationChaosRev   = "kplane.io/chaos-rev"
)

// deployState is what the workload knows of one Deployment.
type deployState struct {
	name string
	rev  int // the template revision last acknowledged
	// maybe are revisions written with an unknown outcome since.
	maybe map[int]bool
	obs   *rollout.Observer
	armed atomic.Bool
}

// deployments is the workload's part for Deployments.
type deployments struct {
	list  []*deployState
	rolls atomic.Int64
	undos atomic.Int64
	gaps  atomic.Int64 // watch resumes that lost events (relists)
	// byName is written once in setupDeployments, before the observer
	// and the workload start, and only read after.
	byName map[string]*deployState
}

func (w *workload) deployment(name string, rev int) *kplanev1.Object {
	l := map[string]string{labelApp: name, labelChaos: "true", labelChaosDeployment: name}
	return kplanev1.MustWrap(&kplanev1.Deployment{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: w.ns, Labels: l},
		Spec: &kplanev1.DeploymentSpec{
			Replicas: proto.Int32(deployReplicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Strategy: &kplanev1.DeploymentStrategy{Type: kplanev1.DeploymentStrategyRollingUpdate, RollingUpdate: &kplanev1.RollingUpdateDeployment{
				MaxSurge: kplanev1.IntOrStringFromInt32(deploySurge), MaxUnavailable: kplanev1.IntOrStringFromInt32(deployUnavailable)}},
			RevisionHistoryLimit: proto.Int32(deployHistoryLimit),
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: l, Annotations: map[string]string{
					annotationChaosRev: strconv.Itoa(rev), "kplane.io/fake-start-delay": deployStartDelay.String()}},
				Spec: &kplanev1.PodSpec{
					Containers:                    []*kplanev1.Container{{Name: "sleep", Image: "busybox", Command: []string{"sleep", "100000"}}},
					TerminationGracePeriodSeconds: proto.Int64(1),
				},
			},
		},
	})
}

// setupDeployments creates the Deployments and starts their observers.
func (w *workload) setupDeployments(ctx context.Context) error {
	w.deploys.byName = map[string]*deployState{}
	for i := range chaosDeployments {
		d := &deployState{name: fmt.Sprintf("chaos-deploy-%d", i), rev: 1, maybe: map[int]bool{}, obs: rollout.NewObserver(0)}
		d.obs.SetBounds(deployReplicas+deploySurge, -1, false, time.Now())
		w.deploys.list = append(w.deploys.list, d)
		w.deploys.byName[d.name] = d
	}
	for _, d := range w.deploys.list {
		obj := w.deployment(d.name, 1)
		if err := retry(ctx, func(ctx context.Context) error {
			_, err := w.api.Create(ctx, &kplanev1.CreateRequest{Object: obj})
			if status.Code(err) == codes.AlreadyExists {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("create deployment %s: %w", d.name, err)
		}
	}
	return nil
}

// observeDeploymentPods feeds the observers every pod event of the
// Deployments, resuming after a broken stream from the last revision seen
// (nothing is missed); only when that revision was compacted does it
// relist, which is counted as a gap.
func (w *workload) observeDeploymentPods(ctx context.Context) {
	rv := ""
	for ctx.Err() == nil {
		stream, err := w.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: w.ns, LabelSelector: labelChaosDeployment,
			ResourceVersion: rv, AllowBookmarks: true})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				if status.Code(err) == codes.OutOfRange {
					w.deploys.gaps.Add(1)
					rv = w.relistDeploymentPods(ctx)
				}
				break
			}
			if resp.GetType() == kplanev1.EventType_EVENT_TYPE_BOOKMARK {
				rv = resp.GetResourceVersion()
				continue
			}
			p := resp.GetObject().GetPod()
			if p == nil {
				continue
			}
			rv = p.GetMetadata().GetResourceVersion()
			d := w.deploys.byName[p.GetMetadata().GetLabels()[labelChaosDeployment]]
			if d == nil {
				continue
			}
			now := time.Now()
			d.obs.Observe(resp.GetType(), p, now)
			if !d.armed.Load() {
				if present, avail := d.obs.Counts(now); present == deployReplicas && avail == deployReplicas {
					d.armed.Store(true)
					d.obs.SetBounds(deployReplicas+deploySurge, deployReplicas-deployUnavailable, false, now)
				}
			}
		}
	}
}

// relistDeploymentPods replaces every observer's pods with a fresh list
// after events were lost, and returns the list's revision to watch from
// ("" when the list failed: the watch then starts with a full list of
// ADDED events). The availability floor is disarmed until the Deployment
// is fully available again, as at the start: what happened to
// availability while events were lost cannot be checked.
func (w *workload) relistDeploymentPods(ctx context.Context) string {
	resp, err := w.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: w.ns, LabelSelector: labelChaosDeployment})
	if err != nil {
		return ""
	}
	byDeploy := map[string][]*kplanev1.Pod{}
	for _, o := range resp.GetItems() {
		if p := o.GetPod(); p != nil {
			name := p.GetMetadata().GetLabels()[labelChaosDeployment]
			byDeploy[name] = append(byDeploy[name], p)
		}
	}
	now := time.Now()
	for _, d := range w.deploys.list {
		d.armed.Store(false)
		d.obs.SetBounds(deployReplicas+deploySurge, -1, false, now)
		d.obs.Replace(byDeploy[d.name], now)
	}
	return resp.GetResourceVersion()
}

// deployStep rolls a Deployment to a new template revision, or back to an
// earlier one (as `rollout undo` does: the old template written back).
func (w *workload) deployStep(ctx context.Context) {
	d := w.deploys.list[w.rng.IntN(len(w.deploys.list))]
	next := d.rev + 1
	undo := d.rev > 1 && w.rng.IntN(3) == 0
	if undo {
		next = 1 + w.rng.IntN(d.rev-1)
	}
	cctx, cancel := w.call(ctx)
	defer cancel()
	resp, err := w.api.Get(cctx, &kplanev1.GetRequest{Kind: "Deployment", Namespace: w.ns, Name: d.name})
	if err != nil {
		return
	}
	cur := resp.GetObject().GetDeployment()
	if cur.GetSpec().GetTemplate().GetMetadata().GetAnnotations()[annotationChaosRev] != strconv.Itoa(d.rev) {
		return // an unknown outcome is still in doubt; the next step reads again
	}
	nd := proto.Clone(cur).(*kplanev1.Deployment)
	nd.Spec.Template.Metadata.Annotations[annotationChaosRev] = strconv.Itoa(next)
	w.writes.Add(1)
	_, err = w.api.Update(cctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(nd)})
	switch {
	case err == nil:
		d.rev = next
		clear(d.maybe)
		if undo {
			w.deploys.undos.Add(1)
		} else {
			w.deploys.rolls.Add(1)
		}
	case status.Code(err) == codes.Aborted || status.Code(err) == codes.InvalidArgument:
		w.failures.Add(1) // not written
	default:
		w.failures.Add(1)
		d.maybe[next] = true // may have been written
		// Learn the outcome now, so the next step starts from it.
		if r, gerr := w.api.Get(cctx, &kplanev1.GetRequest{Kind: "Deployment", Namespace: w.ns, Name: d.name}); gerr == nil {
			if v, _ := strconv.Atoi(r.GetObject().GetDeployment().GetSpec().GetTemplate().GetMetadata().GetAnnotations()[annotationChaosRev]); v == next {
				d.rev = next
				clear(d.maybe)
			}
		}
	}
}

// checkDeployments: each Deployment's rollout has finished on the
// template last written (exactly one ReplicaSet has replicas, all of them
// updated and available); its revision history is intact (the
// Deployment's revision is its new set's and the highest, no revision
// twice, no more old sets than revisionHistoryLimit); and its observer saw
// no bound broken.
func checkDeployments(w *workload, deploys []*kplanev1.Deployment, sets []*kplanev1.ReplicaSet) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	byOwner := map[string][]*kplanev1.ReplicaSet{}
	for _, rs := range sets {
		for _, r := range rs.GetMetadata().GetOwnerReferences() {
			if r.GetController() && r.GetKind() == "Deployment" {
				byOwner[r.GetUid()] = append(byOwner[r.GetUid()], rs)
			}
		}
	}
	found := map[string]bool{}
	for _, d := range deploys {
		name, st := d.GetMetadata().GetName(), d.GetStatus()
		state := w.deploys.byName[name]
		if state == nil {
			continue
		}
		found[name] = true
		rev, _ := strconv.Atoi(d.GetSpec().GetTemplate().GetMetadata().GetAnnotations()[annotationChaosRev])
		if rev != state.rev && !state.maybe[rev] {
			add("deployment %s runs template revision %d; the last acknowledged is %d", name, rev, state.rev)
		}
		if st.GetObservedGeneration() != d.GetMetadata().GetGeneration() || st.GetUpdatedReplicas() != deployReplicas ||
			st.GetAvailableReplicas() != deployReplicas || st.GetReplicas() != deployReplicas {
			add("deployment %s has not finished its rollout: generation %d observed %d, status %v", name,
				d.GetMetadata().GetGeneration(), st.GetObservedGeneration(), st)
		}
		owned := byOwner[d.GetMetadata().GetUid()]
		active := 0
		revs := map[int64]string{}
		var newest int64
		var newSet *kplanev1.ReplicaSet
		for _, rs := range owned {
			r := rollout.Revision(rs.GetMetadata())
			if other, dup := revs[r]; dup {
				add("deployment %s: sets %s and %s both have revision %d", name, other, rs.GetMetadata().GetName(), r)
			}
			revs[r] = rs.GetMetadata().GetName()
			newest = max(newest, r)
			if rs.GetSpec().GetReplicas() > 0 {
				active++
			}
			if rollout.TemplatesEqual(rs.GetSpec().GetTemplate(), d.GetSpec().GetTemplate()) {
				newSet = rs
			}
		}
		switch {
		case newSet == nil:
			add("deployment %s has no ReplicaSet for its template", name)
		case active != 1 || newSet.GetSpec().GetReplicas() != deployReplicas:
			add("deployment %s: %d sets have replicas; its new set %s has %d", name, active, newSet.GetMetadata().GetName(), newSet.GetSpec().GetReplicas())
		case rollout.Revision(newSet.GetMetadata()) != newest || rollout.Revision(d.GetMetadata()) != newest:
			add("deployment %s: revision %d, new set %s revision %d, highest %d", name, rollout.Revision(d.GetMetadata()),
				newSet.GetMetadata().GetName(), rollout.Revision(newSet.GetMetadata()), newest)
		}
		if len(owned)-1 > deployHistoryLimit {
			add("deployment %s keeps %d old sets, revisionHistoryLimit %d", name, len(owned)-1, deployHistoryLimit)
		}
	}
	for name := range w.deploys.byName {
		if !found[name] {
			add("deployment %s is gone", name)
		}
	}
	sort.Strings(out)
	return out
}

// observerViolations: the bounds every Deployment's observer recorded as
// broken at some pod event during the run (these never heal, so they are
// checked once, after convergence).
func observerViolations(w *workload) []string {
	var out []string
	for _, d := range w.deploys.list {
		events, _, _, v := d.obs.Report()
		if !d.armed.Load() {
			out = append(out, fmt.Sprintf("deployment %s: its pods never were all available, so maxUnavailable was never checked", d.name))
		}
		if events == 0 {
			out = append(out, fmt.Sprintf("deployment %s: no pod event was observed", d.name))
		}
		for _, s := range v[:min(len(v), 5)] {
			out = append(out, fmt.Sprintf("deployment %s: %s", d.name, s))
		}
		if len(v) > 5 {
			out = append(out, fmt.Sprintf("deployment %s: %d more bound violations", d.name, len(v)-5))
		}
	}
	return out
}

// deploymentSummary is the report's line on the Deployments.
func (w *workload) deploymentSummary() string {
	var events int
	var peak, low int32 = 0, -1
	for _, d := range w.deploys.list {
		e, p, l, _ := d.obs.Report()
		events += e
		peak = max(peak, p)
		if l >= 0 && (low < 0 || l < low) {
			low = l
		}
	}
	return fmt.Sprintf("deployments: %d rolled, %d rolled back; %d pod events checked (peak %d pods of bound %d, lowest availability %d of floor %d), %d watch gaps",
		w.deploys.rolls.Load(), w.deploys.undos.Load(), events, peak, deployReplicas+deploySurge, low, deployReplicas-deployUnavailable, w.deploys.gaps.Load())
}
