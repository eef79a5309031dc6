package workqueue

import "time"

// Metrics receives the measurements of one queue. Implementations must be
// safe for concurrent use and fast: the queue calls them while holding its
// lock so that depth readings are consistent.
type Metrics interface {
	// SetDepth records the number of keys ready to be handed out.
	SetDepth(n int)
	// IncAdds counts a key that became pending (adds of a key that was
	// already pending are not counted).
	IncAdds()
	// ObserveQueueLatency records how long a key waited in the queue
	// before Get handed it out.
	ObserveQueueLatency(d time.Duration)
	// ObserveWorkDuration records the time between Get and Done of a key.
	ObserveWorkDuration(d time.Duration)
	// IncRetries counts a call of AddRateLimited.
	IncRetries()
}

// MetricsProvider creates the Metrics of a queue from its name.
type MetricsProvider interface {
	NewQueueMetrics(name string) Metrics
}

// noopMetrics is used when Config.MetricsProvider is nil.
type noopMetrics struct{}

func (noopMetrics) SetDepth(int)                      {}
func (noopMetrics) IncAdds()                          {}
func (noopMetrics) ObserveQueueLatency(time.Duration) {}
func (noopMetrics) ObserveWorkDuration(time.Duration) {}
func (noopMetrics) IncRetries()                       {}
