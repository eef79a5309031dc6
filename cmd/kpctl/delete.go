package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/manifest"
	"github.com/kplane/kplane/pkg/client"
)

var deleteCommand = &command{
	name:    "delete",
	usage:   "KIND NAME... | KIND/NAME... | -f FILENAME | KIND -l SELECTOR | KIND --all",
	summary: "Delete objects by name, by manifest, or by label selector",
	example: `  kpctl delete pod web
  kpctl delete -f examples/replicaset.yaml
  kpctl delete pods -l app=web --grace-period=0

  # Delete a replica set but keep its pods
  kpctl delete rs frontend --cascade=orphan`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		o := &deleteOptions{g: g}
		fs.Var(&o.files, "filename", "delete the objects named in this manifest file or directory (repeatable)")
		fs.alias("f", "filename")
		fs.stringFlag(&o.selector, "selector", "l", "", "delete the objects matching this label selector")
		fs.BoolVar(&o.all, "all", false, "delete every object of the kind in the namespace")
		fs.StringVar(&o.cascade, "cascade", "background", "what happens to dependents: background, foreground or orphan")
		fs.Int64Var(&o.grace, "grace-period", -1, "seconds a pod gets to terminate; -1 uses the pod's own, 0 deletes at once")
		fs.BoolVar(&o.force, "force", false, "delete at once, without waiting for the pod to terminate (grace period 0)")
		fs.BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "treat objects that do not exist as deleted")
		return o.run
	},
}

type deleteOptions struct {
	g              *globals
	files          stringList
	selector       string
	all            bool
	cascade        string
	grace          int64
	force          bool
	ignoreNotFound bool
}

// propagation maps --cascade to DeleteRequest.propagation_policy. The old
// boolean spellings are accepted as kubectl does.
func propagation(cascade string) (string, error) {
	switch strings.ToLower(cascade) {
	case "background", "true":
		return "Background", nil
	case "foreground":
		return "Foreground", nil
	case "orphan", "false":
		return "Orphan", nil
	}
	return "", fmt.Errorf("invalid --cascade %q: must be background, foreground or orphan", cascade)
}

func (o *deleteOptions) run(ctx context.Context, e *env, args []string) error {
	policy, err := propagation(o.cascade)
	if err != nil {
		return err
	}
	var grace *int64
	switch {
	case o.force:
		zero := int64(0)
		grace = &zero
	case o.grace >= 0:
		grace = &o.grace
	}

	type victim struct {
		kind     *kplanev1.KindInfo
		ns, name string
	}
	var victims []victim
	var kind *kplanev1.KindInfo
	var targets []target
	switch {
	case len(o.files) > 0:
		if len(args) > 0 {
			return errors.New("names cannot be given together with -f")
		}
		docs, err := manifest.ReadPaths(o.files, e.stdin)
		if err != nil {
			return err
		}
		for _, d := range docs {
			m, info := d.Object.Meta(), d.Object.Info()
			if m.GetName() == "" {
				return fmt.Errorf("%s: metadata.name: Required value: cannot delete an object without a name", d.Where())
			}
			ns := m.GetNamespace()
			if !info.Namespaced {
				ns = ""
			} else if ns == "" {
				ns = o.g.ns()
			}
			victims = append(victims, victim{info, ns, m.GetName()})
		}
	default:
		kind, targets, err = parseTargets(args)
		if err != nil {
			return err
		}
		for _, t := range targets {
			victims = append(victims, victim{t.kind, o.g.namespaceFor(t.kind), t.name})
		}
		switch {
		case len(targets) > 0 && (o.selector != "" || o.all):
			return errors.New("names cannot be given together with --selector or --all")
		case len(targets) == 0 && o.selector == "" && !o.all:
			return fmt.Errorf("resource(s) were provided, but no name was specified: give names, -l SELECTOR or --all")
		}
	}

	a, err := o.g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	if len(victims) == 0 { // by selector or --all
		ns := o.g.namespaceFor(kind)
		objs, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: kind.Name, Namespace: ns, LabelSelector: o.selector})
		if err != nil {
			return err
		}
		if len(objs) == 0 {
			e.stderr.print(noResourcesFound(kind, ns))
			return nil
		}
		for _, obj := range objs {
			victims = append(victims, victim{kind, obj.Meta().GetNamespace(), obj.Meta().GetName()})
		}
	}

	var failed []error
	for _, v := range victims {
		_, err := a.delete(ctx, &kplanev1.DeleteRequest{
			Kind: v.kind.Name, Namespace: v.ns, Name: v.name,
			PropagationPolicy: policy, GracePeriodSeconds: grace,
		})
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case client.IsNotFound(err) && o.ignoreNotFound:
		case err != nil:
			failed = append(failed, err)
		default:
			e.stdout.printf("%s %q deleted\n", strings.ToLower(v.kind.Name), v.name)
		}
	}
	return report(e, failed)
}
