// Command kplane-dev runs the kplane control plane as local processes
// (`make dev`): the apiserver with its etcd under ./data, every controller,
// the node agents and one service proxy for the host, each logging to
// ./data/logs/<process>.log, until Ctrl-C stops them all. It is the compose deployment without Docker, and
// starts the processes through the same code as the e2e tests and the
// chaos harness (package stack).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kplane/kplane/test/e2e/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kplane-dev: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var o stack.Options
	var controllers string
	flag.StringVar(&o.BinDir, "bin", "bin", "directory of the binaries (make build)")
	flag.StringVar(&o.DataDir, "data", "data", "data directory: apiserver/ (etcd), nodes/<node>/ (pods), logs/")
	flag.StringVar(&o.APIAddr, "listen", "127.0.0.1:6443", "the apiserver's gRPC address")
	flag.StringVar(&o.APIHealthAddr, "health-addr", "127.0.0.1:6444", "the apiserver's HTTP health address")
	flag.StringVar(&controllers, "controllers", strings.Join(stack.Controllers, ","), "controllers to run, comma-separated")
	flag.IntVar(&o.Replicas, "replicas", 1, "replicas of every controller (one leads, the others stand by)")
	flag.StringVar(&o.Runtime, "runtime", stack.RuntimeExec, "node agent runtime: exec (one agent per node, pods are processes) or fake")
	flag.IntVar(&o.Nodes, "nodes", 3, "number of nodes")
	flag.StringVar(&o.LogFormat, "log-format", "text", "log format of every process: text or json")
	flag.StringVar(&o.LogLevel, "log-level", "info", "log level of every process")
	flag.BoolVar(&o.Insecure, "insecure", false, "plaintext API without authentication or authorization (by default: TLS, one identity per process, RBAC)")
	flag.Parse()
	if controllers != "" {
		o.Controllers = strings.Split(controllers, ",")
	} else {
		o.Controllers = []string{}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	s, err := stack.Start(startCtx, o)
	cancel()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	o = s.Options()
	// The table is buffered until Flush, which returns any write error;
	// a terminal that cannot be written to is only a reason to say so.
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "PROCESS\tPID\tHEALTH\tLOG")
	for _, svc := range s.Services() {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", svc.Name, svc.Process().Pid(), svc.HealthAddr, svc.Process().LogPath())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print the process table: %w", err)
	}
	fmt.Printf("\napiserver on %s (etcd in %s/apiserver)\n", s.APIAddr(), o.DataDir)
	if kc := s.Kubeconfig(); kc != "" {
		fmt.Printf("certificates in %s; as the admin:\n  export KUBECONFIG=%s\n", o.CertsDir(), kc)
		fmt.Println("try: bin/kpctl get nodes; bin/kpctl get leases -n kplane-system; kubectl get pods -A")
	} else {
		fmt.Printf("try: bin/kpctl --server %s get nodes; bin/kpctl get leases -n kplane-system\n", s.APIAddr())
	}
	fmt.Println("Ctrl-C stops everything.")

	// Report a process that dies on its own; the others keep running.
	for _, svc := range s.Services() {
		go func() {
			select {
			case <-svc.Process().Done():
				if ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "kplane-dev: %s exited: %v; see %s\n", svc.Name, svc.Process().ExitErr(), svc.Process().LogPath())
				}
			case <-ctx.Done():
			}
		}()
	}
	<-ctx.Done()
	stop()
	fmt.Println("\nstopping ...")
	stopCtx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		return err
	}
	fmt.Println("stopped")
	return nil
}
