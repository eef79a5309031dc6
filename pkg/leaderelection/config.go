package leaderelection

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Defaults, as in Kubernetes' controller managers.
const (
	DefaultNamespace     = kplanev1.NamespaceSystem
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Callbacks are called by Run. Each is optional.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine when this candidate
	// becomes the leader. Its context is cancelled when leadership ends
	// (lost, or Run's context cancelled); it must then return promptly,
	// because Run waits for it before releasing the lease and returning.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called by Run, after OnStartedLeading has
	// returned, whenever this candidate had been leading.
	OnStoppedLeading func()
	// OnNewLeader is called (on Run's goroutine, so it must not block)
	// when a different holder of the lease is observed, including this
	// candidate itself.
	OnNewLeader func(identity string)
}

// Config configures an Elector.
type Config struct {
	// Client is the apiserver client through which the Lease is read and
	// written. Required.
	Client kplanev1.ResourcesClient
	// Namespace of the Lease. Default DefaultNamespace.
	Namespace string
	// Name of the Lease, normally the controller's name. Required.
	Name string
	// Identity of this candidate, unique among the candidates (see
	// DefaultIdentity). Required.
	Identity string
	// LeaseDuration is how long other candidates wait, after they last saw
	// the lease renewed, before they take it over. Default 15s.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// gives up leadership. Must be less than LeaseDuration. Default 10s.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between attempts to acquire or renew.
	// Must be less than RenewDeadline. Default 2s.
	RetryPeriod time.Duration
	// ReleaseOnCancel makes a leader clear the lease when Run's context is
	// cancelled, so that a standby takes over without waiting for expiry.
	ReleaseOnCancel bool
	// Logger receives one line per leadership transition. Default: none.
	Logger hclog.Logger
	// Callbacks are the hooks called on transitions.
	Callbacks Callbacks
	// Metrics records leadership. Default: none (see NewPrometheusMetrics).
	Metrics Metrics
}

// withDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noopMetrics{}
	}
	return cfg
}

// validate reports every problem of a defaulted Config at once.
func (cfg Config) validate() error {
	var errs []string
	if cfg.Client == nil {
		errs = append(errs, "client is required")
	}
	if cfg.Name == "" {
		errs = append(errs, "lease name is required")
	}
	if cfg.Identity == "" {
		errs = append(errs, "identity is required (see DefaultIdentity)")
	}
	if cfg.LeaseDuration < 0 || cfg.RenewDeadline < 0 || cfg.RetryPeriod < 0 {
		errs = append(errs, fmt.Sprintf("durations must be positive: lease duration %v, renew deadline %v, retry period %v",
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod))
	}
	if cfg.RenewDeadline >= cfg.LeaseDuration {
		errs = append(errs, fmt.Sprintf("renew deadline (%v) must be less than the lease duration (%v), or the leader could still act after others consider the lease expired",
			cfg.RenewDeadline, cfg.LeaseDuration))
	}
	if cfg.RetryPeriod >= cfg.RenewDeadline {
		errs = append(errs, fmt.Sprintf("retry period (%v) must be less than the renew deadline (%v), or the leader gets no second try to renew",
			cfg.RetryPeriod, cfg.RenewDeadline))
	}
	if len(errs) > 0 {
		return fmt.Errorf("leaderelection: invalid config: %s", strings.Join(errs, "; "))
	}
	return nil
}
