package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
)

// authCommand is `kpctl auth can-i VERB KIND[/SUBRESOURCE] [NAME]`: it
// asks the apiserver (CheckAccess) whether the caller may do that, prints
// yes or no, and exits non-zero on no, as kubectl auth can-i does.
var authCommand = &command{
	name:    "auth",
	usage:   "can-i VERB KIND[/SUBRESOURCE] [NAME]",
	summary: "Check whether you are allowed to do something",
	example: `  kpctl auth can-i create pods
  kpctl auth can-i delete nodes node-1
  kpctl auth can-i update pods/status -n kube-apps
  kpctl auth can-i list secrets --all-namespaces`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		all := fs.Bool("all-namespaces", false, "ask about every namespace (a cluster-wide grant)")
		fs.alias("A", "all-namespaces")
		quiet := fs.Bool("quiet", false, "print nothing; the exit status is the answer")
		fs.alias("q", "quiet")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 || args[0] != "can-i" {
				return errors.New("auth needs a subcommand: can-i VERB KIND [NAME]")
			}
			args = args[1:]
			if len(args) < 2 || len(args) > 3 {
				return errors.New("can-i needs VERB KIND[/SUBRESOURCE] and at most a NAME, e.g. kpctl auth can-i create pods")
			}
			req := &kplanev1.CheckAccessRequest{Verb: args[0]}
			res, sub, _ := strings.Cut(args[1], "/")
			req.Resource, req.Subresource = res, sub
			namespaced := true
			if res != "*" {
				if k, err := kinds.Resolve(res); err == nil {
					r := k.Resource()
					req.Group, req.Resource, namespaced = r.Group, r.Plural, k.Namespaced
				}
			}
			if len(args) == 3 {
				req.Name = args[2]
			}
			if namespaced && !*all {
				req.Namespace = g.ns()
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			resp, err := a.c.CheckAccess(ctx, req)
			if err != nil {
				return fmt.Errorf("check access: %w", err)
			}
			if *quiet {
				if resp.GetAllowed() {
					return nil
				}
				return errSilent
			}
			if resp.GetAllowed() {
				e.stdout.printf("yes\n")
				return nil
			}
			if r := resp.GetReason(); r != "" {
				e.stdout.printf("no - %s\n", r)
			} else {
				e.stdout.printf("no\n")
			}
			return errSilent
		}
	},
}
