package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/framework/plugins"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// handle is the framework.Handle plugins get.
type handle struct {
	s   *Scheduler
	inf *informer.Factory
}

func (h *handle) Client() kplanev1.ResourcesClient        { return h.s.api }
func (h *handle) Informer(kind string) *informer.Informer { return h.inf.ForKind(kind) }
func (h *handle) Logger() hclog.Logger                    { return h.s.log }

func (h *handle) WaitingPod(uid string) framework.WaitingPod {
	for _, f := range h.s.profiles {
		if w := f.WaitingPod(uid); w != nil {
			return w
		}
	}
	return nil
}

// setupProfiles reads --config (or takes the default profile) and builds
// a framework per profile from the in-tree plugins and the binary's own.
func (s *Scheduler) setupProfiles(c *app.Context) error {
	registry := plugins.NewInTreeRegistry()
	if err := registry.Merge(s.cfg.Registry); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	cfg := &framework.Configuration{APIVersion: framework.ConfigAPIVersion, Kind: framework.ConfigKind,
		Profiles: []framework.Profile{{SchedulerName: kplanev1.DefaultSchedulerName}}}
	if s.cfg.ConfigFile != "" {
		var err error
		if cfg, err = framework.LoadConfig(s.cfg.ConfigFile); err != nil {
			return fmt.Errorf("--config %s: %w", s.cfg.ConfigFile, err)
		}
	}
	s.handle = &handle{s: s, inf: c.Informers}
	profiles, err := framework.NewProfiles(cfg, registry, plugins.DefaultPlugins(), s.handle, uint64(time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("--config %s: %w", s.cfg.ConfigFile, err)
	}
	s.profiles = profiles
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range profiles {
			if !yield(n) {
				return
			}
		}
	}) {
		var parts []string
		for point, list := range profiles[name].PluginNames() {
			parts = append(parts, point+"="+strings.Join(list, ","))
		}
		slices.Sort(parts)
		s.log.Info("profile", "scheduler_name", name, "plugins", strings.Join(parts, " "))
	}
	return nil
}

// profileFor returns the framework of the pod's schedulerName (nil when
// this scheduler has no such profile: the pod is left alone).
func (s *Scheduler) profileFor(pod *kplanev1.Pod) *framework.Framework {
	name := pod.GetSpec().GetSchedulerName()
	if name == "" {
		name = kplanev1.DefaultSchedulerName
	}
	return s.profiles[name]
}

// needsScheduling reports whether pod waits for this scheduler: no node
// yet, not being deleted, not finished, and naming one of its profiles.
func (s *Scheduler) needsScheduling(pod *kplanev1.Pod) bool {
	return core.Unassigned(pod) && s.profileFor(pod) != nil
}

// Go runs fn on the current term (see framework.Handle.Go).
func (h *handle) Go(fn func(ctx context.Context)) {
	h.s.mu.Lock()
	t := h.s.t
	if t != nil {
		t.bg.Add(1)
	}
	h.s.mu.Unlock()
	if t == nil {
		// Not leading (the term just ended): fn sees an ended context at
		// once, so it can clean up what it set up for the work.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		fn(ctx)
		return
	}
	go func() {
		defer t.bg.Done()
		fn(t.ctx)
	}()
}

// Event hands an Event to the current term's writers (dropped while
// standing by: only the leader acts).
func (h *handle) Event(obj *kplanev1.Object, eventType, reason, message string) {
	h.s.mu.Lock()
	t := h.s.t
	h.s.mu.Unlock()
	if t != nil {
		h.s.event(t, obj, eventType, reason, message)
	}
}
