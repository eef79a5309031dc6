package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// logsServer serves container logs:
//
//	GET /logs/<namespace>/<pod>/<container>[?follow=true]
//	GET /logs/<namespace>/<pod>[?follow=true]      (pods with one container)
type logsServer struct {
	srv  *http.Server
	done chan struct{}
}

// startLogs listens on --logs-addr and records the port for the Node's
// daemonEndpoints.
func (a *Agent) startLogs(ctx context.Context) (*logsServer, error) {
	lis, err := net.Listen("tcp", a.cfg.LogsAddr)
	if err != nil {
		// Typically a second node agent on one host, still on the default.
		return nil, fmt.Errorf("logs server: %w (choose another --logs-addr)", err)
	}
	a.logsPort = lis.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("GET /logs/{namespace}/{pod}/{container}", a.serveLogs)
	mux.HandleFunc("GET /logs/{namespace}/{pod}", a.serveLogs)
	a.registerStreams(mux)
	s := &logsServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("logs server failed", "error", err)
		}
	}()
	a.log.Info("serving container logs", "addr", lis.Addr().String())
	return s, nil
}

// stop closes the server and its (following) connections.
func (s *logsServer) stop() {
	_ = s.srv.Close()
	<-s.done
}

func (a *Agent) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	o, ok := a.pods.Store().GetByName(ns, name)
	if !ok || !a.nodes[o.GetPod().GetSpec().GetNodeName()] {
		http.Error(w, fmt.Sprintf("pod %s/%s is not on this node", ns, name), http.StatusNotFound)
		return
	}
	pod := o.GetPod()
	cs := pod.GetSpec().GetContainers()
	if container == "" {
		if len(cs) != 1 {
			names := make([]string, len(cs))
			for i, c := range cs {
				names[i] = c.GetName()
			}
			http.Error(w, fmt.Sprintf("a container name must be given for pod %s: choose one of %v", name, names), http.StatusBadRequest)
			return
		}
		container = cs[0].GetName()
	}
	found := false
	for _, c := range cs {
		found = found || c.GetName() == container
	}
	if !found {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", container, name), http.StatusNotFound)
		return
	}
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fw := &flushWriter{w: w}
	if f, ok := w.(http.Flusher); ok {
		fw.f = f
	}
	if err := a.rt.Logs(r.Context(), pod, container, follow, fw); err != nil {
		if !fw.wrote {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		a.log.Debug("log stream ended", "pod", ns+"/"+name, "container", container, "error", err)
	}
}

// flushWriter flushes after writes so that followers see lines at once.
type flushWriter struct {
	w     http.ResponseWriter
	f     http.Flusher
	wrote bool
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	fw.wrote = fw.wrote || len(p) > 0
	return fw.w.Write(p)
}

// Flush sends buffered bytes to the client.
func (fw *flushWriter) Flush() {
	if fw.f != nil {
		fw.f.Flush()
	}
}
