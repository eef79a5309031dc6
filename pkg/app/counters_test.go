package app

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterCountersServesTheirValues(t *testing.T) {
	c := &Context{Registry: prometheus.NewRegistry()}
	var n atomic.Int64
	if err := c.RegisterCounters(Counter{Name: "kplane_test_things_total", Help: "Things.", Value: &n}); err != nil {
		t.Fatal(err)
	}
	n.Add(3)
	families, err := c.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "kplane_test_things_total" || families[0].GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Fatalf("gathered %v, want kplane_test_things_total 3", families)
	}
	// A name registered twice is an error naming it.
	err = c.RegisterCounters(Counter{Name: "kplane_test_things_total", Help: "Things.", Value: &n})
	if err == nil || !strings.Contains(err.Error(), "register metric kplane_test_things_total") {
		t.Fatalf("second registration: %v", err)
	}
}
