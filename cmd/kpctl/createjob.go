package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/pkg/strategy"
	"github.com/kplane/kplane/pkg/validation"
)

// annotationInstantiate marks a Job created by hand from a CronJob, as
// kubectl does.
const annotationInstantiate = "cronjob.kubernetes.io/instantiate"

// jobCreator is "kpctl create job".
type jobCreator struct {
	fs     *flagSet
	image  string
	from   string
	dryRun string // create's --dry-run: "client" validates and writes nothing
}

func (j *jobCreator) run(ctx context.Context, e *env, g *globals, args []string) error {
	names, command := args, []string(nil)
	if d := j.fs.dash; d >= 1 { // args lost "job", the first positional
		names, command = args[:d-1], args[d-1:]
	}
	if len(names) != 1 {
		return fmt.Errorf("exactly one NAME is required, got %d", len(names))
	}
	name := names[0]
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("invalid job name %q: %s", name, strings.Join(msgs, "; "))
	}
	if (j.image == "") == (j.from == "") {
		return errors.New("either --image or --from must be specified")
	}
	if len(command) > 0 && j.from != "" {
		return errors.New("cannot specify --from and command")
	}
	if j.dryRun != "none" && j.dryRun != "client" {
		return fmt.Errorf(`invalid --dry-run %q: want "none" or "client"`, j.dryRun)
	}
	a, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	var job *kplanev1.Job
	if j.image != "" {
		job = &kplanev1.Job{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: g.ns()},
			Spec: &kplanev1.JobSpec{Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{
				RestartPolicy: kplanev1.RestartPolicyNever,
				Containers:    []*kplanev1.Container{{Name: name, Image: j.image, Command: command}},
			}}},
		}
	} else {
		if job, err = j.fromCronJob(ctx, a, g.ns(), name); err != nil {
			return err
		}
	}
	suffix := ""
	if j.dryRun == "client" {
		// What the server would check, on a defaulted copy; nothing is written.
		obj := kplanev1.MustWrap(proto.Clone(job))
		s := strategy.For("Job")
		s.Default(obj)
		if errs := s.Validate(obj); len(errs) > 0 {
			return fmt.Errorf("invalid job %q: %w", name, errs)
		}
		suffix = " (dry run)"
	} else if _, err := a.create(ctx, kplanev1.MustWrap(job)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.stdout, "%s created%s\n", kinds.Ref("Job", name), suffix); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// fromCronJob is the Job a CronJob would create, started by hand: its job
// template, the instantiate annotation, and the CronJob as controller.
func (j *jobCreator) fromCronJob(ctx context.Context, a *api, ns, name string) (*kplanev1.Job, error) {
	typ, src, ok := strings.Cut(j.from, "/")
	if !ok || src == "" {
		return nil, fmt.Errorf("invalid --from %q: want cronjob/NAME", j.from)
	}
	k, err := kinds.Resolve(typ)
	if err != nil || k.Name != "CronJob" {
		return nil, fmt.Errorf("unknown object type %s: --from takes a cronjob", typ)
	}
	obj, err := a.get(ctx, "CronJob", ns, src)
	if err != nil {
		return nil, err
	}
	cj := obj.GetCronJob()
	tmpl := cj.GetSpec().GetJobTemplate()
	annotations := maps.Clone(tmpl.GetMetadata().GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annotationInstantiate] = "manual"
	return &kplanev1.Job{
		Metadata: &kplanev1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      maps.Clone(tmpl.GetMetadata().GetLabels()),
			Annotations: annotations,
			OwnerReferences: []*kplanev1.OwnerReference{{
				ApiVersion: kplanev1.APIVersion("CronJob"), Kind: "CronJob",
				Name: cj.GetMetadata().GetName(), Uid: cj.GetMetadata().GetUid(), Controller: true,
			}},
		},
		Spec: proto.Clone(tmpl.GetSpec()).(*kplanev1.JobSpec),
	}, nil
}
