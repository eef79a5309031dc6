package apiserver

import (
	"context"
	"time"
)

// repairAllocations reconciles the allocation records with the objects
// that hold values (cluster IPs, node ports) and reports what it did, in
// the log and in kplane_apiserver_allocation_repairs_total.
func (a *APIServer) repairAllocations(ctx context.Context) error {
	rep, err := a.store.RepairAllocations(ctx)
	if err != nil {
		return err
	}
	for _, key := range rep.Freed {
		a.log.Info("allocation repair: freed a value no object holds", "key", key)
	}
	for _, what := range rep.Recorded {
		a.log.Warn("allocation repair: an object held a value that was not recorded; recorded it", "allocation", what)
	}
	for _, what := range rep.Conflicts {
		a.log.Error("allocation repair: a value is claimed twice; left as it is", "allocation", what)
	}
	a.metrics.repairs.WithLabelValues("freed").Add(float64(len(rep.Freed)))
	a.metrics.repairs.WithLabelValues("recorded").Add(float64(len(rep.Recorded)))
	a.metrics.repairs.WithLabelValues("conflict").Add(float64(len(rep.Conflicts)))
	return nil
}

// repairLoop runs repairAllocations every interval until ctx ends.
func (a *APIServer) repairLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.repairAllocations(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("allocation repair failed", "error", err)
		}
	}
}

// RepairAllocations runs one allocation repair now (tests, operators).
func (a *APIServer) RepairAllocations(ctx context.Context) error { return a.repairAllocations(ctx) }
