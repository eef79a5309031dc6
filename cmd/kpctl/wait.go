package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/pkg/client"
)

var waitCommand = &command{
	name:    "wait",
	usage:   "--for=condition=TYPE[=STATUS]|--for=delete (TYPE/NAME ... | TYPE NAME ...)",
	summary: "Wait until objects have a condition, or are deleted",
	example: `  # Wait for a Job to complete, or to fail
  kpctl wait --for=condition=complete job/pi --timeout=60s
  kpctl wait --for=condition=failed job/pi

  # Wait for pods to be Ready, and for a pod to be gone
  kpctl wait --for=condition=Ready pod/web-1 pod/web-2
  kpctl wait --for=condition=Ready=false pod/web-1
  kpctl wait --for=delete pod/web-1 --timeout=2m`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		w := &waiter{}
		fs.StringVar(&w.forSpec, "for", "", `what to wait for: "delete", or "condition=TYPE" (status True) or "condition=TYPE=STATUS"`)
		fs.DurationVar(&w.timeout, "timeout", 30*time.Second, "how long to wait for each object; 0 checks once")
		return func(ctx context.Context, e *env, args []string) error { return w.run(ctx, e, g, args) }
	},
}

// waiter is "kpctl wait".
type waiter struct {
	forSpec string
	timeout time.Duration

	deleted         bool
	condType, value string
}

func (w *waiter) parseFor() error {
	switch {
	case w.forSpec == "":
		return errors.New(`--for is required: "delete" or "condition=TYPE[=STATUS]"`)
	case strings.EqualFold(w.forSpec, "delete"):
		w.deleted = true
		return nil
	}
	key, cond, ok := strings.Cut(w.forSpec, "=")
	if !ok || !strings.EqualFold(key, "condition") || cond == "" {
		return fmt.Errorf(`unrecognized condition: %q: want "delete" or "condition=TYPE[=STATUS]"`, w.forSpec)
	}
	w.condType, w.value, ok = strings.Cut(cond, "=")
	if !ok {
		w.value = kplanev1.ConditionTrue
	}
	if w.condType == "" || w.value == "" {
		return fmt.Errorf(`unrecognized condition: %q: want "delete" or "condition=TYPE[=STATUS]"`, w.forSpec)
	}
	return nil
}

func (w *waiter) run(ctx context.Context, e *env, g *globals, args []string) error {
	if err := w.parseFor(); err != nil {
		return err
	}
	if w.timeout < 0 {
		return fmt.Errorf("invalid --timeout %v: must not be negative", w.timeout)
	}
	kind, ts, err := parseTargets(args)
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return fmt.Errorf("you must name the %s to wait for", kinds.Plural(kind.Name))
	}
	a, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	for _, t := range ts {
		if err := w.waitOne(ctx, a, t, g.namespaceFor(t.kind)); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(e.stdout, "%s condition met\n", kinds.Ref(t.kind.Name, t.name)); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return nil
}

// errTimeout is the message of a wait that ran out of time.
func errTimeout(t target) error {
	return fmt.Errorf("timed out waiting for the condition on %s/%s", kinds.Plural(t.kind.Name), t.name)
}

// waitOne reads the object, then watches it from that revision until the
// condition holds (or it is gone, for --for=delete): no polling. A watch
// the server ends is resumed after a fresh read.
func (w *waiter) waitOne(ctx context.Context, a *api, t target, ns string) error {
	if w.timeout == 0 { // check once
		obj, err := a.get(ctx, t.kind.Name, ns, t.name)
		switch {
		case client.IsNotFound(err) && w.deleted:
			return nil
		case err != nil:
			return err
		case w.met(obj):
			return nil
		}
		return errTimeout(t)
	}
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	for {
		obj, err := a.get(wctx, t.kind.Name, ns, t.name)
		var rv string
		switch {
		case client.IsNotFound(err):
			if w.deleted {
				return nil
			}
			return err
		case err != nil:
			return w.failed(ctx, wctx, t, err)
		default:
			if w.met(obj) {
				return nil
			}
			rv = obj.Meta().GetResourceVersion()
		}
		done, err := w.watch(wctx, a, t, ns, rv)
		if done || err != nil {
			return w.failed(ctx, wctx, t, err)
		}
	}
}

// failed turns our deadline into the timeout message; a nil error stays
// nil. The server ends a call at the deadline it was sent, which may be a
// moment before wctx's own timer fires: a DeadlineExceeded waits for it.
func (w *waiter) failed(ctx, wctx context.Context, t target, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if status.Code(err) == codes.DeadlineExceeded {
		select {
		case <-wctx.Done():
		case <-time.After(time.Second):
		}
	}
	if wctx.Err() != nil {
		return errTimeout(t)
	}
	return err
}

// watch follows the object from rv; done when the wait is over (met, or
// gone), false with no error when the server ended the watch.
func (w *waiter) watch(ctx context.Context, a *api, t target, ns, rv string) (bool, error) {
	s, err := a.watch(ctx, &kplanev1.WatchRequest{Kind: t.kind.Name, Namespace: ns,
		FieldSelector: "metadata.name=" + t.name, ResourceVersion: rv})
	if err != nil {
		return false, err
	}
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, a.wrap(err)
		}
		switch ev.GetType() {
		case kplanev1.EventType_EVENT_TYPE_DELETED:
			if w.deleted {
				return true, nil
			}
			return false, fmt.Errorf("%s was deleted while waiting for condition %s", kinds.Ref(t.kind.Name, t.name), w.condType)
		case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
			if w.met(ev.GetObject()) {
				return true, nil
			}
		case kplanev1.EventType_EVENT_TYPE_ERROR:
			return false, nil // e.g. a compacted revision: read again
		}
	}
}

// met reports whether obj has the condition (never, for --for=delete).
func (w *waiter) met(obj *kplanev1.Object) bool {
	if w.deleted {
		return false
	}
	for _, c := range Conditions(obj) {
		if strings.EqualFold(c.GetType(), w.condType) && strings.EqualFold(c.GetStatus(), w.value) {
			return true
		}
	}
	return false
}

// Conditions returns status.conditions of any kind that has them.
func Conditions(obj *kplanev1.Object) []*kplanev1.Condition {
	m := obj.ProtoReflect()
	od := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	if od == nil {
		return nil
	}
	msg := m.Get(od).Message()
	sf := msg.Descriptor().Fields().ByName("status")
	if sf == nil || sf.Message() == nil || !msg.Has(sf) {
		return nil
	}
	st := msg.Get(sf).Message()
	cf := st.Descriptor().Fields().ByName("conditions")
	if cf == nil || !cf.IsList() || cf.Message() == nil {
		return nil
	}
	var out []*kplanev1.Condition
	list := st.Get(cf).List()
	for i := 0; i < list.Len(); i++ {
		if c, ok := list.Get(i).Message().Interface().(*kplanev1.Condition); ok {
			out = append(out, c)
		}
	}
	return out
}
