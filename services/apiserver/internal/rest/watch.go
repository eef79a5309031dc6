package rest

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/server"
)

// watchEvent is one line of a watch response, as Kubernetes streams it.
type watchEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

var eventTypes = map[kplanev1.EventType]string{
	kplanev1.EventType_EVENT_TYPE_ADDED:    "ADDED",
	kplanev1.EventType_EVENT_TYPE_MODIFIED: "MODIFIED",
	kplanev1.EventType_EVENT_TYPE_DELETED:  "DELETED",
	kplanev1.EventType_EVENT_TYPE_BOOKMARK: "BOOKMARK",
	kplanev1.EventType_EVENT_TYPE_ERROR:    "ERROR",
}

// watch streams the service's Watch as chunked JSON lines. Errors before
// the first event are answered as a Status with their own HTTP code,
// except a too-old resourceVersion, which Kubernetes (and client-go's
// reflector, which relists on it) expects as an ERROR event with a 410
// Status inside a 200 stream; errors after it end the stream with an
// ERROR event.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request, req request) {
	q := r.URL.Query()
	ctx := r.Context()
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeStatus(w, badRequest("timeoutSeconds: Invalid value: %q: must be a non-negative integer", v))
			return
		}
		if n > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(n)*time.Second)
			defer cancel()
		}
	}
	table := tableRequested(r)
	if table {
		if s := checkIncludeObject(r); s != nil {
			writeStatus(w, s)
			return
		}
	}
	wr := &kplanev1.WatchRequest{
		Kind: req.res.Kind, Namespace: req.namespace,
		LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector"),
		ResourceVersion: q.Get("resourceVersion"),
		AllowBookmarks:  q.Get("allowWatchBookmarks") == "true",
	}
	s := &watchStream{ctx: ctx, w: w, h: h, res: req.res, table: table, r: r}
	err := h.api.Watch(wr, s)
	if ctx.Err() != nil {
		// The client left or timeoutSeconds passed: a normal end.
		if !s.started {
			s.start()
		}
		return
	}
	if err == nil {
		return
	}
	st := statusFor(err, req)
	if !s.started && status.Code(err) != codes.OutOfRange {
		writeStatus(w, st)
		return
	}
	if !s.started {
		s.start()
	}
	s.writeEvent(watchEvent{Type: "ERROR", Object: st})
}

// watchStream is the in-process server stream Watch sends its events to;
// each becomes one JSON line, flushed at once.
type watchStream struct {
	grpc.ServerStream // only the methods below are called
	ctx               context.Context
	w                 http.ResponseWriter
	r                 *http.Request
	h                 *Handler
	res               *resource
	table             bool
	sentTable         bool // column definitions go with the first Table only
	started           bool
	broken            bool
}

func (s *watchStream) Context() context.Context    { return s.ctx }
func (s *watchStream) SetHeader(metadata.MD) error { return nil }

// SendHeader is the service saying the watch is established: the
// response starts, so the client is not left waiting for the first event.
func (s *watchStream) SendHeader(metadata.MD) error {
	if !s.started {
		s.start()
	}
	return nil
}
func (s *watchStream) SetTrailer(metadata.MD) {}

func (s *watchStream) Send(r *kplanev1.WatchResponse) error { return s.SendMsg(r) }

func (s *watchStream) SendMsg(m any) error {
	ev, err := server.DecodeSent(m)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if !s.started {
		s.start()
	}
	typ := eventTypes[ev.GetType()]
	var obj any
	switch ev.GetType() {
	case kplanev1.EventType_EVENT_TYPE_BOOKMARK:
		// A bookmark is an object of the watched kind holding only the
		// revision the watcher has reached.
		res := s.res
		obj = map[string]any{"kind": res.Kind, "apiVersion": res.GroupVersion(), "metadata": map[string]any{"resourceVersion": ev.GetResourceVersion()}}
	case kplanev1.EventType_EVENT_TYPE_ERROR:
		obj = newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%s", ev.GetError())
	default:
		if s.table {
			obj = s.h.table(s.r, []*kplanev1.Object{ev.GetObject()}, metav1.ListMeta{ResourceVersion: ev.GetResourceVersion()}, !s.sentTable)
			s.sentTable = true
		} else {
			o, err := objectMap(ev.GetObject())
			if err != nil {
				return status.Errorf(codes.Internal, "%v", err)
			}
			obj = o
		}
	}
	if !s.writeEvent(watchEvent{Type: typ, Object: obj}) {
		return status.Error(codes.Canceled, "the watch client is gone")
	}
	return nil
}

func (s *watchStream) start() {
	s.started = true
	s.w.Header().Set("Content-Type", "application/json")
	s.w.Header().Set("Transfer-Encoding", "chunked")
	s.w.WriteHeader(http.StatusOK)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// writeEvent writes and flushes one event; false once the client is gone.
func (s *watchStream) writeEvent(ev watchEvent) bool {
	if s.broken {
		return false
	}
	b, err := json.Marshal(ev)
	if err == nil {
		_, err = s.w.Write(append(b, '\n'))
	}
	if err != nil {
		s.broken = true
		return false
	}
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return true
}
