package app

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/health"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/pkg/logging"
)

// options are the parsed common flags.
type options struct {
	client        client.Options
	leader        leaderelection.Options
	logging       logging.Options
	healthAddr    string
	profiling     health.Profiling
	resyncPeriod  time.Duration
	workers       int
	shutdownGrace time.Duration
	logOutput     io.Writer
}

// usageError marks flag problems (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func parseFlags(svc Service, args []string) (*options, error) {
	o := &options{logOutput: os.Stderr}
	fs := flag.NewFlagSet(svc.Name, flag.ContinueOnError)
	o.client.AddFlags(fs)
	o.logging.AddFlags(fs)
	fs.StringVar(&o.healthAddr, "health-addr", svc.HealthAddr, "address of the HTTP server for /healthz, /readyz and /metrics (empty disables it)")
	o.profiling.AddFlag(fs)
	resync := svc.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	fs.DurationVar(&o.resyncPeriod, "resync-period", resync, "how often informers re-deliver every cached object (0 disables)")
	workers := svc.Workers
	if workers <= 0 {
		workers = 1
	}
	fs.IntVar(&o.workers, "workers", workers, "number of concurrent reconciles")
	fs.DurationVar(&o.shutdownGrace, flagShutdownGrace, DefaultShutdownGrace,
		"on SIGTERM, how long in-flight reconciles may run before they are cancelled (the default shrinks to fit a short leader-election lease)")
	if svc.LeaderElected {
		o.leader.AddFlags(fs)
	}
	if svc.AddFlags != nil {
		svc.AddFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, err
		}
		return nil, &usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	if err := o.logging.Validate(); err != nil {
		return nil, &usageError{err}
	}
	if svc.CheckFlags != nil {
		if err := svc.CheckFlags(); err != nil {
			return nil, &usageError{err}
		}
	}
	if o.workers < 1 {
		return nil, &usageError{fmt.Errorf("--workers must be at least 1, not %d", o.workers)}
	}
	if o.resyncPeriod < 0 {
		return nil, &usageError{fmt.Errorf("--resync-period must not be negative")}
	}
	if o.shutdownGrace < 0 {
		return nil, &usageError{fmt.Errorf("--%s must not be negative", flagShutdownGrace)}
	}
	if !svc.LeaderElected {
		o.leader.LeaderElect = false
	}
	if o.leader.LeaderElect {
		if err := o.completeLeaderFlags(fs); err != nil {
			return nil, &usageError{err}
		}
	}
	return o, nil
}

const flagShutdownGrace = "shutdown-grace-period"

// completeLeaderFlags fits the leader-election durations and the shutdown
// grace left at their defaults to the ones given on the command line, and
// rejects explicit values that conflict. The lease is not renewed while
// in-flight work finishes, so the grace must end before a standby may take
// over: grace < lease duration - retry period (the last renewal may be a
// retry period old). A default grace that does not fit becomes half of
// that span.
func (o *options) completeLeaderFlags(fs *flag.FlagSet) error {
	if err := o.leader.Complete(fs); err != nil {
		return err
	}
	limit := o.leader.LeaseDuration - o.leader.RetryPeriod
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == flagShutdownGrace })
	if !given && o.shutdownGrace >= limit {
		o.shutdownGrace = limit / 2
	}
	if o.shutdownGrace >= limit {
		return fmt.Errorf("--%s (%v) must be less than --%s minus --%s (%v)",
			flagShutdownGrace, o.shutdownGrace, leaderelection.FlagLeaseDuration, leaderelection.FlagRetryPeriod, limit)
	}
	return nil
}

func (o *options) logger(name string) hclog.Logger {
	return o.logging.New(name, o.logOutput)
}
