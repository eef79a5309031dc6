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

func (r report) print(out io.Writer) {
	fmt.Fprintf(out, "\n==== kplane chaos report\n")
	fmt.Fprintf(out, "target: %s   seed: %d   chaos: %v\n", r.target, r.seed, r.chaos.Round(time.Second))

	var services []string
	total := map[syscall.Signal]int{}
	for s, m := range r.kills.kills {
		services = append(services, s)
		for sig, n := range m {
			total[sig] += n
		}
	}
	sort.Strings(services)
	fmt.Fprintf(out, "\nkills: %d (SIGKILL %d, SIGTERM %d)\n", total[syscall.SIGKILL]+total[syscall.SIGTERM], total[syscall.SIGKILL], total[syscall.SIGTERM])
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERVICE\tSIGKILL\tSIGTERM\tUNEXPECTED EXITS")
	for _, s := range services {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\n", s, r.kills.kills[s][syscall.SIGKILL], r.kills.kills[s][syscall.SIGTERM], r.kills.unexpected[s])
	}
	_ = tw.Flush()

	t := r.kills.takeovers
	if len(t) == 0 {
		fmt.Fprintf(out, "\nleader takeovers after killing a leader: none measured")
	} else {
		fmt.Fprintf(out, "\nleader takeovers after killing a leader: %d  min %v  median %v  max %v",
			len(t), t[0].Round(time.Millisecond), t[len(t)/2].Round(time.Millisecond), t[len(t)-1].Round(time.Millisecond))
	}
	if r.kills.unfinished > 0 {
		fmt.Fprintf(out, " (%d not observed: the lease went back to its restarted holder, or to a standby between two polls)", r.kills.unfinished)
	}
	fmt.Fprintln(out)

	w := r.workload
	acked, unknown := w.ledger.Counts()
	fmt.Fprintf(out, "workload: %d writes (%d scales, %d pod deletes, %d ReplicaSet re-creations), %d failed calls; ledger %d acknowledged, %d unknown outcomes\n",
		w.writes.Load(), w.scales.Load(), w.podDels.Load(), w.rsCycles.Load(), w.failures.Load(), acked, unknown)
	if r.converged {
		fmt.Fprintf(out, "converged %v after the last kill\n", r.convergence.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(out, "NOT converged\n")
	}
	fmt.Fprintf(out, "invariant violations: %d\n", len(r.violations))
	for _, v := range r.violations {
		fmt.Fprintf(out, "  - %s\n", v)
	}
}
