package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/cmd/kpctl/internal/manifest"
	"github.com/kplane/kplane/pkg/client"
	tables "github.com/kplane/kplane/pkg/printers"
)

var getCommand = &command{
	name:    "get",
	usage:   "KIND [NAME...] | KIND/NAME...",
	summary: "Display one or many objects",
	example: `  # List pods in the default namespace, then in every namespace
  kpctl get pods
  kpctl get po -A

  # One replica set as YAML that 'kpctl apply -f' accepts again
  kpctl get rs frontend -o yaml

  # Select by label and field, with extra columns
  kpctl get pods -l app=web,tier!=db --field-selector spec.nodeName=node-1 -o wide

  # Watch pods change
  kpctl get pods -w`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		o := &getOptions{g: g}
		fs.stringFlag(&o.output, "output", "o", "", "output format: wide, yaml, json or name")
		fs.stringFlag(&o.selector, "selector", "l", "", "label selector, e.g. app=web,tier in (fe,be),!legacy")
		fs.StringVar(&o.fieldSelector, "field-selector", "", "field selector, e.g. status.phase=Running,spec.nodeName=node-1")
		fs.boolFlag(&o.allNamespaces, "all-namespaces", "A", false, "list objects across all namespaces")
		fs.boolFlag(&o.watch, "watch", "w", false, "after listing, print objects as they change")
		fs.BoolVar(&o.noHeaders, "no-headers", false, "leave out the table header")
		return o.run
	},
}

type getOptions struct {
	g                       *globals
	output                  string
	selector, fieldSelector string
	allNamespaces, watch    bool
	noHeaders               bool
}

// outputs are the -o values get accepts.
var outputs = []string{"", "wide", "yaml", "json", "name"}

func checkOutput(o string) error {
	for _, ok := range outputs {
		if o == ok {
			return nil
		}
	}
	return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json, name, wide, yaml", o)
}

func (o *getOptions) run(ctx context.Context, e *env, args []string) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if len(args) > 0 && strings.Contains(args[0], ",") && !strings.Contains(args[0], "/") {
		return o.runKinds(ctx, e, args)
	}
	kind, targets, err := parseTargets(args)
	if err != nil {
		return err
	}
	if len(targets) > 0 && (o.selector != "" || o.fieldSelector != "") {
		return errors.New("name cannot be provided when a selector is specified")
	}
	if o.watch && len(targets) > 1 {
		return errors.New("watch is only supported on individual resources and resource collections, but 2 or more were found")
	}
	a, err := o.g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	p := &objectPrinter{e: e, output: o.output, noHeaders: o.noHeaders}

	if o.watch {
		if kind == nil {
			kind = targets[0].kind
		}
		fields := o.fieldSelector
		if len(targets) == 1 {
			fields = "metadata.name=" + targets[0].name
		}
		return o.listAndWatch(ctx, a, p, kind, fields)
	}
	if len(targets) == 0 {
		ns := o.g.namespaceFor(kind)
		if o.allNamespaces {
			ns = ""
		}
		p.withNamespace = o.allNamespaces && kind.Namespaced
		req := &kplanev1.ListRequest{Kind: kind.Name, Namespace: ns, LabelSelector: o.selector, FieldSelector: o.fieldSelector}
		if o.output == "" || o.output == "wide" {
			// A table keeps each page's rows, not its objects: listing
			// 100,000 pods then holds a few MB instead of every pod.
			t := tables.NewBuilder(e.stdout, kind.Name, p.tableOptions())
			if _, err := a.listPages(ctx, req, t.Add); err != nil {
				return err
			}
			if t.Len() == 0 {
				e.stderr.print(noResourcesFound(kind, ns))
				return nil
			}
			return t.Write()
		}
		objs, _, err := a.list(ctx, req)
		if err != nil {
			return err
		}
		if len(objs) == 0 && o.output != "yaml" && o.output != "json" {
			e.stderr.print(noResourcesFound(kind, ns))
			return nil
		}
		return p.print(kind.Name, objs, true)
	}

	var found []*kplanev1.Object
	var failed []error
	for _, t := range targets {
		obj, err := a.get(ctx, t.kind.Name, o.g.namespaceFor(t.kind), t.name)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		found = append(found, obj)
	}
	if err := p.printMixed(found, len(targets) > 1); err != nil {
		return err
	}
	return report(e, failed)
}

// runKinds lists several kinds at once, "kpctl get pv,pvc,sc": one table
// per kind that has objects, as kubectl prints them.
func (o *getOptions) runKinds(ctx context.Context, e *env, args []string) error {
	if len(args) > 1 {
		return fmt.Errorf("names cannot be given with several kinds (%q): use KIND/NAME arguments", args[0])
	}
	if o.watch {
		return errors.New("watch is only supported on individual resources and resource collections, but 2 or more were found")
	}
	var ks []*kplanev1.KindInfo
	for _, k := range strings.Split(args[0], ",") {
		info, err := kinds.Resolve(k)
		if err != nil {
			return err
		}
		ks = append(ks, info)
	}
	a, err := o.g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	p := &objectPrinter{e: e, output: o.output, noHeaders: o.noHeaders}
	var all []*kplanev1.Object
	for _, kind := range ks {
		ns := o.g.namespaceFor(kind)
		if o.allNamespaces {
			ns = ""
		}
		objs, _, err := a.list(ctx, &kplanev1.ListRequest{Kind: kind.Name, Namespace: ns, LabelSelector: o.selector, FieldSelector: o.fieldSelector})
		if err != nil {
			return err
		}
		p.withNamespace = p.withNamespace || (o.allNamespaces && kind.Namespaced)
		all = append(all, objs...)
	}
	if len(all) == 0 && o.output != "yaml" && o.output != "json" {
		e.stderr.print(noResourcesFound(ks[0], o.g.namespaceFor(ks[0])))
		return nil
	}
	return p.printMixed(all, true)
}

// listAndWatch prints the current objects, then each change as it arrives,
// until ctx ends or the stream fails.
func (o *getOptions) listAndWatch(ctx context.Context, a *api, p *objectPrinter, kind *kplanev1.KindInfo, fields string) error {
	ns := o.g.namespaceFor(kind)
	if o.allNamespaces {
		ns = ""
	}
	p.withNamespace = o.allNamespaces && kind.Namespaced
	objs, rv, err := a.list(ctx, &kplanev1.ListRequest{Kind: kind.Name, Namespace: ns, LabelSelector: o.selector, FieldSelector: fields})
	if err != nil {
		return err
	}
	if err := p.stream(kind.Name, objs); err != nil {
		return err
	}
	s, err := a.watch(ctx, &kplanev1.WatchRequest{Kind: kind.Name, Namespace: ns, LabelSelector: o.selector, FieldSelector: fields, ResourceVersion: rv})
	if err != nil {
		return err
	}
	for {
		ev, err := s.Recv()
		switch {
		case ctx.Err() != nil || errors.Is(err, io.EOF):
			return nil // interrupted by the user, or the server ended the watch
		case err != nil:
			if client.IsOutOfRange(err) {
				return fmt.Errorf("watch expired, run the command again: %w", a.wrap(err))
			}
			return a.wrap(err)
		}
		switch ev.GetType() {
		case kplanev1.EventType_EVENT_TYPE_BOOKMARK:
			continue
		case kplanev1.EventType_EVENT_TYPE_ERROR:
			return fmt.Errorf("watch: %s", ev.GetError())
		}
		if err := p.stream(kind.Name, []*kplanev1.Object{ev.GetObject()}); err != nil {
			return err
		}
	}
}

// objectPrinter prints objects in the chosen output format.
type objectPrinter struct {
	e             *env
	output        string
	noHeaders     bool
	withNamespace bool
	// streamed counts objects printed by stream, which prints YAML
	// separators only between objects.
	streamed int
	// table keeps a watch's rows aligned with the rows before them.
	table *tables.Stream
}

// print prints one kind's objects; asList makes yaml/json a List even for
// one object, as for a listing.
func (p *objectPrinter) print(kind string, objs []*kplanev1.Object, asList bool) error {
	w := p.e.stdout
	switch p.output {
	case "yaml":
		return manifest.WriteYAML(w, objs, asList)
	case "json":
		return manifest.WriteJSON(w, objs, asList)
	case "name":
		for _, obj := range objs {
			w.println(kinds.Ref(obj.KindName(), obj.Meta().GetName()))
		}
		return w.err
	default:
		return tables.Table(w, kind, objs, p.tableOptions())
	}
}

func (p *objectPrinter) tableOptions() tables.TableOptions {
	return tables.TableOptions{Wide: p.output == "wide", WithNamespace: p.withNamespace, NoHeaders: p.noHeaders, Now: p.e.now}
}

// printMixed prints objects that may be of several kinds: one table per
// run of the same kind, or one yaml/json document.
func (p *objectPrinter) printMixed(objs []*kplanev1.Object, asList bool) error {
	if len(objs) == 0 {
		return nil
	}
	if p.output == "yaml" || p.output == "json" || p.output == "name" {
		return p.print(objs[0].KindName(), objs, asList)
	}
	start := 0
	for i := 1; i <= len(objs); i++ {
		if i < len(objs) && objs[i].KindName() == objs[start].KindName() {
			continue
		}
		if start > 0 {
			p.e.stdout.println()
		}
		if err := p.print(objs[start].KindName(), objs[start:i], false); err != nil {
			return err
		}
		start = i
	}
	return nil
}

// stream prints objects as part of a watch: the table header only once,
// YAML documents separated by "---".
func (p *objectPrinter) stream(kind string, objs []*kplanev1.Object) error {
	if p.output == "" || p.output == "wide" {
		if p.table == nil {
			p.table = tables.NewStream(p.e.stdout, kind, p.tableOptions())
		}
		return p.table.Print(objs)
	}
	for _, obj := range objs {
		var err error
		switch p.output {
		case "yaml":
			if p.streamed > 0 {
				p.e.stdout.println("---")
			}
			err = manifest.WriteYAML(p.e.stdout, []*kplanev1.Object{obj}, false)
		case "json":
			err = manifest.WriteJSON(p.e.stdout, []*kplanev1.Object{obj}, false)
		default:
			err = p.print(kind, []*kplanev1.Object{obj}, false)
		}
		if err != nil {
			return err
		}
		p.streamed++
	}
	return nil
}
