package main

import (
	"context"
	"errors"
	"fmt"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// cordonCommand and uncordonCommand set and clear spec.unschedulable on a
// node: the scheduler places no new pod on a cordoned node, while the pods
// already there keep running.
var (
	cordonCommand = &command{
		name:    "cordon",
		usage:   "NODE",
		summary: "Mark a node as unschedulable",
		example: `  # Stop new pods from being placed on node-1
  kpctl cordon node-1`,
		setup: func(_ *flagSet, g *globals) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				return setUnschedulable(ctx, e, g, args, true)
			}
		},
	}
	uncordonCommand = &command{
		name:    "uncordon",
		usage:   "NODE",
		summary: "Mark a node as schedulable again",
		example: `  kpctl uncordon node-1`,
		setup: func(_ *flagSet, g *globals) func(context.Context, *env, []string) error {
			return func(ctx context.Context, e *env, args []string) error {
				return setUnschedulable(ctx, e, g, args, false)
			}
		},
	}
)

// setUnschedulable sets spec.unschedulable of the node named by args[0] to
// want, as a compare-and-swap update retried on conflicts, so a concurrent
// change to the node (its agent, a taint) is never overwritten.
func setUnschedulable(ctx context.Context, e *env, g *globals, args []string, want bool) error {
	if len(args) != 1 {
		return errors.New("exactly one node name is required")
	}
	name := args[0]
	verb := "uncordoned"
	if want {
		verb = "cordoned"
	}
	a, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	changed := false
	err = retryOnConflict(ctx, func() error {
		obj, err := a.get(ctx, "Node", "", name)
		if err != nil {
			return err
		}
		node := obj.GetNode()
		if node.GetSpec().GetUnschedulable() == want {
			changed = false
			return nil
		}
		if node.Spec == nil {
			node.Spec = &kplanev1.NodeSpec{}
		}
		node.Spec.Unschedulable = want
		if _, err := a.update(ctx, obj); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("node/%s: %w", name, err)
	}
	if !changed {
		e.stdout.printf("node/%s already %s\n", name, verb)
		return nil
	}
	e.stdout.printf("node/%s %s\n", name, verb)
	return nil
}
