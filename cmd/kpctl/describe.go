package main

import (
	"context"
	"fmt"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/printers"
	"github.com/kplane/kplane/pkg/client"
)

var describeCommand = &command{
	name:    "describe",
	usage:   "KIND [NAME...] | KIND/NAME...",
	summary: "Show details of objects, with their conditions and events",
	example: `  kpctl describe pod web
  kpctl describe nodes
  kpctl describe rs -l app=frontend`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		var selector string
		var all bool
		fs.stringFlag(&selector, "selector", "l", "", "describe the objects matching this label selector")
		fs.boolFlag(&all, "all-namespaces", "A", false, "describe matching objects in every namespace")
		return func(ctx context.Context, e *env, args []string) error {
			kind, targets, err := parseTargets(args)
			if err != nil {
				return err
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			var objs []*kplanev1.Object
			var failed []error
			if len(targets) == 0 {
				ns := g.namespaceFor(kind)
				if all {
					ns = ""
				}
				objs, _, err = a.list(ctx, &kplanev1.ListRequest{Kind: kind.Name, Namespace: ns, LabelSelector: selector})
				if err != nil {
					return err
				}
				if len(objs) == 0 {
					e.stderr.print(noResourcesFound(kind, ns))
				}
			}
			for _, t := range targets {
				obj, err := a.get(ctx, t.kind.Name, g.namespaceFor(t.kind), t.name)
				if err != nil {
					failed = append(failed, err)
					continue
				}
				objs = append(objs, obj)
			}
			for i, obj := range objs {
				if i > 0 {
					e.stdout.println()
				}
				rel, err := related(ctx, a, obj)
				if err != nil {
					return err
				}
				if err := printers.Describe(e.stdout, obj, rel, e.now()); err != nil {
					return err
				}
			}
			return report(e, failed)
		}
	},
}

// related finds what describe shows beside an object: the Events about it
// and, for a Service, its Endpoints.
func related(ctx context.Context, a *api, obj *kplanev1.Object) (printers.Related, error) {
	var rel printers.Related
	meta := obj.Meta()
	// Events of cluster-scoped objects may be recorded in any namespace.
	events, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: meta.GetNamespace()})
	if err != nil {
		return rel, fmt.Errorf("list events: %w", err)
	}
	for _, ev := range events {
		ref := ev.GetEvent().GetInvolvedObject()
		if ref.GetKind() == obj.KindName() && ref.GetName() == meta.GetName() &&
			(ref.GetNamespace() == "" || ref.GetNamespace() == meta.GetNamespace()) &&
			(ref.GetUid() == "" || ref.GetUid() == meta.GetUid()) {
			rel.Events = append(rel.Events, ev)
		}
	}
	if obj.GetPersistentVolumeClaim() != nil {
		pods, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: meta.GetNamespace()})
		if err != nil {
			return rel, fmt.Errorf("list pods: %w", err)
		}
		for _, p := range pods {
			for _, v := range p.GetPod().GetSpec().GetVolumes() {
				if v.GetPersistentVolumeClaim().GetClaimName() == meta.GetName() {
					rel.UsedBy = append(rel.UsedBy, p.Meta().GetName())
					break
				}
			}
		}
	}
	if d := obj.GetDeployment(); d != nil {
		sets, err := ownedReplicaSets(ctx, a, d)
		if err != nil {
			return rel, err
		}
		rel.ReplicaSets = sets
	}
	if obj.GetService() != nil {
		ep, err := a.get(ctx, "Endpoints", meta.GetNamespace(), meta.GetName())
		switch {
		case err == nil:
			rel.Endpoints = ep.GetEndpoints()
		case !client.IsNotFound(err):
			return rel, fmt.Errorf("get endpoints: %w", err)
		}
	}
	return rel, nil
}
