// Package health serves a process's /healthz, /readyz and /metrics over
// HTTP, and /debug/pprof/ when profiling is on: every kplane binary, the
// apiserver included, runs one on --health-addr.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves /healthz, /readyz and /metrics.
type Server struct {
	addr string
	srv  *http.Server
	done chan struct{}
	log  hclog.Logger
}

// Option adjusts the server.
type Option func(*settings)

type settings struct {
	profiling bool
	checks    map[string]func() error
}

// WithProfiling serves Go's profiles under /debug/pprof/ when on.
func WithProfiling(on bool) Option { return func(s *settings) { s.profiling = on } }

// WithReadyChecks serves each named check on /readyz/<name> besides the
// process-wide /readyz: a process hosting several loops tells which of
// them is ready.
func WithReadyChecks(checks map[string]func() error) Option {
	return func(s *settings) { s.checks = checks }
}

// readyHandler answers 200 "ok" while ready returns nil, else 503 with
// its error.
func readyHandler(ready func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	}
}

// Start listens on addr at once, so that a port in use fails the start
// rather than going unnoticed, and serves in the background. /readyz
// answers 503 with ready's error while it returns one. Every kplane binary
// takes addr from its --health-addr flag, which the error names.
func Start(addr string, reg *prometheus.Registry, ready func() error, log hclog.Logger, opts ...Option) (*Server, error) {
	var set settings
	for _, o := range opts {
		o(&set)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health server: %w (choose another --health-addr)", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The process answers, so it is alive; readiness is /readyz's job.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", readyHandler(ready))
	for name, check := range set.checks {
		mux.HandleFunc("/readyz/"+name, readyHandler(check))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if set.profiling {
		// pprof.Index serves the named profiles (heap, goroutine, ...)
		// under /debug/pprof/<name>; the others need their own handlers.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	h := &Server{
		addr: ln.Addr().String(),
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		done: make(chan struct{}),
		log:  log,
	}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server failed", "error", err)
		}
	}()
	return h, nil
}

// Addr is the address the server listens on.
func (h *Server) Addr() string { return h.addr }

// Stop shuts the server down, giving open requests a moment to finish.
func (h *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		h.log.Warn("health server shutdown", "error", err)
		_ = h.srv.Close()
	}
	<-h.done
}
