package main

import (
	"context"
	"errors"
	"fmt"
	"math"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/pkg/strategy"
)

var scaleCommand = &command{
	name:    "scale",
	usage:   "KIND NAME --replicas=N | KIND/NAME --replicas=N",
	summary: "Set the number of replicas of a Deployment, ReplicaSet or ReplicationController",
	example: `  kpctl scale deploy web --replicas=5

  # Only scale if nobody changed it meanwhile
  kpctl scale rc web --current-replicas=2 --replicas=3`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		replicas, current := int64(-1), int64(-1)
		fs.Int64Var(&replicas, "replicas", -1, "the new number of replicas (required)")
		fs.Int64Var(&current, "current-replicas", -1, "only scale when the current number of replicas is this")
		return func(ctx context.Context, e *env, args []string) error {
			if replicas < 0 || replicas > math.MaxInt32 {
				return errors.New("the --replicas=N flag is required, with 0 <= N <= 2147483647")
			}
			_, targets, err := parseTargets(args)
			if err != nil {
				return err
			}
			if len(targets) == 0 {
				return errors.New("resource(s) were provided, but no name was specified")
			}
			for _, t := range targets {
				if _, ok := strategy.For(t.kind.Name).(strategy.Scaler); !ok {
					return fmt.Errorf("cannot scale %s: only deployments, replicasets, replicationcontrollers and statefulsets can be scaled", kinds.Plural(t.kind.Name))
				}
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			var failed []error
			for _, t := range targets {
				ns := g.namespaceFor(t.kind)
				err := retryOnConflict(ctx, func() error {
					resp, err := a.c.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: t.kind.Name, Namespace: ns, Name: t.name})
					if err != nil {
						return a.wrap(err)
					}
					s := resp.GetScale()
					if current >= 0 && int64(s.GetSpec().GetReplicas()) != current {
						return fmt.Errorf("expected replicas to be %d, was %d", current, s.GetSpec().GetReplicas())
					}
					meta := &kplanev1.ObjectMeta{Namespace: ns, Name: t.name}
					if current >= 0 {
						// The check above holds only for the version read.
						meta.ResourceVersion = s.GetMetadata().GetResourceVersion()
					}
					_, err = a.c.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: t.kind.Name,
						Scale: &kplanev1.Scale{Metadata: meta, Spec: &kplanev1.ScaleSpec{Replicas: int32(replicas)}}})
					return a.wrap(err)
				})
				if err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", kinds.Ref(t.kind.Name, t.name), err))
					continue
				}
				e.stdout.printf("%s scaled\n", kinds.Ref(t.kind.Name, t.name))
			}
			return report(e, failed)
		}
	},
}
