package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/cmd/kpctl/internal/manifest"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/strategy"
)

const lastAppliedAnnotation = manifest.LastAppliedAnnotation

var applyCommand = &command{
	name:    "apply",
	usage:   "-f FILENAME|DIR|-",
	summary: "Create or update objects from manifests (YAML or JSON)",
	example: `  # Apply one manifest, then every manifest in a directory
  kpctl apply -f pod.yaml
  kpctl apply -f examples/

  # Apply from stdin
  cat rs.yaml | kpctl apply -f -

  # Check manifests without contacting the apiserver
  kpctl apply -f examples/ --dry-run=client`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		w := writeFlags(fs)
		return func(ctx context.Context, e *env, args []string) error {
			return w.run(ctx, e, g, args, true)
		}
	},
}

var createCommand = &command{
	name:    "create",
	usage:   "-f FILENAME|DIR|- | job NAME (--image=IMAGE [-- COMMAND [ARG...]] | --from=cronjob/NAME) | token SERVICEACCOUNT [--duration=D]",
	summary: "Create objects from manifests, a Job, or a ServiceAccount token; fail for objects that already exist",
	example: `  kpctl create -f job.yaml
  kpctl create -f examples/

  # A Job running one command, and a Job from a CronJob's template
  kpctl create job hello --image=busybox -- echo hello
  kpctl create job nightly-now --from=cronjob/nightly

  # A token for ServiceAccount robot in namespace team, valid 30 minutes
  kpctl create token robot -n team --duration=30m`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		w := writeFlags(fs)
		j := &jobCreator{fs: fs}
		fs.StringVar(&j.image, "image", "", "create job: the image of the Job's container")
		fs.StringVar(&j.from, "from", "", "create job: the CronJob whose job template to use, as cronjob/NAME")
		tc := &tokenCreator{}
		fs.StringVar(&tc.duration, "duration", "", "create token: the token's lifetime (at least 10m; the apiserver caps it at its --service-account-max-token-expiration)")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 && args[0] == "job" && len(w.files) == 0 {
				j.dryRun = w.dryRun
				return j.run(ctx, e, g, args[1:])
			}
			if len(args) > 0 && args[0] == "token" && len(w.files) == 0 {
				return tc.run(ctx, e, g, args[1:])
			}
			if tc.duration != "" {
				return errors.New("--duration is a flag of 'kpctl create token SERVICEACCOUNT'")
			}
			if j.image != "" || j.from != "" {
				return errors.New("--image and --from are flags of 'kpctl create job NAME'")
			}
			return w.run(ctx, e, g, args, false)
		}
	},
}

// writer is apply or create.
type writer struct {
	files  stringList
	dryRun string
}

func writeFlags(fs *flagSet) *writer {
	w := &writer{}
	fs.Var(&w.files, "filename", "manifest file, directory of manifests, or - for stdin (repeatable)")
	fs.alias("f", "filename")
	fs.StringVar(&w.dryRun, "dry-run", "none", `"client": only read and validate the manifests, write nothing`)
	return w
}

func (w *writer) run(ctx context.Context, e *env, g *globals, args []string, apply bool) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: manifests are passed with -f", args)
	}
	if len(w.files) == 0 {
		return errors.New("must specify -f FILENAME, -f DIR or -f - (stdin)")
	}
	if w.dryRun != "none" && w.dryRun != "client" {
		return fmt.Errorf(`invalid --dry-run %q: want "none" or "client"`, w.dryRun)
	}
	docs, err := loadManifests(e, g, w.files, apply)
	if err != nil {
		return err
	}
	if w.dryRun == "client" {
		for _, d := range docs {
			e.stdout.printf("%s valid (dry run)\n", kinds.Ref(d.Object.KindName(), d.Object.Meta().GetName()))
		}
		return nil
	}
	a, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	var failed []error
	for _, d := range docs {
		var action, name string
		if apply {
			action, err = applyOne(ctx, a, d.Object)
			name = d.Object.Meta().GetName()
		} else {
			var created *kplanev1.Object
			created, err = a.create(ctx, d.Object)
			action, name = "created", d.Object.Meta().GetName()
			if created != nil {
				name = created.Meta().GetName() // the server may have generated it
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("%s (%s): %w", d.Where(), kinds.Ref(d.Object.KindName(), d.Object.Meta().GetName()), err))
			continue
		}
		e.stdout.printf("%s %s\n", kinds.Ref(d.Object.KindName(), name), action)
	}
	return report(e, failed)
}

// report prints every error on its own line and makes the command fail;
// one error is returned as it is, for run to print.
func report(e *env, errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	for _, err := range errs {
		e.stderr.printf("error: %s\n", err)
	}
	return errSilent
}

// loadManifests reads, completes and validates every document before
// anything is written, so a bad document in a set leaves the cluster
// untouched.
func loadManifests(e *env, g *globals, files []string, needName bool) ([]*manifest.Document, error) {
	docs, err := manifest.ReadPaths(files, e.stdin)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, d := range docs {
		if err := prepare(d, g, needName); err != nil {
			errs = append(errs, err)
		}
	}
	if err := report(e, errs); err != nil {
		return nil, err
	}
	return docs, nil
}

// prepare strips server-owned fields, fills in the namespace and runs the
// same defaulting and validation as the apiserver.
func prepare(d *manifest.Document, g *globals, needName bool) error {
	obj := d.Object
	manifest.Desired(obj)
	meta := obj.Meta()
	info := obj.Info()
	switch {
	case !info.Namespaced:
		meta.Namespace = "" // as kubectl, ignore a namespace on cluster-scoped kinds
	case meta.GetNamespace() == "":
		meta.Namespace = g.ns()
	case g.namespaceSet && meta.GetNamespace() != g.namespace:
		return fmt.Errorf("%s: the namespace from the provided object %q does not match the namespace %q; pass --namespace=%s to use it",
			d.Where(), meta.GetNamespace(), g.namespace, meta.GetNamespace())
	}
	if needName && meta.GetName() == "" {
		return fmt.Errorf("%s: metadata.name: Required value: apply needs a name (use create for generateName)", d.Where())
	}
	s := strategy.For(info.Name)
	if s == nil {
		return fmt.Errorf("%s: kind: %s", d.Where(), kplanev1.UnknownKindError(info.Name))
	}
	// Validate a defaulted copy; the server applies the defaults itself.
	c := proto.Clone(obj).(*kplanev1.Object)
	s.Default(c)
	if errs := s.Validate(c); len(errs) > 0 {
		id := meta.GetName()
		if id == "" {
			id = meta.GetGenerateName()
		}
		return fmt.Errorf("%s: %s %q is invalid: %w", d.Where(), info.Name, id, errs)
	}
	return nil
}

// applyOne creates obj, or updates the existing object with obj's fields
// (read, merge, compare-and-swap write; rerun on conflict). It returns
// "created", "configured" or "unchanged".
func applyOne(ctx context.Context, a *api, desired *kplanev1.Object) (string, error) {
	desired = proto.Clone(desired).(*kplanev1.Object)
	meta := desired.Meta()
	delete(meta.Annotations, lastAppliedAnnotation)
	want, err := manifest.ToMap(desired)
	if err != nil {
		return "", err
	}
	last, err := json.Marshal(want)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", lastAppliedAnnotation, err)
	}
	kind, ns, name := desired.KindName(), meta.GetNamespace(), meta.GetName()
	var action string
	err = retryOnConflict(ctx, func() error {
		cur, err := a.get(ctx, kind, ns, name)
		if client.IsNotFound(err) {
			obj := proto.Clone(desired).(*kplanev1.Object)
			if obj.Meta().Annotations == nil {
				obj.Meta().Annotations = map[string]string{}
			}
			obj.Meta().Annotations[lastAppliedAnnotation] = string(last)
			action = "created"
			_, err = a.create(ctx, obj)
			return err
		}
		if err != nil {
			return err
		}
		current, err := manifest.ToMap(cur)
		if err != nil {
			return err
		}
		merged := manifest.Merge(current, previous(cur), want)
		setAnnotation(merged, lastAppliedAnnotation, string(last))
		obj, err := manifest.FromMap(merged)
		if err != nil {
			return fmt.Errorf("merge with the live object: %w", err)
		}
		// The live object holds the server's defaults; default the merged
		// one too, so that an unchanged manifest is not written again.
		strategy.For(kind).Default(obj)
		manifest.ClearStatus(obj) // apply never writes status
		live := proto.Clone(cur).(*kplanev1.Object)
		manifest.ClearStatus(live)
		if proto.Equal(obj, live) {
			action = "unchanged"
			return nil
		}
		obj.Meta().ResourceVersion = cur.Meta().GetResourceVersion()
		action = "configured"
		_, err = a.update(ctx, obj)
		return err
	})
	return action, err
}

// previous returns the manifest the last apply wrote, or nil.
func previous(cur *kplanev1.Object) map[string]any {
	s := cur.Meta().GetAnnotations()[lastAppliedAnnotation]
	if s == "" {
		return nil
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber() // compare numbers the way ToMap renders them
	if dec.Decode(&m) != nil {
		return nil // a damaged annotation only costs the removal of stale fields
	}
	return m
}

// setAnnotation sets metadata.annotations[key] in a manifest map.
func setAnnotation(m map[string]any, key, value string) {
	// Copy on write: Merge shares unchanged nested maps with the live
	// object's map, which the caller still compares against.
	meta := copyMap(m["metadata"])
	ann := copyMap(meta["annotations"])
	ann[key] = value
	meta["annotations"] = ann
	m["metadata"] = meta
}

// copyMap returns a shallow copy of v if it is a map, else an empty map.
func copyMap(v any) map[string]any {
	old, _ := v.(map[string]any)
	out := make(map[string]any, len(old)+1)
	for k, e := range old {
		out[k] = e
	}
	return out
}
