package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// Host describes a binary that runs several Services in one process, the
// shape of kube-controller-manager: kplane's bin/kcm. The services share
// one apiserver connection, one informer factory (loops that watch the
// same kind and selection share one watch and one cache), one metrics
// registry and one health server (/readyz for all, /readyz/<name> for
// each). Each leader-elected service still holds its own Lease,
// kplane-system/<service name>, exactly as its own binary does, so a
// loop can run in a Host on one machine and in its own binary on another
// and only one of them leads.
//
// What happens to the others when one loop misbehaves:
//   - A reconcile that panics is recovered, counted and retried, as in
//     its own binary; the other loops do not notice.
//   - A loop that loses its lease stops its work at once and stands again;
//     the other loops keep leading (every lease is renewed on its own).
//   - A fatal error of one loop (its Run fails, its election fails for
//     another reason than a lost lease) stops the whole process, with
//     every loop releasing its lease, and RunHost returns that error; a
//     binary of its own exits the same way, but alone.
//   - A panic outside a reconcile (in a Run loop or an event handler) and
//     an out-of-memory kill end the process, and every hosted loop with
//     it, where a binary of its own would take only itself down.
type Host struct {
	// Name of the binary: its logger name and the user agent of the
	// shared connection.
	Name string
	// HealthAddr is the default of --health-addr ("" = off).
	HealthAddr string
	// Services are every loop the binary can run, in start order; their
	// names must be unique. --controllers picks which run.
	Services []Service
}

// FlagControllers selects the hosted services.
const FlagControllers = "controllers"

// MainHost runs h with the process arguments until SIGTERM or SIGINT and
// exits as Main does: 0 after a clean shutdown, 2 for bad flags, 1
// otherwise.
func MainHost(h Host) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := RunHost(ctx, h, os.Args[1:])
	stop()
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(os.Stderr, "%s: %v\n", h.Name, err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", h.Name, err)
		os.Exit(1)
	}
}

// RunHost runs the services of h that --controllers selects with args
// until ctx ends, then shuts every one down cleanly (each releases its
// lease) and returns nil. It returns an error for bad flags, a failed
// start, or a fatal error of one service (after shutting all down).
func RunHost(ctx context.Context, h Host, args []string) error {
	if err := h.validate(); err != nil {
		return err
	}
	hf, err := parseHostFlags(h, args)
	if err != nil {
		return err
	}
	log := hf.common.logger(h.Name)
	hostCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
			log.Error("a hosted loop failed; stopping every loop of the process", "error", err)
		}
		errMu.Unlock()
		cancel()
	}

	rd := &readiness{}
	checks := map[string]func() error{}
	for _, svc := range hf.selected {
		checks[svc.Name] = rd.check(svc.Name)
	}
	proc, err := newProcess(hostCtx, h.Name, hf.common, log, rd.ready, checks)
	if err != nil {
		return err
	}
	defer proc.close()

	runners := make([]*runner, 0, len(hf.selected))
	for _, svc := range hf.selected {
		r, err := newServiceRunner(hostCtx, svc, hf.opts[svc.Name], proc, proc.factory.Scoped(), log.Named(svc.Name), fail)
		if err != nil {
			cancel()
			for _, r := range runners {
				r.close()
			}
			return fmt.Errorf("%s: %w", svc.Name, err)
		}
		runners = append(runners, r)
		rd.add(r)
	}
	names := make([]string, len(runners))
	for i, r := range runners {
		names[i] = r.svc.Name
	}
	log.Info("hosting", "controllers", strings.Join(names, ","), "apiserver", proc.client.Address(), "health_addr", healthAddrOf(proc))

	// Every Setup has asked for its informers: one watch per selection.
	proc.factory.Start(hostCtx)
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.run(); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	cancel()
	proc.factory.Wait()
	errMu.Lock()
	defer errMu.Unlock()
	if firstErr != nil {
		return firstErr
	}
	log.Info("stopped cleanly")
	return nil
}

func healthAddrOf(p *process) string {
	if p.health == nil {
		return ""
	}
	return p.health.Addr()
}

func (h Host) validate() error {
	if h.Name == "" {
		return errors.New("app: Host.Name is required")
	}
	if len(h.Services) == 0 {
		return errors.New("app: Host.Services is empty")
	}
	seen := map[string]bool{}
	for _, s := range h.Services {
		switch {
		case s.Name == "":
			return errors.New("app: every hosted Service needs a Name")
		case strings.ContainsAny(s.Name, ",*-. "):
			return fmt.Errorf("app: hosted Service name %q may not contain any of \",*-. \"", s.Name)
		case seen[s.Name]:
			return fmt.Errorf("app: two hosted Services are named %q", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// SelectControllers resolves a --controllers value against the names a
// Host knows, as kube-controller-manager's flag does: a comma-separated
// list where "*" is every controller, "name" adds one and "-name" leaves
// one out ("*,-jobctl" is all but jobctl). The result keeps the order of
// known. An unknown name, an empty item, a name both added and left out,
// or a selection of nothing is an error.
func SelectControllers(spec string, known []string) ([]string, error) {
	isKnown := map[string]bool{}
	for _, k := range known {
		isKnown[k] = true
	}
	all := false
	on, off := map[string]bool{}, map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		name, out := strings.CutPrefix(item, "-")
		switch {
		case item == "*":
			all = true
			continue
		case name == "":
			return nil, fmt.Errorf("--%s=%q: empty controller name", FlagControllers, spec)
		case !isKnown[name]:
			return nil, fmt.Errorf("--%s: unknown controller %q (known: %s)", FlagControllers, name, strings.Join(sorted(known), ", "))
		case out:
			off[name] = true
		default:
			on[name] = true
		}
		if on[name] && off[name] {
			return nil, fmt.Errorf("--%s: controller %q is both enabled and disabled", FlagControllers, name)
		}
	}
	var out []string
	for _, k := range known {
		if on[k] || (all && !off[k]) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s=%q selects no controller", FlagControllers, spec)
	}
	return out, nil
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
