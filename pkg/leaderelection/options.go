package leaderelection

import (
	"flag"
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
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration,
		"How long standbys wait after the last renewal they saw before taking over the lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline,
		"How long the leader keeps trying to renew before it stops leading. Less than the lease duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", DefaultRetryPeriod,
		"Interval between attempts to acquire or renew the lease. Less than the renew deadline.")
	fs.StringVar(&o.Identity, "id", "",
		"Identity of this process in leader election (default hostname_pid).")
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
