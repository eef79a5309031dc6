// Package leakctl is a test-only controller loop that misbehaves when
// asked, to measure the blast radius of one bad loop hosted in kcm
// against the same loop in a process of its own (make bench-mono). While
// leading it watches the Secret kplane-system/leakctl-trigger: with
// data mode=leak it keeps --leak-mb-per-second more memory every second;
// with mode=panic it deletes the Secret (so that only one replica
// panics) and panics outside any reconcile, which ends its process.
package leakctl

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Name is the loop's name and Lease.
const Name = "leakctl"

// Trigger is the name of the Secret in kplane-system that sets the mode.
const Trigger = "leakctl-trigger"

type leak struct {
	mbPerSecond int
	secrets     *informer.Informer
	kept        [][]byte
}

// NewService returns the misbehaving loop.
func NewService() app.Service {
	l := &leak{}
	return app.Service{
		Name: Name, HealthAddr: ":10290", LeaderElected: true,
		AddFlags: func(fs *flag.FlagSet) {
			fs.IntVar(&l.mbPerSecond, "leak-mb-per-second", 20, "memory kept per second in mode=leak")
		},
		Setup: func(c *app.Context) (app.Reconciler, error) {
			var err error
			l.secrets, err = c.Informers.For(informer.Selection{Kind: "Secret", Namespace: kplanev1.NamespaceSystem})
			return nil, err
		},
		Run: l.run,
	}
}

func (l *leak) mode() string {
	o, ok := l.secrets.Store().GetByName(kplanev1.NamespaceSystem, Trigger)
	if !ok {
		return ""
	}
	s, ok := o.Message().(*kplanev1.Secret)
	if !ok {
		return ""
	}
	return string(s.GetData()["mode"])
}

func (l *leak) run(ctx context.Context, c *app.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		switch l.mode() {
		case "panic":
			if _, err := client.Secrets(c.Client).Delete(ctx, kplanev1.NamespaceSystem, Trigger, client.DeleteOptions{}); err != nil && !client.IsNotFound(err) {
				return fmt.Errorf("delete the trigger: %w", err)
			}
			c.Logger.Error("panicking on request (mode=panic)")
			panic("leakctl: asked to panic")
		case "leak":
			b := make([]byte, l.mbPerSecond<<20/10)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // touch every page, so it counts in RSS
			}
			l.kept = append(l.kept, b)
		}
	}
}
