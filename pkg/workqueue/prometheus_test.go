package workqueue

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// histogram returns the sample count and sum of the named histogram for
// the queue called name.
func histogram(t *testing.T, reg *prometheus.Registry, metric, name string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no %s{name=%q}", metric, name)
	return 0, 0
}

func TestPrometheusMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := NewPrometheusProvider(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeClock()
	q := newTestQueue(t, Config{
		Name:            "pods",
		Clock:           c,
		MetricsProvider: p,
		RateLimiter:     NewExponentialRateLimiter(time.Second, time.Minute),
	})
	q.Add("a")
	q.Add("a") // deduplicated: not counted
	q.Add("b")
	if v := testutil.ToFloat64(p.depth.WithLabelValues("pods")); v != 2 {
		t.Fatalf("depth = %v, want 2", v)
	}
	c.Advance(3 * time.Second)
	mustGet(t, q, "a")
	c.Advance(2 * time.Second)
	q.Done("a")
	q.AddRateLimited("b")
	q.AddRateLimited("c")

	if v := testutil.ToFloat64(p.depth.WithLabelValues("pods")); v != 1 {
		t.Fatalf("depth = %v, want 1", v)
	}
	if v := testutil.ToFloat64(p.adds.WithLabelValues("pods")); v != 2 {
		t.Fatalf("adds = %v, want 2", v)
	}
	if v := testutil.ToFloat64(p.retries.WithLabelValues("pods")); v != 2 {
		t.Fatalf("retries = %v, want 2", v)
	}
	if n, sum := histogram(t, reg, "kplane_workqueue_queue_duration_seconds", "pods"); n != 1 || sum != 3 {
		t.Fatalf("queue duration: %d samples summing to %v, want 1 sample of 3s", n, sum)
	}
	if n, sum := histogram(t, reg, "kplane_workqueue_work_duration_seconds", "pods"); n != 1 || sum != 2 {
		t.Fatalf("work duration: %d samples summing to %v, want 1 sample of 2s", n, sum)
	}
	if n := testutil.CollectAndCount(reg,
		"kplane_workqueue_depth", "kplane_workqueue_adds_total", "kplane_workqueue_retries_total",
		"kplane_workqueue_queue_duration_seconds", "kplane_workqueue_work_duration_seconds"); n != 5 {
		t.Fatalf("collected %d series, want 5 (one per metric for queue pods)", n)
	}
}

func TestPrometheusProviderSharesRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	p1, err := NewPrometheusProvider(reg)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := NewPrometheusProvider(reg)
	if err != nil {
		t.Fatalf("second provider on the same registry: %v", err)
	}
	p1.NewQueueMetrics("one").IncAdds()
	p2.NewQueueMetrics("two").IncAdds()
	p2.NewQueueMetrics("two").IncAdds()
	if v := testutil.ToFloat64(p1.adds.WithLabelValues("two")); v != 2 {
		t.Fatalf("adds{two} seen through the first provider = %v, want 2", v)
	}
	if n := testutil.CollectAndCount(reg, "kplane_workqueue_adds_total"); n != 2 {
		t.Fatalf("adds series = %d, want 2", n)
	}
}

func TestPrometheusProviderConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	// A different metric under one of our names must be reported, not reused.
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "kplane_workqueue_adds_total", Help: "x"}))
	if _, err := NewPrometheusProvider(reg); err == nil {
		t.Fatal("NewPrometheusProvider succeeded despite a conflicting collector")
	}
}
