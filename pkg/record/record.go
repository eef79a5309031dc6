// Package record writes Kubernetes-style Events about objects: what a
// controller, the scheduler or a node agent did and why ("Scheduled",
// "FailedScheduling", "NodeNotReady"). Repeats of the same event about
// the same object are folded into one Event whose count grows, as in
// Kubernetes, so a loop that fails every second writes one object, not
// thousands.
package record

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Event types.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// foldWindow is how long a repeated event is folded into the previous one.
const foldWindow = 10 * time.Minute

// foldCacheSize bounds how many recent events a recorder remembers for
// folding. A component that records one event per object (the scheduler's
// Scheduled for every pod) would otherwise keep every one for the whole
// window; past the bound, the least recently recorded are forgotten and
// their next repeat starts a new Event, as Kubernetes' event correlator does.
const foldCacheSize = 4096

// Recorder writes Events through the apiserver. It is safe for concurrent use.
type Recorder struct {
	api       kplanev1.ResourcesClient
	component string
	host      string
	log       hclog.Logger
	now       func() time.Time

	// recent holds the last Event written per foldKey; it is
	// safe for concurrent use and evicts in O(1).
	recent *lru.Cache[foldKey, *kplanev1.Event]
}

type foldKey struct {
	uid, reason, message, typ string
}

// New returns a recorder reporting as component (e.g. "scheduler") on host.
func New(api kplanev1.ResourcesClient, component, host string, log hclog.Logger) *Recorder {
	return newRecorder(api, component, host, log, foldCacheSize)
}

func newRecorder(api kplanev1.ResourcesClient, component, host string, log hclog.Logger, remember int) *Recorder {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	recent, err := lru.New[foldKey, *kplanev1.Event](remember)
	if err != nil {
		panic(fmt.Sprintf("record: fold cache of %d: %v", remember, err)) // only for a size <= 0
	}
	return &Recorder{api: api, component: component, host: host, log: log, now: time.Now, recent: recent}
}

// Eventf records an event about obj. Failures are logged, not returned:
// events are advice, and a controller must not fail its work over one.
func (r *Recorder) Eventf(ctx context.Context, obj *kplanev1.Object, eventType, reason, format string, args ...any) {
	if err := r.record(ctx, obj, eventType, reason, fmt.Sprintf(format, args...)); err != nil {
		r.log.Warn("could not record event", "object", obj.KindName()+"/"+obj.Key(), "reason", reason, "error", err)
	}
}

func (r *Recorder) record(ctx context.Context, obj *kplanev1.Object, eventType, reason, message string) error {
	meta := obj.Meta()
	if meta == nil {
		return fmt.Errorf("event about an empty object")
	}
	ns := meta.GetNamespace()
	if ns == "" {
		ns = kplanev1.NamespaceDefault // events about cluster-scoped objects live in default, as in Kubernetes
	}
	now := timestamppb.New(r.now())
	key := foldKey{uid: meta.GetUid(), reason: reason, message: message, typ: eventType}

	prev, _ := r.recent.Get(key)
	if prev != nil && r.now().Sub(prev.GetLastTimestamp().AsTime()) < foldWindow {
		next := proto.Clone(prev).(*kplanev1.Event)
		next.Count++
		next.LastTimestamp = now
		resp, err := r.api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(next)})
		if err == nil {
			r.recent.Add(key, resp.GetObject().GetEvent())
			return nil
		}
		if !client.IsNotFound(err) && !client.IsConflict(err) {
			return fmt.Errorf("update event: %w", err)
		}
		// Expired or changed elsewhere: start a new one.
	}
	ev := &kplanev1.Event{
		// Named as Kubernetes names events: the object's name and a
		// nanosecond timestamp, unique without a server-side suffix.
		Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("%s.%x", meta.GetName(), r.now().UnixNano()), Namespace: ns},
		InvolvedObject: &kplanev1.ObjectReference{
			Kind: obj.KindName(), Namespace: meta.GetNamespace(), Name: meta.GetName(),
			Uid: meta.GetUid(), ResourceVersion: meta.GetResourceVersion(),
		},
		Reason:             reason,
		Message:            message,
		Type:               eventType,
		Source:             &kplanev1.EventSource{Component: r.component, Host: r.host},
		ReportingComponent: r.component,
		ReportingInstance:  r.host,
		FirstTimestamp:     now,
		LastTimestamp:      now,
		Count:              1,
	}
	resp, err := r.api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(ev)})
	if err != nil {
		return fmt.Errorf("create event: %w", err)
	}
	r.recent.Add(key, resp.GetObject().GetEvent())
	return nil
}
