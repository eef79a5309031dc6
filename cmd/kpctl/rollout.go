package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/cmd/kpctl/internal/printers"
	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/rollout"
)

var rolloutCommand = &command{
	name:    "rollout",
	usage:   "status|history|undo|pause|resume|restart deployment/NAME (status|history|undo for statefulset/NAME and daemonset/NAME)",
	summary: "Manage the rollout of a Deployment, StatefulSet or DaemonSet",
	example: `  kpctl rollout status deploy/web
  kpctl rollout history deploy/web --revision=2
  kpctl rollout undo deploy/web --to-revision=1
  kpctl rollout pause deploy/web
  kpctl rollout resume deploy/web
  kpctl rollout restart deploy/web
  kpctl rollout status sts/db
  kpctl rollout undo ds/log-tailer --to-revision=1`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		var o rolloutOptions
		fs.BoolVar(&o.watch, "watch", true, "status: watch until the rollout finishes (false: report once)")
		fs.DurationVar(&o.timeout, "timeout", 0, "status: how long to watch; 0 means until the rollout ends")
		fs.Int64Var(&o.revision, "revision", 0, "history: show the pod template of this revision")
		fs.Int64Var(&o.toRevision, "to-revision", 0, "undo: the revision to roll back to; 0 means the previous one")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) < 2 {
				return errors.New("rollout needs a subcommand (status, history, undo, pause, resume, restart) and a deployment, e.g. kpctl rollout status deploy/web")
			}
			verb := args[0]
			fn, ok := map[string]func(context.Context, *env, *api, string, string) error{
				"status": o.status, "history": o.history, "undo": o.undo,
				"pause": o.pause, "resume": o.resume, "restart": o.restart,
			}[verb]
			if !ok {
				return fmt.Errorf("unknown rollout subcommand %q: want status, history, undo, pause, resume or restart", verb)
			}
			_, targets, err := parseTargets(args[1:])
			if err != nil {
				return err
			}
			if len(targets) == 0 {
				return errors.New("resource(s) were provided, but no name was specified")
			}
			for _, t := range targets {
				switch {
				case t.kind.Name == "Deployment":
				case (t.kind.Name == "StatefulSet" || t.kind.Name == "DaemonSet") && setRolloutVerbs[verb]:
				case t.kind.Name == "StatefulSet" || t.kind.Name == "DaemonSet":
					return fmt.Errorf("rollout %s: %s are not supported, only deployments", verb, kinds.Plural(t.kind.Name))
				default:
					return fmt.Errorf("rollout %s: %s are not supported, only deployments, statefulsets and daemonsets", verb, kinds.Plural(t.kind.Name))
				}
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			var failed []error
			for _, t := range targets {
				run := fn
				if t.kind.Name != "Deployment" {
					run = func(ctx context.Context, e *env, a *api, ns, name string) error {
						return o.setRollout(ctx, e, a, verb, t.kind.Name, ns, name)
					}
				}
				if err := run(ctx, e, a, g.namespaceFor(t.kind), t.name); err != nil {
					failed = append(failed, err)
				}
			}
			return report(e, failed)
		}
	},
}

type rolloutOptions struct {
	watch      bool
	timeout    time.Duration
	revision   int64
	toRevision int64
}

// ownedReplicaSets lists the ReplicaSets d controls.
func ownedReplicaSets(ctx context.Context, a *api, d *kplanev1.Deployment) ([]*kplanev1.ReplicaSet, error) {
	items, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: "ReplicaSet", Namespace: d.GetMetadata().GetNamespace()})
	if err != nil {
		return nil, fmt.Errorf("list replica sets: %w", err)
	}
	var out []*kplanev1.ReplicaSet
	for _, o := range items {
		if controller.IsControlledBy(o, d.GetMetadata().GetUid()) {
			out = append(out, o.GetReplicaSet())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return rollout.Revision(out[i].GetMetadata()) < rollout.Revision(out[j].GetMetadata())
	})
	return out, nil
}

func (o *rolloutOptions) getDeployment(ctx context.Context, a *api, ns, name string) (*kplanev1.Deployment, error) {
	obj, err := a.get(ctx, "Deployment", ns, name)
	if err != nil {
		return nil, err
	}
	return obj.GetDeployment(), nil
}

// rolloutState is kubectl's reading of a Deployment's status: a message,
// whether the rollout is done, and an error when it cannot finish.
func rolloutState(d *kplanev1.Deployment) (msg string, done bool, err error) {
	name, st := d.GetMetadata().GetName(), d.GetStatus()
	if d.GetMetadata().GetGeneration() > st.GetObservedGeneration() {
		return "Waiting for deployment spec update to be observed...\n", false, nil
	}
	if c := apiutil.FindCondition(st.GetConditions(), kplanev1.DeploymentProgressing); c.GetReason() == kplanev1.ReasonProgressDeadlineExceeded {
		return "", false, fmt.Errorf("deployment %q exceeded its progress deadline", name)
	}
	want := d.GetSpec().GetReplicas()
	switch {
	case st.GetUpdatedReplicas() < want:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d out of %d new replicas have been updated...\n", name, st.GetUpdatedReplicas(), want), false, nil
	case st.GetReplicas() > st.GetUpdatedReplicas():
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d old replicas are pending termination...\n", name, st.GetReplicas()-st.GetUpdatedReplicas()), false, nil
	case st.GetAvailableReplicas() < st.GetUpdatedReplicas():
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d updated replicas are available...\n", name, st.GetAvailableReplicas(), st.GetUpdatedReplicas()), false, nil
	}
	return fmt.Sprintf("deployment %q successfully rolled out\n", name), true, nil
}

// status prints the rollout's progress as it changes, by watch, until it
// is done, fails or the timeout passes.
func (o *rolloutOptions) status(ctx context.Context, e *env, a *api, ns, name string) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	d, err := o.getDeployment(ctx, a, ns, name)
	if err != nil {
		return err
	}
	last := ""
	show := func(d *kplanev1.Deployment) (bool, error) {
		msg, done, err := rolloutState(d)
		if err != nil {
			return false, err
		}
		if msg != last {
			e.stdout.printf("%s", msg)
			last = msg
		}
		return done, nil
	}
	done, err := show(d)
	if err != nil || done || !o.watch {
		return err
	}
	stream, err := a.watch(ctx, &kplanev1.WatchRequest{Kind: "Deployment", Namespace: ns,
		FieldSelector: "metadata.name=" + name, ResourceVersion: d.GetMetadata().GetResourceVersion()})
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
			return fmt.Errorf("deployment %q was deleted", name)
		case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
			if done, err := show(ev.GetObject().GetDeployment()); err != nil || done {
				return err
			}
		}
	}
}

// history lists the revisions and their change causes, or one revision's
// pod template.
func (o *rolloutOptions) history(ctx context.Context, e *env, a *api, ns, name string) error {
	d, err := o.getDeployment(ctx, a, ns, name)
	if err != nil {
		return err
	}
	sets, err := ownedReplicaSets(ctx, a, d)
	if err != nil {
		return err
	}
	ref := kinds.Ref("Deployment", name)
	if o.revision > 0 {
		rs := setAtRevision(sets, o.revision)
		if rs == nil {
			return fmt.Errorf("unable to find the specified revision %d", o.revision)
		}
		e.stdout.printf("%s with revision #%d\n", ref, o.revision)
		var b strings.Builder
		if err := printers.Template(&b, rollout.WithoutHashLabel(rs.GetSpec().GetTemplate()), e.now()); err != nil {
			return err
		}
		e.stdout.printf("%s", b.String())
		return nil
	}
	e.stdout.printf("%s \n", ref)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	// The tabwriter writes to a strings.Builder, which cannot fail; its
	// errors surface at Flush anyway.
	_, _ = fmt.Fprintln(tw, "REVISION\tCHANGE-CAUSE")
	for _, rs := range sets {
		rev := rollout.Revision(rs.GetMetadata())
		if rev == 0 {
			continue
		}
		cause := rs.GetMetadata().GetAnnotations()[kplanev1.AnnotationChangeCause]
		if cause == "" {
			cause = "<none>"
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\n", rev, cause)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	e.stdout.printf("%s\n", b.String())
	return nil
}

// setAtRevision finds the set whose revision, or one of whose earlier
// revisions, is rev.
func setAtRevision(sets []*kplanev1.ReplicaSet, rev int64) *kplanev1.ReplicaSet {
	for _, rs := range sets {
		if rollout.Revision(rs.GetMetadata()) == rev {
			return rs
		}
	}
	return nil
}

// undo writes an earlier revision's template back into the Deployment,
// as kubectl does; the controller then rolls to it (reusing its set).
func (o *rolloutOptions) undo(ctx context.Context, e *env, a *api, ns, name string) error {
	ref := kinds.Ref("Deployment", name)
	skipped := false
	err := retryOnConflict(ctx, func() error {
		d, err := o.getDeployment(ctx, a, ns, name)
		if err != nil {
			return err
		}
		if d.GetSpec().GetPaused() {
			return fmt.Errorf("you cannot rollback a paused deployment; resume it first with 'kpctl rollout resume %s' and try again", ref)
		}
		sets, err := ownedReplicaSets(ctx, a, d)
		if err != nil {
			return err
		}
		var rs *kplanev1.ReplicaSet
		if o.toRevision > 0 {
			if rs = setAtRevision(sets, o.toRevision); rs == nil {
				return fmt.Errorf("unable to find specified revision %d in history", o.toRevision)
			}
		} else {
			// The previous revision: the highest below the current one.
			cur := rollout.Revision(d.GetMetadata())
			for _, s := range sets {
				if r := rollout.Revision(s.GetMetadata()); r > 0 && r < cur && (rs == nil || r > rollout.Revision(rs.GetMetadata())) {
					rs = s
				}
			}
			if rs == nil {
				return fmt.Errorf("no rollout history found for deployment %q", name)
			}
		}
		tmpl := rollout.WithoutHashLabel(rs.GetSpec().GetTemplate())
		if rollout.TemplatesEqual(tmpl, d.GetSpec().GetTemplate()) {
			skipped = true
			return nil
		}
		next := proto.Clone(d).(*kplanev1.Deployment)
		next.Spec.Template = proto.Clone(tmpl).(*kplanev1.PodTemplateSpec)
		if cause, ok := rs.GetMetadata().GetAnnotations()[kplanev1.AnnotationChangeCause]; ok {
			if next.Metadata.Annotations == nil {
				next.Metadata.Annotations = map[string]string{}
			}
			next.Metadata.Annotations[kplanev1.AnnotationChangeCause] = cause
		} else {
			delete(next.Metadata.Annotations, kplanev1.AnnotationChangeCause)
		}
		_, err = a.update(ctx, kplanev1.MustWrap(next))
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

// patchDeployment applies change to a fresh copy with CAS retries; change
// returns an error to refuse, or false when nothing needs writing.
func patchDeployment(ctx context.Context, a *api, ns, name string, change func(d *kplanev1.Deployment) (bool, error)) error {
	return retryOnConflict(ctx, func() error {
		obj, err := a.get(ctx, "Deployment", ns, name)
		if err != nil {
			return err
		}
		d := proto.Clone(obj.GetDeployment()).(*kplanev1.Deployment)
		write, err := change(d)
		if err != nil || !write {
			return err
		}
		_, err = a.update(ctx, kplanev1.MustWrap(d))
		return err
	})
}

func (o *rolloutOptions) pause(ctx context.Context, e *env, a *api, ns, name string) error {
	return o.setPaused(ctx, e, a, ns, name, true)
}

func (o *rolloutOptions) resume(ctx context.Context, e *env, a *api, ns, name string) error {
	return o.setPaused(ctx, e, a, ns, name, false)
}

func (o *rolloutOptions) setPaused(ctx context.Context, e *env, a *api, ns, name string, paused bool) error {
	ref := kinds.Ref("Deployment", name)
	err := patchDeployment(ctx, a, ns, name, func(d *kplanev1.Deployment) (bool, error) {
		if d.GetSpec().GetPaused() == paused {
			if paused {
				return false, fmt.Errorf("deployments %q is already paused", name)
			}
			return false, fmt.Errorf("deployments %q is not paused", name)
		}
		d.Spec.Paused = paused
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	if paused {
		e.stdout.printf("%s paused\n", ref)
	} else {
		e.stdout.printf("%s resumed\n", ref)
	}
	return nil
}

// restart sets the template's kubectl.kubernetes.io/restartedAt
// annotation: a new template, so every pod is replaced by the strategy.
func (o *rolloutOptions) restart(ctx context.Context, e *env, a *api, ns, name string) error {
	ref := kinds.Ref("Deployment", name)
	at := e.now().UTC().Format(time.RFC3339)
	err := patchDeployment(ctx, a, ns, name, func(d *kplanev1.Deployment) (bool, error) {
		if d.GetSpec().GetPaused() {
			return false, fmt.Errorf("can't restart paused deployment (run rollout resume first)")
		}
		if d.Spec.Template == nil {
			d.Spec.Template = &kplanev1.PodTemplateSpec{}
		}
		if d.Spec.Template.Metadata == nil {
			d.Spec.Template.Metadata = &kplanev1.ObjectMeta{}
		}
		if d.Spec.Template.Metadata.Annotations == nil {
			d.Spec.Template.Metadata.Annotations = map[string]string{}
		}
		d.Spec.Template.Metadata.Annotations[kplanev1.AnnotationRestartedAt] = at
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	e.stdout.printf("%s restarted\n", ref)
	return nil
}

var setCommand = &command{
	name:    "set",
	usage:   "image deployment/NAME CONTAINER=IMAGE [...]",
	summary: "Set the image of containers of a Deployment's pod template",
	example: `  kpctl set image deploy/web web=nginx:1.27
  # every container
  kpctl set image deploy/web '*=busybox:1.36'`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) < 3 || args[0] != "image" {
				return errors.New("usage: kpctl set image deployment/NAME CONTAINER=IMAGE [...]")
			}
			_, targets, err := parseTargets(args[1:2])
			if err != nil {
				return err
			}
			if len(targets) != 1 || targets[0].kind.Name != "Deployment" {
				return errors.New("set image: name one deployment, e.g. deploy/web")
			}
			images := map[string]string{}
			for _, kv := range args[2:] {
				c, img, ok := strings.Cut(kv, "=")
				if !ok || c == "" || img == "" {
					return fmt.Errorf("invalid image assignment %q: want CONTAINER=IMAGE", kv)
				}
				images[c] = img
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			t := targets[0]
			err = patchDeployment(ctx, a, g.namespaceFor(t.kind), t.name, func(d *kplanev1.Deployment) (bool, error) {
				cs := d.GetSpec().GetTemplate().GetSpec().GetContainers()
				for c := range images {
					if c == "*" {
						continue
					}
					found := false
					for _, x := range cs {
						found = found || x.GetName() == c
					}
					if !found {
						return false, fmt.Errorf("unable to find container named %q", c)
					}
				}
				changed := false
				for _, x := range cs {
					img, ok := images[x.GetName()]
					if !ok {
						img, ok = images["*"]
					}
					if ok && x.Image != img {
						x.Image, changed = img, true
					}
				}
				return changed, nil
			})
			if err != nil {
				return fmt.Errorf("%s: %w", kinds.Ref(t.kind.Name, t.name), err)
			}
			e.stdout.printf("%s image updated\n", kinds.Ref(t.kind.Name, t.name))
			return nil
		}
	},
}
