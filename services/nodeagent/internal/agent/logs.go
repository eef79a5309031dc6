package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// logsServer serves container logs:
//
//	GET /logs/<namespace>/<pod>/<container>[?follow=true][&tailLines=N][&limitBytes=N][&previous=true]
//	    [&sinceSeconds=N | &sinceTime=RFC3339][&timestamps=true]
//	GET /logs/<namespace>/<pod>[?...]      (pods with one container)
//
// The parameters are those of Kubernetes' pods/log, which the apiserver
// forwards, previous included (the run before the current one). The
// exec runtime's shim records when it read each line (shim.TimeRecord),
// which sinceSeconds, sinceTime and timestamps use.
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
	opts, limit, err := parseLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fw := &flushWriter{w: w, left: limit}
	if f, ok := w.(http.Flusher); ok {
		fw.f = f
	}
	if err := a.rt.Logs(r.Context(), pod, container, opts, fw); err != nil {
		if !fw.wrote {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		a.log.Debug("log stream ended", "pod", ns+"/"+name, "container", container, "error", err)
	}
}

// LogOptions selects what Runtime.Logs writes.
type LogOptions struct {
	// Follow keeps writing new lines until the container stops.
	Follow bool
	// TailLines is how many of the last lines to start with; negative
	// means the whole log.
	TailLines int64
	// Previous asks for the log of the container's run before the
	// current one (Follow does not apply to it).
	Previous bool
	// Since, when set, leaves out lines older than it (sinceTime, or
	// sinceSeconds before the request).
	Since time.Time
	// Timestamps prefixes every line with its time (RFC 3339, UTC,
	// nanoseconds) and a space.
	Timestamps bool
}

// parseLogOptions reads the query of a logs request: the options for the
// runtime and the byte limit (negative: none).
func parseLogOptions(q url.Values) (LogOptions, int64, error) {
	return parseLogOptionsAt(q, time.Now())
}

// parseLogOptionsAt is parseLogOptions with sinceSeconds counted back
// from now.
func parseLogOptionsAt(q url.Values, now time.Time) (LogOptions, int64, error) {
	opts := LogOptions{TailLines: -1}
	limit := int64(-1)
	for _, p := range []struct {
		name string
		into *bool
	}{{"follow", &opts.Follow}, {"previous", &opts.Previous}, {"timestamps", &opts.Timestamps}} {
		if v := q.Get(p.name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return opts, 0, fmt.Errorf("%s: Invalid value: %q: must be true or false", p.name, v)
			}
			*p.into = b
		}
	}
	var since int64
	for _, p := range []struct {
		name string
		into *int64
	}{{"tailLines", &opts.TailLines}, {"limitBytes", &limit}, {"sinceSeconds", &since}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || (p.name != "tailLines" && n == 0) {
			return opts, 0, fmt.Errorf("%s: Invalid value: %q: must be a non-negative integer (limitBytes and sinceSeconds: positive)", p.name, v)
		}
		*p.into = n
	}
	st := q.Get("sinceTime")
	if st != "" && since > 0 {
		return opts, 0, fmt.Errorf("sinceSeconds: Forbidden: at most one of sinceTime or sinceSeconds may be specified")
	}
	if st != "" {
		t, err := time.Parse(time.RFC3339, st)
		if err != nil {
			return opts, 0, fmt.Errorf("sinceTime: Invalid value: %q: must be an RFC 3339 time", st)
		}
		opts.Since = t
	}
	if since > 0 {
		opts.Since = now.Add(-time.Duration(min(since, int64(math.MaxInt64/time.Second))) * time.Second)
	}
	return opts, limit, nil
}

// errLogLimit ends a log stream that reached its limitBytes.
var errLogLimit = errors.New("limitBytes reached")

// seekTail positions f at the start of its last n lines (a last line
// without a newline counts), reading backwards in blocks so a long log
// is not read whole.
func seekTail(f io.ReadSeeker, n int64) error {
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil || n == 0 {
		return err
	}
	const block = 8 << 10
	buf := make([]byte, block)
	pos, newlines := end, int64(0)
	for pos > 0 {
		size := min(int64(block), pos)
		pos -= size
		if _, err := f.Seek(pos, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.ReadFull(f, buf[:size]); err != nil {
			return err
		}
		for i := size - 1; i >= 0; i-- {
			// The file's final newline ends the last line; every other
			// one starts the line after it.
			if buf[i] != '\n' || pos+i == end-1 {
				continue
			}
			if newlines++; newlines == n {
				_, err := f.Seek(pos+i+1, io.SeekStart)
				return err
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// flushWriter flushes after writes so that followers see lines at once,
// and ends the stream at limitBytes.
type flushWriter struct {
	w     http.ResponseWriter
	f     http.Flusher
	wrote bool
	left  int64 // bytes still allowed; negative: no limit
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	if fw.left >= 0 && int64(len(p)) > fw.left {
		n, err := fw.w.Write(p[:fw.left])
		fw.wrote = fw.wrote || n > 0
		fw.left -= int64(n)
		if err != nil {
			return n, err
		}
		return n, errLogLimit
	}
	fw.wrote = fw.wrote || len(p) > 0
	if fw.left >= 0 {
		fw.left -= int64(len(p))
	}
	return fw.w.Write(p)
}

// Flush sends buffered bytes to the client.
func (fw *flushWriter) Flush() {
	if fw.f != nil {
		fw.f.Flush()
	}
}
