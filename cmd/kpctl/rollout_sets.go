package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/cmd/kpctl/internal/printers"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/rollout"
)

// Rollouts of StatefulSets and DaemonSets, whose history is their
// ControllerRevisions: status reads the set's status as kubectl does,
// history lists the revisions, undo copies one's template back into the
// set (the controller then rolls to it and renumbers the revision).

// setRolloutVerbs are the rollout subcommands StatefulSets and
// DaemonSets have (kubectl: pause and resume are Deployment-only).
var setRolloutVerbs = map[string]bool{"status": true, "history": true, "undo": true}

func (o *rolloutOptions) setRollout(ctx context.Context, e *env, a *api, verb, kind, ns, name string) error {
	switch verb {
	case "status":
		return o.setStatus(ctx, e, a, kind, ns, name)
	case "history":
		return o.setHistory(ctx, e, a, kind, ns, name)
	default:
		return o.setUndo(ctx, e, a, kind, ns, name)
	}
}

// setRolloutState is kubectl's reading of a StatefulSet's or DaemonSet's
// status.
func setRolloutState(obj *kplanev1.Object) (msg string, done bool, err error) {
	switch {
	case obj.GetStatefulSet() != nil:
		ss := obj.GetStatefulSet()
		st, sp := ss.GetStatus(), ss.GetSpec()
		if sp.GetUpdateStrategy().GetType() != kplanev1.UpdateStrategyRollingUpdate {
			return "", false, fmt.Errorf("rollout status is only available for %s strategy type", kplanev1.UpdateStrategyRollingUpdate)
		}
		if st.GetObservedGeneration() == 0 || ss.GetMetadata().GetGeneration() > st.GetObservedGeneration() {
			return "Waiting for statefulset spec update to be observed...\n", false, nil
		}
		if st.GetReadyReplicas() < sp.GetReplicas() {
			return fmt.Sprintf("Waiting for %d pods to be ready...\n", sp.GetReplicas()-st.GetReadyReplicas()), false, nil
		}
		if p := sp.GetUpdateStrategy().GetRollingUpdate().GetPartition(); p > 0 {
			if st.GetUpdatedReplicas() < sp.GetReplicas()-p {
				return fmt.Sprintf("Waiting for partitioned roll out to finish: %d out of %d new pods have been updated...\n",
					st.GetUpdatedReplicas(), sp.GetReplicas()-p), false, nil
			}
			return fmt.Sprintf("partitioned roll out complete: %d new pods have been updated...\n", st.GetUpdatedReplicas()), true, nil
		}
		if st.GetUpdateRevision() != st.GetCurrentRevision() {
			return fmt.Sprintf("waiting for statefulset rolling update to complete %d pods at revision %s...\n",
				st.GetUpdatedReplicas(), st.GetUpdateRevision()), false, nil
		}
		return fmt.Sprintf("statefulset rolling update complete %d pods at revision %s...\n", st.GetCurrentReplicas(), st.GetCurrentRevision()), true, nil
	case obj.GetDaemonSet() != nil:
		ds := obj.GetDaemonSet()
		st, name := ds.GetStatus(), ds.GetMetadata().GetName()
		if ds.GetSpec().GetUpdateStrategy().GetType() != kplanev1.UpdateStrategyRollingUpdate {
			return "", false, fmt.Errorf("rollout status is only available for %s strategy type", kplanev1.UpdateStrategyRollingUpdate)
		}
		if ds.GetMetadata().GetGeneration() > st.GetObservedGeneration() {
			return "Waiting for daemon set spec update to be observed...\n", false, nil
		}
		if st.GetUpdatedNumberScheduled() < st.GetDesiredNumberScheduled() {
			return fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d out of %d new pods have been updated...\n",
				name, st.GetUpdatedNumberScheduled(), st.GetDesiredNumberScheduled()), false, nil
		}
		if st.GetNumberAvailable() < st.GetDesiredNumberScheduled() {
			return fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d of %d updated pods are available...\n",
				name, st.GetNumberAvailable(), st.GetDesiredNumberScheduled()), false, nil
		}
		return fmt.Sprintf("daemon set %q successfully rolled out\n", name), true, nil
	}
	return "", false, fmt.Errorf("%s has no rollout status", obj.KindName())
}

func (o *rolloutOptions) setStatus(ctx context.Context, e *env, a *api, kind, ns, name string) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	obj, err := a.get(ctx, kind, ns, name)
	if err != nil {
		return err
	}
	last := ""
	show := func(obj *kplanev1.Object) (bool, error) {
		msg, done, err := setRolloutState(obj)
		if err != nil {
			return false, err
		}
		if msg != last {
			e.stdout.printf("%s", msg)
			last = msg
		}
		return done, nil
	}
	done, err := show(obj)
	if err != nil || done || !o.watch {
		return err
	}
	stream, err := a.watch(ctx, &kplanev1.WatchRequest{Kind: kind, Namespace: ns,
		FieldSelector: "metadata.name=" + name, ResourceVersion: obj.Meta().GetResourceVersion()})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("timed out waiting for the condition")
			}
			return a.wrap(err)
		}
		switch ev.GetType() {
		case kplanev1.EventType_EVENT_TYPE_DELETED:
			return fmt.Errorf("%s %q was deleted", strings.ToLower(kind), name)
		case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
			if done, err := show(ev.GetObject()); err != nil || done {
				return err
			}
		}
	}
}

// ownedRevisions lists the revisions obj controls, oldest first.
func ownedRevisions(ctx context.Context, a *api, obj *kplanev1.Object) ([]*kplanev1.ControllerRevision, error) {
	items, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: "ControllerRevision", Namespace: obj.Meta().GetNamespace()})
	if err != nil {
		return nil, fmt.Errorf("list controller revisions: %w", err)
	}
	var out []*kplanev1.ControllerRevision
	for _, o := range items {
		if controller.IsControlledBy(o, obj.Meta().GetUid()) {
			out = append(out, o.GetControllerRevision())
		}
	}
	rollout.SortRevisions(out)
	return out, nil
}

func revisionNumbered(revs []*kplanev1.ControllerRevision, n int64) *kplanev1.ControllerRevision {
	for _, r := range revs {
		if r.GetRevision() == n {
			return r
		}
	}
	return nil
}

func (o *rolloutOptions) setHistory(ctx context.Context, e *env, a *api, kind, ns, name string) error {
	obj, err := a.get(ctx, kind, ns, name)
	if err != nil {
		return err
	}
	revs, err := ownedRevisions(ctx, a, obj)
	if err != nil {
		return err
	}
	ref := kinds.Ref(kind, name)
	if o.revision > 0 {
		r := revisionNumbered(revs, o.revision)
		if r == nil {
			return fmt.Errorf("unable to find the specified revision %d", o.revision)
		}
		t, err := rollout.DecodeTemplate(r)
		if err != nil {
			return err
		}
		e.stdout.printf("%s with revision #%d\n", ref, o.revision)
		var b strings.Builder
		if err := printers.Template(&b, t, e.now()); err != nil {
			return err
		}
		e.stdout.printf("%s", b.String())
		return nil
	}
	e.stdout.printf("%s \n", ref)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	// The tabwriter writes to a strings.Builder, which cannot fail.
	_, _ = fmt.Fprintln(tw, "REVISION\tCHANGE-CAUSE")
	for _, r := range revs {
		cause := r.GetMetadata().GetAnnotations()[kplanev1.AnnotationChangeCause]
		if cause == "" {
			cause = "<none>"
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\n", r.GetRevision(), cause)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	e.stdout.printf("%s\n", b.String())
	return nil
}

// setUndo writes a revision's template back into the set: --to-revision,
// or the one before the newest.
func (o *rolloutOptions) setUndo(ctx context.Context, e *env, a *api, kind, ns, name string) error {
	ref := kinds.Ref(kind, name)
	skipped := false
	err := retryOnConflict(ctx, func() error {
		obj, err := a.get(ctx, kind, ns, name)
		if err != nil {
			return err
		}
		revs, err := ownedRevisions(ctx, a, obj)
		if err != nil {
			return err
		}
		var r *kplanev1.ControllerRevision
		switch {
		case o.toRevision > 0:
			if r = revisionNumbered(revs, o.toRevision); r == nil {
				return fmt.Errorf("unable to find specified revision %d in history", o.toRevision)
			}
		case len(revs) < 2:
			return fmt.Errorf("no last revision to roll back to")
		default:
			r = revs[len(revs)-2]
		}
		t, err := rollout.DecodeTemplate(r)
		if err != nil {
			return err
		}
		next := proto.Clone(obj).(*kplanev1.Object)
		switch {
		case next.GetStatefulSet() != nil:
			if proto.Equal(next.GetStatefulSet().GetSpec().GetTemplate(), t) {
				skipped = true
				return nil
			}
			next.GetStatefulSet().Spec.Template = t
		case next.GetDaemonSet() != nil:
			if proto.Equal(next.GetDaemonSet().GetSpec().GetTemplate(), t) {
				skipped = true
				return nil
			}
			next.GetDaemonSet().Spec.Template = t
		}
		_, err = a.update(ctx, next)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	if skipped {
		e.stdout.printf("%s skipped rollback (current template already matches revision)\n", ref)
		return nil
	}
	e.stdout.printf("%s rolled back\n", ref)
	return nil
}
