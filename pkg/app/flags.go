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
	o.addCommonFlags(fs, svc.HealthAddr, svc.ResyncPeriod, svc.LeaderElected)
	fs.IntVar(&o.workers, "workers", defaultWorkers(svc), "number of concurrent reconciles")
	if svc.AddFlags != nil {
		svc.AddFlags(fs)
	}
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	if err := o.check(fs, svc.LeaderElected); err != nil {
		return nil, err
	}
	if svc.CheckFlags != nil {
		if err := svc.CheckFlags(); err != nil {
			return nil, &usageError{err}
		}
	}
	if err := checkWorkers("--workers", o.workers); err != nil {
		return nil, err
	}
	return o, nil
}

// addCommonFlags registers the flags every binary has (a process hosting
// several services has them once).
func (o *options) addCommonFlags(fs *flag.FlagSet, healthAddr string, resync time.Duration, leaderElected bool) {
	o.client.AddFlags(fs)
	o.logging.AddFlags(fs)
	fs.StringVar(&o.healthAddr, "health-addr", healthAddr, "address of the HTTP server for /healthz, /readyz and /metrics (empty disables it)")
	o.profiling.AddFlag(fs)
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	fs.DurationVar(&o.resyncPeriod, "resync-period", resync, "how often informers re-deliver every cached object (0 disables)")
	fs.DurationVar(&o.shutdownGrace, flagShutdownGrace, DefaultShutdownGrace,
		"on SIGTERM, how long in-flight reconciles may run before they are cancelled (the default shrinks to fit a short leader-election lease)")
	if leaderElected {
		o.leader.AddFlags(fs)
	}
}

func defaultWorkers(svc Service) int {
	if svc.Workers <= 0 {
		return 1
	}
	return svc.Workers
}

// parseArgs parses args, turning errors into usage errors.
func parseArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	return nil
}

// check validates the parsed common flags and completes the leader
// election ones.
func (o *options) check(fs *flag.FlagSet, leaderElected bool) error {
	if err := o.logging.Validate(); err != nil {
		return &usageError{err}
	}
	if o.resyncPeriod < 0 {
		return &usageError{fmt.Errorf("--resync-period must not be negative")}
	}
	if o.shutdownGrace < 0 {
		return &usageError{fmt.Errorf("--%s must not be negative", flagShutdownGrace)}
	}
	if !leaderElected {
		o.leader.LeaderElect = false
	}
	if o.leader.LeaderElect {
		if err := o.completeLeaderFlags(fs); err != nil {
			return &usageError{err}
		}
	}
	return nil
}

func checkWorkers(flagName string, n int) error {
	if n < 1 {
		return &usageError{fmt.Errorf("%s must be at least 1, not %d", flagName, n)}
	}
	return nil
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
