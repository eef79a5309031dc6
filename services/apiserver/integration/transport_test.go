package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apijson"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// The held-out semantics (compare-and-swap on resourceVersion, watch
// order from a revision with no gaps or duplicates, label and field
// selectors, limit/continue snapshots, delete preconditions, generation,
// status isolation) are one set of tests that run over both transports:
// each takes a kplanev1.ResourcesClient, which is either the gRPC client
// or restResources, the same calls made as Kubernetes REST requests over
// a real socket. A semantic the REST front end loses (a field the JSON
// drops, an error it maps to the wrong code, an event it reorders) fails
// the REST variant of the test that asserts it over gRPC.

// transports runs body once per transport against its own server.
func transports(t *testing.T, body func(t *testing.T, srv *testserver.Server, c kplanev1.ResourcesClient), opts ...testserver.Option) {
	t.Helper()
	t.Run("grpc", func(t *testing.T) {
		srv := testserver.Start(t, opts...)
		body(t, srv, srv.Client())
	})
	t.Run("rest", func(t *testing.T) {
		srv := testserver.Start(t, opts...)
		body(t, srv, newRESTResources(srv))
	})
}

// viaREST tells whether c speaks REST.
func viaREST(c kplanev1.ResourcesClient) bool {
	_, ok := c.(*restResources)
	return ok
}

// wording is the message a test expects: the store's over gRPC, or
// Kubernetes' over REST, which names the resource ("pods", not "Pod") as
// kubectl prints it.
func wording(c kplanev1.ResourcesClient, grpcMsg, restMsg string) string {
	if viaREST(c) {
		return restMsg
	}
	return grpcMsg
}

// restResources is kplanev1.ResourcesClient spoken as Kubernetes REST:
// objects travel as Kubernetes JSON (pkg/apijson, as kubectl writes it)
// and a failure's Status comes back as the gRPC status its reason maps
// to, with the Status message, so tests assert one error for both.
// Only the methods the semantics tests call are implemented; the
// embedded nil interface makes any other call panic instead of quietly
// using gRPC.
type restResources struct {
	kplanev1.ResourcesClient
	base string
	hc   *http.Client
}

func newRESTResources(srv *testserver.Server) *restResources {
	return &restResources{base: "http://" + srv.Addr(), hc: &http.Client{}}
}

// path is the URL path of kind's collection (name "") or of one object.
func restPath(kind, ns, name string) (string, error) {
	res := kplanev1.ResourceOf(kind)
	info := kplanev1.LookupKind(kind)
	if res == nil || info == nil {
		return "", status.Errorf(codes.InvalidArgument, "kind: %s", kplanev1.UnknownKindError(kind))
	}
	p := "/apis/" + res.GroupVersion()
	if res.Group == "" {
		p = "/api/" + res.Version
	}
	if info.Namespaced && ns != "" {
		p += "/namespaces/" + url.PathEscape(ns)
	}
	p += "/" + res.Plural
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p, nil
}

// restStatus is the part of a Kubernetes Status the adapter maps back.
type restStatus struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
}

// grpcError turns a failure Status into the gRPC status the server would
// have returned; Conflict is Aborted (both Aborted and FailedPrecondition
// map to Conflict, and every CAS failure is Aborted).
func (s restStatus) grpcError() error {
	code := codes.Unknown
	switch s.Reason {
	case "NotFound":
		code = codes.NotFound
	case "AlreadyExists":
		code = codes.AlreadyExists
	case "Conflict":
		code = codes.Aborted
	case "Invalid", "BadRequest":
		code = codes.InvalidArgument
	case "Expired", "Gone":
		code = codes.OutOfRange
	case "Forbidden":
		code = codes.PermissionDenied
	case "Unauthorized":
		code = codes.Unauthenticated
	case "TooManyRequests":
		code = codes.ResourceExhausted
	case "ServiceUnavailable":
		code = codes.Unavailable
	case "InternalError":
		code = codes.Internal
	case "Timeout":
		code = codes.DeadlineExceeded
	}
	return status.Error(code, s.Message)
}

// do sends one request and decodes a success into out (when not nil).
func (c *restResources) do(ctx context.Context, method, path string, q url.Values, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode the body: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var st restStatus
		if err := json.Unmarshal(raw, &st); err != nil || st.Kind != "Status" {
			return fmt.Errorf("%s %s: %d without a Status: %s", method, path, resp.StatusCode, raw)
		}
		if st.Code != resp.StatusCode {
			return fmt.Errorf("%s %s: HTTP %d carries a Status with code %d", method, path, resp.StatusCode, st.Code)
		}
		return st.grpcError()
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// decodeObject reads one object of Kubernetes JSON, checking that it
// carries its apiVersion and kind.
func decodeObject(raw json.RawMessage) (*kplanev1.Object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode an object: %w", err)
	}
	kind, _ := m["kind"].(string)
	if kind == "" || m["apiVersion"] != kplanev1.APIVersion(kind) {
		return nil, fmt.Errorf("object without a right apiVersion/kind: %v/%v", m["apiVersion"], m["kind"])
	}
	delete(m, "kind")
	delete(m, "apiVersion")
	return apijson.ObjectFromMap(kind, m, apijson.DecodeOptions{})
}

func (c *restResources) write(ctx context.Context, method, path string, obj *kplanev1.Object) (*kplanev1.Object, error) {
	m, err := apijson.ObjectToMap(obj)
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := c.do(ctx, method, path, nil, m, &raw); err != nil {
		return nil, err
	}
	return decodeObject(raw)
}

// Create is POST to the collection.
func (c *restResources) Create(ctx context.Context, in *kplanev1.CreateRequest, _ ...grpc.CallOption) (*kplanev1.CreateResponse, error) {
	obj := in.GetObject()
	p, err := restPath(obj.KindName(), obj.Meta().GetNamespace(), "")
	if err != nil {
		return nil, err
	}
	out, err := c.write(ctx, http.MethodPost, p, obj)
	if err != nil {
		return nil, err
	}
	return &kplanev1.CreateResponse{Object: out}, nil
}

// Get is GET of the object.
func (c *restResources) Get(ctx context.Context, in *kplanev1.GetRequest, _ ...grpc.CallOption) (*kplanev1.GetResponse, error) {
	p, err := restPath(in.GetKind(), in.GetNamespace(), in.GetName())
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, p, nil, nil, &raw); err != nil {
		return nil, err
	}
	out, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	return &kplanev1.GetResponse{Object: out}, nil
}

// Update is PUT of the object.
func (c *restResources) Update(ctx context.Context, in *kplanev1.UpdateRequest, _ ...grpc.CallOption) (*kplanev1.UpdateResponse, error) {
	obj := in.GetObject()
	p, err := restPath(obj.KindName(), obj.Meta().GetNamespace(), obj.Meta().GetName())
	if err != nil {
		return nil, err
	}
	out, err := c.write(ctx, http.MethodPut, p, obj)
	if err != nil {
		return nil, err
	}
	return &kplanev1.UpdateResponse{Object: out}, nil
}

// UpdateStatus is PUT of the status subresource.
func (c *restResources) UpdateStatus(ctx context.Context, in *kplanev1.UpdateStatusRequest, _ ...grpc.CallOption) (*kplanev1.UpdateStatusResponse, error) {
	obj := in.GetObject()
	p, err := restPath(obj.KindName(), obj.Meta().GetNamespace(), obj.Meta().GetName())
	if err != nil {
		return nil, err
	}
	out, err := c.write(ctx, http.MethodPut, p+"/status", obj)
	if err != nil {
		return nil, err
	}
	return &kplanev1.UpdateStatusResponse{Object: out}, nil
}

// Delete is DELETE with a DeleteOptions body, as kubectl sends it.
func (c *restResources) Delete(ctx context.Context, in *kplanev1.DeleteRequest, _ ...grpc.CallOption) (*kplanev1.DeleteResponse, error) {
	p, err := restPath(in.GetKind(), in.GetNamespace(), in.GetName())
	if err != nil {
		return nil, err
	}
	opts := map[string]any{"kind": "DeleteOptions", "apiVersion": "v1"}
	if in.GracePeriodSeconds != nil {
		opts["gracePeriodSeconds"] = in.GetGracePeriodSeconds()
	}
	if in.GetPropagationPolicy() != "" {
		opts["propagationPolicy"] = in.GetPropagationPolicy()
	}
	if pre := in.GetPreconditions(); pre != nil {
		pm := map[string]any{}
		if pre.GetUid() != "" {
			pm["uid"] = pre.GetUid()
		}
		if pre.GetResourceVersion() != "" {
			pm["resourceVersion"] = pre.GetResourceVersion()
		}
		opts["preconditions"] = pm
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodDelete, p, nil, opts, &raw); err != nil {
		return nil, err
	}
	out, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	return &kplanev1.DeleteResponse{Object: out}, nil
}

// List is GET of the collection with labelSelector, fieldSelector, limit
// and continue.
func (c *restResources) List(ctx context.Context, in *kplanev1.ListRequest, _ ...grpc.CallOption) (*kplanev1.ListResponse, error) {
	p, err := restPath(in.GetKind(), in.GetNamespace(), "")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("labelSelector", in.GetLabelSelector())
	set("fieldSelector", in.GetFieldSelector())
	set("continue", in.GetContinue())
	set("resourceVersion", in.GetResourceVersion())
	set("resourceVersionMatch", in.GetResourceVersionMatch())
	if in.GetLimit() != 0 {
		q.Set("limit", strconv.FormatInt(in.GetLimit(), 10))
	}
	var list struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion    string `json:"resourceVersion"`
			Continue           string `json:"continue"`
			RemainingItemCount *int64 `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, p, q, nil, &list); err != nil {
		return nil, err
	}
	if list.Kind != in.GetKind()+"List" {
		return nil, fmt.Errorf("list kind %q, want %sList", list.Kind, in.GetKind())
	}
	out := &kplanev1.ListResponse{ResourceVersion: list.Metadata.ResourceVersion, Continue: list.Metadata.Continue}
	if n := list.Metadata.RemainingItemCount; n != nil {
		out.RemainingItemCount = *n
	}
	for _, it := range list.Items {
		o, err := decodeObject(it)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, o)
	}
	return out, nil
}

// Watch is GET of the collection with watch=true; each JSON line is one
// event. The event's revision is its object's resourceVersion, as
// Kubernetes has no other place for it; an ERROR event ends the stream
// with the error its Status maps to.
func (c *restResources) Watch(ctx context.Context, in *kplanev1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[kplanev1.WatchResponse], error) {
	p, err := restPath(in.GetKind(), in.GetNamespace(), "")
	if err != nil {
		return nil, err
	}
	q := url.Values{"watch": {"true"}}
	for k, v := range map[string]string{"labelSelector": in.GetLabelSelector(), "fieldSelector": in.GetFieldSelector(), "resourceVersion": in.GetResourceVersion()} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if in.GetAllowBookmarks() {
		q.Set("allowWatchBookmarks", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+p+"?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", p, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		var st restStatus
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &st); err != nil || st.Kind != "Status" {
			return nil, fmt.Errorf("watch %s: %d without a Status: %s", p, resp.StatusCode, raw)
		}
		return nil, st.grpcError()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &restWatch{ctx: ctx, body: resp.Body, sc: sc}, nil
}

// restWatch reads a REST watch as a gRPC client stream.
type restWatch struct {
	grpc.ClientStream // only Recv and Context are called
	ctx               context.Context
	body              io.ReadCloser
	sc                *bufio.Scanner
	last              *kplanev1.WatchResponse
	err               error
}

var restEventTypes = map[string]kplanev1.EventType{
	"ADDED":    kplanev1.EventType_EVENT_TYPE_ADDED,
	"MODIFIED": kplanev1.EventType_EVENT_TYPE_MODIFIED,
	"DELETED":  kplanev1.EventType_EVENT_TYPE_DELETED,
	"BOOKMARK": kplanev1.EventType_EVENT_TYPE_BOOKMARK,
}

func (w *restWatch) Context() context.Context { return w.ctx }

func (w *restWatch) Recv() (*kplanev1.WatchResponse, error) {
	if w.err != nil {
		return nil, w.err
	}
	w.err = w.recv()
	if w.err == nil {
		return w.last, nil
	}
	_ = w.body.Close()
	return nil, w.err
}

func (w *restWatch) recv() error {
	if !w.sc.Scan() {
		if w.ctx.Err() != nil {
			return status.FromContextError(w.ctx.Err()).Err()
		}
		if err := w.sc.Err(); err != nil {
			return fmt.Errorf("read the watch: %w", err)
		}
		return io.EOF
	}
	var ev struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(w.sc.Bytes(), &ev); err != nil {
		return fmt.Errorf("decode a watch event %q: %w", w.sc.Bytes(), err)
	}
	if ev.Type == "ERROR" {
		var st restStatus
		if err := json.Unmarshal(ev.Object, &st); err != nil {
			return fmt.Errorf("decode an ERROR event: %w", err)
		}
		return st.grpcError()
	}
	typ, ok := restEventTypes[ev.Type]
	if !ok {
		return fmt.Errorf("watch event of type %q", ev.Type)
	}
	out := &kplanev1.WatchResponse{Type: typ}
	if typ == kplanev1.EventType_EVENT_TYPE_BOOKMARK {
		var bm struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(ev.Object, &bm); err != nil {
			return fmt.Errorf("decode a bookmark: %w", err)
		}
		out.ResourceVersion = bm.Metadata.ResourceVersion
	} else {
		o, err := decodeObject(ev.Object)
		if err != nil {
			return err
		}
		out.Object, out.ResourceVersion = o, o.Meta().GetResourceVersion()
	}
	w.last = out
	return nil
}

// Header and Trailer are empty: REST has no gRPC metadata.
func (w *restWatch) Header() (metadata.MD, error) { return nil, nil }

// Trailer is empty, as Header.
func (w *restWatch) Trailer() metadata.MD { return nil }
