package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
)

var apiResourcesCommand = &command{
	name:    "api-resources",
	usage:   "",
	summary: "List the kinds the API serves, with their short names",
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q", args)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSHORTNAMES\tAPIVERSION\tNAMESPACED\tKIND")
			for _, k := range kplanev1.Kinds() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\n", kinds.Plural(k.Name), strings.Join(kinds.ShortNames(k.Name), ","), kinds.APIVersion(k.Name), k.Namespaced, k.Name)
			}
			return tw.Flush()
		}
	},
}
