package main

import (
	"context"
	"fmt"
	"strings"

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
			tw := newColumns(e.stdout)
			tw.println("NAME\tSHORTNAMES\tAPIVERSION\tNAMESPACED\tKIND")
			for _, k := range kplanev1.Kinds() {
				tw.printf("%s\t%s\t%s\t%t\t%s\n", kinds.Plural(k.Name), strings.Join(kinds.ShortNames(k.Name), ","), kinds.APIVersion(k.Name), k.Namespaced, k.Name)
			}
			return tw.flush()
		}
	},
}
