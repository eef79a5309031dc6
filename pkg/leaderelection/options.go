package leaderelection

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Options are the command-line settings of leader election.
type Options struct {
	// LeaderElect enables leader election; without it the process acts
	// as the leader from the start.
	LeaderElect bool
	// LeaseDuration, RenewDeadline and RetryPeriod are as in Config.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Identity of this candidate; DefaultIdentity() when empty.
	Identity string
}

// AddFlags registers the leader election flags on fs, with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.LeaderElect, "leader-elect", true,
		"Elect a leader among the replicas through a Lease; only the leader works.")
	fs.DurationVar(&o.LeaseDuration, FlagLeaseDuration, DefaultLeaseDuration,
		"How long standbys wait after the last renewal they saw before taking over the lease.")
	fs.DurationVar(&o.RenewDeadline, FlagRenewDeadline, DefaultRenewDeadline,
		"How long the leader keeps trying to renew before it stops leading. Less than the lease duration (the default shrinks to 2/3 of a shorter lease).")
	fs.DurationVar(&o.RetryPeriod, FlagRetryPeriod, DefaultRetryPeriod,
		"Interval between attempts to acquire or renew the lease. Less than the renew deadline (the default shrinks to 1/5 of a shorter deadline).")
	fs.StringVar(&o.Identity, "id", "",
		"Identity of this process in leader election (default hostname_pid).")
}

// Flag names, for Complete's errors and for callers that check them too.
const (
	FlagLeaseDuration = "leader-elect-lease-duration"
	FlagRenewDeadline = "leader-elect-renew-deadline"
	FlagRetryPeriod   = "leader-elect-retry-period"
)

// Complete fits the durations left at their defaults to those given on
// fs's command line (fs parsed, with AddFlags' flags), so that retry
// period < renew deadline < lease duration holds: a renew deadline that
// would not be shorter than the lease becomes 2/3 of it, and a retry period
// that would not be shorter than the renew deadline becomes 1/5 of it (the
// ratios of the defaults, 15s:10s:2s). So --leader-elect-lease-duration=4s
// alone gives 4s, 2.666s and 2s. Durations given explicitly are kept; when
// they conflict, the error names the flags.
func (o *Options) Complete(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given[FlagRenewDeadline] && o.RenewDeadline >= o.LeaseDuration {
		o.RenewDeadline = o.LeaseDuration * 2 / 3
	}
	if !given[FlagRetryPeriod] && o.RetryPeriod >= o.RenewDeadline {
		o.RetryPeriod = o.RenewDeadline / 5
	}
	switch {
	case o.LeaseDuration <= 0 || o.RenewDeadline <= 0 || o.RetryPeriod <= 0:
		return fmt.Errorf("--%s (%v), --%s (%v) and --%s (%v) must be positive",
			FlagLeaseDuration, o.LeaseDuration, FlagRenewDeadline, o.RenewDeadline, FlagRetryPeriod, o.RetryPeriod)
	case o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("--%s (%v) must be less than --%s (%v), or the leader could still act after others consider the lease expired",
			FlagRenewDeadline, o.RenewDeadline, FlagLeaseDuration, o.LeaseDuration)
	case o.RetryPeriod >= o.RenewDeadline:
		return fmt.Errorf("--%s (%v) must be less than --%s (%v), or the leader gets no second try to renew",
			FlagRetryPeriod, o.RetryPeriod, FlagRenewDeadline, o.RenewDeadline)
	}
	return nil
}

// ApplyTo copies the durations and the identity (DefaultIdentity() when
// unset) into cfg.
func (o *Options) ApplyTo(cfg *Config) {
	cfg.LeaseDuration = o.LeaseDuration
	cfg.RenewDeadline = o.RenewDeadline
	cfg.RetryPeriod = o.RetryPeriod
	cfg.Identity = o.Identity
	if cfg.Identity == "" {
		cfg.Identity = DefaultIdentity()
	}
}

// DefaultIdentity returns hostname_pid, which tells apart the replicas of
// a controller on different hosts and in one host alike.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + "_" + strconv.Itoa(os.Getpid())
}
