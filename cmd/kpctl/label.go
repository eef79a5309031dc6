package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
)

var labelCommand = &command{
	name:    "label",
	usage:   "KIND NAME... KEY=VALUE... KEY-...",
	summary: "Add, change or remove labels of objects",
	example: `  kpctl label pod web tier=frontend
  kpctl label pod web tier=backend --overwrite
  kpctl label pod web tier-
  kpctl label pods -l app=web env=prod`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		return metaCommand(fs, g, "label", "labeled", func(m *kplanev1.ObjectMeta) *map[string]string { return &m.Labels })
	},
}

var annotateCommand = &command{
	name:    "annotate",
	usage:   "KIND NAME... KEY=VALUE... KEY-...",
	summary: "Add, change or remove annotations of objects",
	example: `  kpctl annotate pod web description='serves the front page'
  kpctl annotate pod web description-`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		return metaCommand(fs, g, "annotation", "annotated", func(m *kplanev1.ObjectMeta) *map[string]string { return &m.Annotations })
	},
}

// change is one KEY=VALUE (set) or KEY- (remove) argument.
type change struct {
	key, value string
	remove     bool
}

// splitChanges separates KEY=VALUE and KEY- arguments from the kind and
// name arguments before them.
func splitChanges(args []string) (objects []string, changes []change, err error) {
	for _, a := range args {
		switch {
		case strings.Contains(a, "="):
			k, v, _ := strings.Cut(a, "=")
			if k == "" {
				return nil, nil, fmt.Errorf("invalid argument %q: the key is empty", a)
			}
			changes = append(changes, change{key: k, value: v})
		case len(a) > 1 && strings.HasSuffix(a, "-"): // names never end in "-"
			changes = append(changes, change{key: strings.TrimSuffix(a, "-"), remove: true})
		case len(changes) > 0:
			return nil, nil, fmt.Errorf("object arguments must come before KEY=VALUE arguments: %q", a)
		default:
			objects = append(objects, a)
		}
	}
	if len(changes) == 0 {
		return nil, nil, errors.New("at least one KEY=VALUE or KEY- argument is required")
	}
	return objects, changes, nil
}

// metaCommand builds label and annotate, which differ only in the map they
// edit and their wording.
func metaCommand(fs *flagSet, g *globals, noun, verb string, field func(*kplanev1.ObjectMeta) *map[string]string) func(context.Context, *env, []string) error {
	var overwrite, all bool
	var selector, resourceVersion string
	fs.BoolVar(&overwrite, "overwrite", false, "allow changing the value of an existing "+noun)
	fs.stringFlag(&selector, "selector", "l", "", "act on the objects matching this label selector")
	fs.BoolVar(&all, "all", false, "act on every object of the kind in the namespace")
	fs.StringVar(&resourceVersion, "resource-version", "", "only update if the object still has this resourceVersion")
	return func(ctx context.Context, e *env, args []string) error {
		objArgs, changes, err := splitChanges(args)
		if err != nil {
			return err
		}
		kind, targets, err := parseTargets(objArgs)
		if err != nil {
			return err
		}
		if len(targets) == 0 && selector == "" && !all {
			return errors.New("resource(s) were provided, but no name was specified")
		}
		a, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer a.close()
		if len(targets) == 0 {
			objs, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: kind.Name, Namespace: g.namespaceFor(kind), LabelSelector: selector})
			if err != nil {
				return err
			}
			for _, o := range objs {
				targets = append(targets, target{kind, o.Meta().GetName()})
			}
		}
		var failed []error
		for _, t := range targets {
			ref := kinds.Ref(t.kind.Name, t.name)
			var changed bool
			err := retryOnConflict(ctx, func() error {
				obj, err := a.get(ctx, t.kind.Name, g.namespaceFor(t.kind), t.name)
				if err != nil {
					return err
				}
				meta := obj.Meta()
				if resourceVersion != "" && meta.GetResourceVersion() != resourceVersion {
					return fmt.Errorf("the object has been modified: resourceVersion is %s, not %s", meta.GetResourceVersion(), resourceVersion)
				}
				changed, err = applyChanges(field(meta), changes, overwrite)
				if err != nil || !changed {
					return err
				}
				_, err = a.update(ctx, obj)
				return err
			})
			switch {
			case err != nil:
				failed = append(failed, fmt.Errorf("%s: %w", ref, err))
			case changed:
				e.stdout.printf("%s %s\n", ref, verb)
			default:
				e.stdout.printf("%s not %s\n", ref, verb)
			}
		}
		return report(e, failed)
	}
}

// applyChanges edits m as kubectl does: setting a key that has another
// value needs overwrite; removing a missing key is not an error.
func applyChanges(m *map[string]string, changes []change, overwrite bool) (bool, error) {
	changed := false
	for _, c := range changes {
		old, exists := (*m)[c.key]
		switch {
		case c.remove:
			if exists {
				delete(*m, c.key)
				changed = true
			}
		case exists && old == c.value:
		case exists && !overwrite:
			return false, fmt.Errorf("'%s' already has a value (%s), and --overwrite is false", c.key, old)
		default:
			if *m == nil {
				*m = map[string]string{}
			}
			(*m)[c.key] = c.value
			changed = true
		}
	}
	return changed, nil
}
