package main

import (
	"fmt"
	"io"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"
)

type report struct {
	target      string
	seed        uint64
	chaos       time.Duration
	kills       killResult
	workload    *workload
	converged   bool
	convergence time.Duration
	violations  []string
}

// print writes the report to out; the error is the first failed write.
func (r report) print(out io.Writer) error {
	p := &printer{w: out}
	p.printf("\n==== kplane chaos report\n")
	p.printf("target: %s   seed: %d   chaos: %v\n", r.target, r.seed, r.chaos.Round(time.Second))

	var services []string
	total := map[syscall.Signal]int{}
	for s, m := range r.kills.kills {
		services = append(services, s)
		for sig, n := range m {
			total[sig] += n
		}
	}
	sort.Strings(services)
	p.printf("\nkills: %d (SIGKILL %d, SIGTERM %d), partitions: %d\n", total[syscall.SIGKILL]+total[syscall.SIGTERM], total[syscall.SIGKILL], total[syscall.SIGTERM], total[partitionSignal])
	// The table goes through a tabwriter; its errors surface on Flush.
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	p.w = tw
	p.printf("  SERVICE\tSIGKILL\tSIGTERM\tPARTITIONS\tUNEXPECTED EXITS\n")
	for _, s := range services {
		k := r.kills.kills[s]
		p.printf("  %s\t%d\t%d\t%d\t%d\n", s, k[syscall.SIGKILL], k[syscall.SIGTERM], k[partitionSignal], r.kills.unexpected[s])
	}
	if p.err == nil {
		p.err = tw.Flush()
	}
	p.w = out

	t := r.kills.takeovers
	if len(t) == 0 {
		p.printf("\nleader takeovers after killing a leader: none measured")
	} else {
		p.printf("\nleader takeovers after killing a leader: %d  min %v  median %v  max %v",
			len(t), t[0].Round(time.Millisecond), t[len(t)/2].Round(time.Millisecond), t[len(t)-1].Round(time.Millisecond))
	}
	if r.kills.unfinished > 0 {
		p.printf(" (%d not observed: the lease went back to its restarted holder, or to a standby between two polls)", r.kills.unfinished)
	}
	p.printf("\n")

	w := r.workload
	acked, unknown := w.ledger.Counts()
	p.printf("workload: %d writes (%d scales, %d pod deletes, %d ReplicaSet re-creations, %d Jobs of %d completions), %d failed calls; ledger %d acknowledged, %d unknown outcomes\n",
		w.writes.Load(), w.scales.Load(), w.podDels.Load(), w.rsCycles.Load(), w.jobs.Load(), jobCompletions, w.failures.Load(), acked, unknown)
	p.printf("%s\n", w.deploymentSummary())
	p.printf("%s\n", w.setsSummary())
	if r.converged {
		p.printf("converged %v after the last kill\n", r.convergence.Round(100*time.Millisecond))
	} else {
		p.printf("NOT converged\n")
	}
	p.printf("invariant violations: %d\n", len(r.violations))
	for _, v := range r.violations {
		p.printf("  - %s\n", v)
	}
	return p.err
}

// printer writes formatted lines and keeps the first write error, so a
// report of many lines is checked once.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
