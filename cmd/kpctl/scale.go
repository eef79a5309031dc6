package main

import (
	"context"
	"errors"
	"fmt"
	"math"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
)

var scaleCommand = &command{
	name:    "scale",
	usage:   "KIND NAME --replicas=N | KIND/NAME --replicas=N",
	summary: "Set the number of replicas of a ReplicaSet or ReplicationController",
	example: `  kpctl scale rs frontend --replicas=5

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
				if t.kind.Name != "ReplicaSet" && t.kind.Name != "ReplicationController" {
					return fmt.Errorf("cannot scale %s: only replicasets and replicationcontrollers can be scaled", kinds.Plural(t.kind.Name))
				}
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			var failed []error
			for _, t := range targets {
				err := retryOnConflict(ctx, func() error {
					obj, err := a.get(ctx, t.kind.Name, g.namespaceFor(t.kind), t.name)
					if err != nil {
						return err
					}
					spec := replicasOf(obj)
					if current >= 0 && int64(*spec) != current {
						return fmt.Errorf("expected replicas to be %d, was %d", current, *spec)
					}
					*spec = int32(replicas)
					_, err = a.update(ctx, obj)
					return err
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

// replicasOf returns a pointer to spec.replicas of a replica set or
// replication controller, creating the spec (and replicas, default 1) if
// unset.
func replicasOf(obj *kplanev1.Object) *int32 {
	var p **int32
	switch {
	case obj.GetReplicaSet() != nil:
		rs := obj.GetReplicaSet()
		if rs.Spec == nil {
			rs.Spec = &kplanev1.ReplicaSetSpec{}
		}
		p = &rs.Spec.Replicas
	default:
		rc := obj.GetReplicationController()
		if rc.Spec == nil {
			rc.Spec = &kplanev1.ReplicationControllerSpec{}
		}
		p = &rc.Spec.Replicas
	}
	if *p == nil {
		one := int32(1)
		*p = &one
	}
	return *p
}
