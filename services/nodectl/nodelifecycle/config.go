package nodelifecycle

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Defaults of the node lifecycle flags (DESIGN.md, "Node lifecycle").
const (
	defaultMonitorPeriod      = 5 * time.Second
	defaultGracePeriod        = 40 * time.Second
	defaultEvictionTimeout    = 5 * time.Minute
	defaultEvictionRate       = 0.1
	defaultUnhealthyThreshold = 0.55
)

// config holds nodectl's own flags.
type config struct {
	// monitorPeriod is how often every node is checked, whatever the events.
	monitorPeriod time.Duration
	// gracePeriod is how long a lease may go unrenewed before the node is
	// Unknown.
	gracePeriod time.Duration
	// evictionTimeout is how long pods stay on a node tainted NoExecute
	// (counted from the taint's timeAdded) unless they tolerate it.
	evictionTimeout time.Duration
	// evictionRate is how many nodes per second may have their pods evicted.
	evictionRate float64
	// unhealthyThreshold is the fraction of unready nodes above which
	// evictions stop.
	unhealthyThreshold float64
}

func (c *config) addFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.monitorPeriod, "node-monitor-period", defaultMonitorPeriod, "how often every node's lease and conditions are checked")
	fs.DurationVar(&c.gracePeriod, "node-monitor-grace-period", defaultGracePeriod, "how long a node's lease may go unrenewed before its Ready condition becomes Unknown")
	fs.DurationVar(&c.evictionTimeout, "pod-eviction-timeout", defaultEvictionTimeout, "how long pods stay on a node tainted NoExecute (from the taint's timeAdded) before they are deleted, unless they tolerate the taint")
	fs.Float64Var(&c.evictionRate, "node-eviction-rate", defaultEvictionRate, "nodes per second whose pods may be evicted")
	fs.Float64Var(&c.unhealthyThreshold, "unhealthy-zone-threshold", defaultUnhealthyThreshold, "fraction of unready nodes above which evictions stop (the fault is then more likely on the control plane's side)")
}

func (c *config) validate() error {
	var errs []error
	if c.monitorPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--node-monitor-period must be positive, not %v", c.monitorPeriod))
	}
	if c.gracePeriod <= 0 {
		errs = append(errs, fmt.Errorf("--node-monitor-grace-period must be positive, not %v", c.gracePeriod))
	}
	if c.evictionTimeout < 0 {
		errs = append(errs, fmt.Errorf("--pod-eviction-timeout must not be negative, not %v", c.evictionTimeout))
	}
	if c.evictionRate <= 0 {
		errs = append(errs, fmt.Errorf("--node-eviction-rate must be positive, not %v", c.evictionRate))
	}
	if c.unhealthyThreshold <= 0 || c.unhealthyThreshold > 1 {
		errs = append(errs, fmt.Errorf("--unhealthy-zone-threshold must be in (0, 1], not %v", c.unhealthyThreshold))
	}
	return errors.Join(errs...)
}
