package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Object is satisfied by every kind message of the API (*kplanev1.Pod,
// *kplanev1.Node, ...).
type Object interface {
	proto.Message
	GetMetadata() *kplanev1.ObjectMeta
}

// Deletion propagation policies, as in Kubernetes (the API's names).
const (
	PropagationBackground = kplanev1.DeletePropagationBackground
	PropagationForeground = kplanev1.DeletePropagationForeground
	PropagationOrphan     = kplanev1.DeletePropagationOrphan
)

// ListOptions select the objects List returns.
type ListOptions struct {
	// LabelSelector in Kubernetes syntax, e.g. "app=web,tier!=db".
	LabelSelector string
	// FieldSelector, e.g. "spec.nodeName=n1".
	FieldSelector string
	// Limit is the page size; List follows continue tokens until the end,
	// so it bounds each response, not the result. 0 lets the server choose.
	Limit int64
}

// DeleteOptions qualify a Delete.
type DeleteOptions struct {
	// Preconditions (uid, resourceVersion) must match or Delete fails with Aborted.
	Preconditions *kplanev1.Preconditions
	// PropagationPolicy is Background (default), Foreground or Orphan.
	PropagationPolicy string
	// GracePeriodSeconds overrides a pod's grace period; 0 deletes at once.
	GracePeriodSeconds *int64
}

// WatchOptions select the changes Watch streams.
type WatchOptions struct {
	LabelSelector string
	FieldSelector string
	// ResourceVersion R streams every change after R; "" or "0" first sends
	// an ADDED event for every current object.
	ResourceVersion string
	// AllowBookmarks asks for periodic BOOKMARK events carrying the current revision.
	AllowBookmarks bool
}

// Typed gives access to one kind through the generic API, with T the kind's
// message type. Get one with For or a shorthand such as Pods.
type Typed[T Object] struct {
	c    *Client
	kind *kplanev1.KindInfo
}

// For returns typed access to the kind whose message type is T, e.g.
// client.For[*kplanev1.Pod](c). It panics if T is not a kind of the API,
// which is a programming error caught by the first test.
func For[T Object](c *Client) *Typed[T] {
	var zero T
	name := string(zero.ProtoReflect().Descriptor().Name())
	k := kplanev1.LookupKind(name)
	if k == nil {
		panic(fmt.Sprintf("client.For: %s", kplanev1.UnknownKindError(name)))
	}
	return &Typed[T]{c: c, kind: k}
}

// Kind returns the kind name, e.g. "Pod".
func (t *Typed[T]) Kind() string { return t.kind.Name }

// unwrap extracts T from an Object returned by the server.
func unwrap[T Object](kind string, o *kplanev1.Object) (T, error) {
	var zero T
	if o == nil {
		return zero, fmt.Errorf("%s: server returned no object", kind)
	}
	v, ok := o.Message().(T)
	if !ok {
		return zero, fmt.Errorf("%s: server returned a %q object", kind, o.KindName())
	}
	return v, nil
}

func (t *Typed[T]) wrap(obj T) (*kplanev1.Object, error) {
	o, err := kplanev1.Wrap(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.kind.Name, err)
	}
	return o, nil
}

// Get returns the object ns/name (ns is ignored for cluster-scoped kinds).
func (t *Typed[T]) Get(ctx context.Context, ns, name string) (T, error) {
	var zero T
	resp, err := t.c.ResourcesClient.Get(ctx, &kplanev1.GetRequest{Kind: t.kind.Name, Namespace: ns, Name: name})
	if err != nil {
		return zero, fmt.Errorf("get %s %s: %w", t.kind.Name, kplanev1.MetaKey(ns, name), err)
	}
	return unwrap[T](t.kind.Name, resp.GetObject())
}

// List returns every object in ns ("" = all namespaces) matching opts,
// following continue tokens, and the resourceVersion of the list's snapshot
// (the server keeps the first page's snapshot across continue tokens), from
// which a Watch misses nothing.
func (t *Typed[T]) List(ctx context.Context, ns string, opts ListOptions) ([]T, string, error) {
	var out []T
	rv, err := ListPages(ctx, t.c, &kplanev1.ListRequest{
		Kind: t.kind.Name, Namespace: ns,
		LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, Limit: opts.Limit,
	}, func(items []*kplanev1.Object) error {
		for _, o := range items {
			v, err := unwrap[T](t.kind.Name, o)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, rv, nil
}

// ListPages runs a List request page by page, calling fn for each page, and
// returns the snapshot's resourceVersion (the first page's). It is the
// untyped building block of Typed.List, used by informers too.
func ListPages(ctx context.Context, c kplanev1.ResourcesClient, req *kplanev1.ListRequest, fn func(items []*kplanev1.Object) error) (string, error) {
	req = proto.Clone(req).(*kplanev1.ListRequest)
	rv := ""
	for page := 0; ; page++ {
		resp, err := c.List(ctx, req)
		if err != nil {
			return "", fmt.Errorf("list %s (page %d): %w", req.GetKind(), page+1, err)
		}
		if page == 0 {
			rv = resp.GetResourceVersion()
		}
		if err := fn(resp.GetItems()); err != nil {
			return "", err
		}
		if resp.GetContinue() == "" {
			return rv, nil
		}
		req.Continue = resp.GetContinue()
	}
}

// Create creates obj and returns it as stored (uid, resourceVersion, ...).
func (t *Typed[T]) Create(ctx context.Context, obj T) (T, error) {
	var zero T
	o, err := t.wrap(obj)
	if err != nil {
		return zero, err
	}
	resp, err := t.c.ResourcesClient.Create(ctx, &kplanev1.CreateRequest{Object: o})
	if err != nil {
		return zero, fmt.Errorf("create %s %s: %w", t.kind.Name, o.Key(), err)
	}
	return unwrap[T](t.kind.Name, resp.GetObject())
}

// Update writes obj's metadata and spec. With metadata.resourceVersion set it
// is a compare-and-swap that fails with Aborted (IsConflict) when stale.
func (t *Typed[T]) Update(ctx context.Context, obj T) (T, error) {
	var zero T
	o, err := t.wrap(obj)
	if err != nil {
		return zero, err
	}
	resp, err := t.c.ResourcesClient.Update(ctx, &kplanev1.UpdateRequest{Object: o})
	if err != nil {
		return zero, fmt.Errorf("update %s %s: %w", t.kind.Name, o.Key(), err)
	}
	return unwrap[T](t.kind.Name, resp.GetObject())
}

// UpdateStatus writes obj's status only, with the same CAS rule as Update.
func (t *Typed[T]) UpdateStatus(ctx context.Context, obj T) (T, error) {
	var zero T
	o, err := t.wrap(obj)
	if err != nil {
		return zero, err
	}
	resp, err := t.c.ResourcesClient.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: o})
	if err != nil {
		return zero, fmt.Errorf("update status of %s %s: %w", t.kind.Name, o.Key(), err)
	}
	return unwrap[T](t.kind.Name, resp.GetObject())
}

// Delete deletes ns/name and returns the object as deleted, or as marked
// for deletion when finalizers or a grace period keep it around.
func (t *Typed[T]) Delete(ctx context.Context, ns, name string, opts DeleteOptions) (T, error) {
	var zero T
	resp, err := t.c.ResourcesClient.Delete(ctx, &kplanev1.DeleteRequest{
		Kind: t.kind.Name, Namespace: ns, Name: name,
		Preconditions:      opts.Preconditions,
		PropagationPolicy:  opts.PropagationPolicy,
		GracePeriodSeconds: opts.GracePeriodSeconds,
	})
	if err != nil {
		return zero, fmt.Errorf("delete %s %s: %w", t.kind.Name, kplanev1.MetaKey(ns, name), err)
	}
	return unwrap[T](t.kind.Name, resp.GetObject())
}

// Event is one typed watch event.
type Event[T Object] struct {
	// Type is ADDED, MODIFIED, DELETED or BOOKMARK (ERROR events are
	// returned by Recv as errors).
	Type kplanev1.EventType
	// Object is the object after the change (before it for DELETED); the
	// zero T for BOOKMARK.
	Object T
	// ResourceVersion is the revision the event brings the watcher to.
	ResourceVersion string
}

// Watcher is an open watch stream of one kind.
type Watcher[T Object] struct {
	kind   string
	stream grpc.ServerStreamingClient[kplanev1.WatchResponse]
	cancel context.CancelFunc
}

// Watch opens a watch stream on ns ("" = all namespaces). The stream has no
// deadline; it ends when ctx ends, Stop is called or the server closes it.
func (t *Typed[T]) Watch(ctx context.Context, ns string, opts WatchOptions) (*Watcher[T], error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := t.c.ResourcesClient.Watch(ctx, &kplanev1.WatchRequest{
		Kind: t.kind.Name, Namespace: ns,
		LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector,
		ResourceVersion: opts.ResourceVersion, AllowBookmarks: opts.AllowBookmarks,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %s: %w", t.kind.Name, err)
	}
	return &Watcher[T]{kind: t.kind.Name, stream: stream, cancel: cancel}, nil
}

// Recv returns the next event. It returns io.EOF when the server ended the
// stream, and an error for ERROR events and broken streams (IsOutOfRange
// tells that the requested resourceVersion was compacted: relist).
func (w *Watcher[T]) Recv() (Event[T], error) {
	resp, err := w.stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Event[T]{}, io.EOF
		}
		return Event[T]{}, fmt.Errorf("watch %s: %w", w.kind, err)
	}
	ev := Event[T]{Type: resp.GetType(), ResourceVersion: resp.GetResourceVersion()}
	switch resp.GetType() {
	case kplanev1.EventType_EVENT_TYPE_ERROR:
		return Event[T]{}, fmt.Errorf("watch %s: %w", w.kind, WatchEventError(resp))
	case kplanev1.EventType_EVENT_TYPE_BOOKMARK:
		return ev, nil
	}
	obj, err := unwrap[T](w.kind, resp.GetObject())
	if err != nil {
		return Event[T]{}, err
	}
	ev.Object = obj
	return ev, nil
}

// Stop closes the stream; a pending Recv returns an error.
func (w *Watcher[T]) Stop() { w.cancel() }

// WatchEventError converts an ERROR watch event to a gRPC status error. The
// API reports a compacted resourceVersion as a stream status (OutOfRange);
// should a server send it as an ERROR event instead, the Kubernetes wording
// "too old resource version" is mapped to OutOfRange too, so that callers
// relist either way.
func WatchEventError(resp *kplanev1.WatchResponse) error {
	msg := resp.GetError()
	if msg == "" {
		msg = "watch error event without a message"
	}
	if strings.Contains(strings.ToLower(msg), "too old resource version") {
		return status.Error(codes.OutOfRange, msg)
	}
	return status.Error(codes.Unknown, msg)
}

// GetScale reads the scale subresource of ns/name (kinds with
// spec.replicas: ReplicaSet, ReplicationController, Deployment, StatefulSet).
func (t *Typed[T]) GetScale(ctx context.Context, ns, name string) (*kplanev1.Scale, error) {
	resp, err := t.c.ResourcesClient.GetScale(ctx, &kplanev1.GetScaleRequest{Kind: t.kind.Name, Namespace: ns, Name: name})
	if err != nil {
		return nil, fmt.Errorf("get %s %s scale: %w", t.kind.Name, kplanev1.MetaKey(ns, name), err)
	}
	return resp.GetScale(), nil
}

// UpdateScale sets spec.replicas of the object s.metadata names; a set
// s.metadata.resourceVersion makes it a compare-and-swap.
func (t *Typed[T]) UpdateScale(ctx context.Context, s *kplanev1.Scale) (*kplanev1.Scale, error) {
	resp, err := t.c.ResourcesClient.UpdateScale(ctx, &kplanev1.UpdateScaleRequest{Kind: t.kind.Name, Scale: s})
	if err != nil {
		return nil, fmt.Errorf("update %s %s scale: %w", t.kind.Name, kplanev1.MetaKey(s.GetMetadata().GetNamespace(), s.GetMetadata().GetName()), err)
	}
	return resp.GetScale(), nil
}
