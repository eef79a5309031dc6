package watchcache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
)

func readyPodCache() *Cache {
	c := New(Config{Kind: kplanev1.LookupKind("Pod"), Capacity: 1000})
	c.loaded = true
	c.readyClosed = true
	close(c.ready)
	return c
}

func putEvents(t testing.TB, objs []*kplanev1.Object, rev int64) clientv3.WatchResponse {
	t.Helper()
	var resp clientv3.WatchResponse
	for i, obj := range objs {
		b, err := store.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		resp.Events = append(resp.Events, &clientv3.Event{Type: mvccpb.PUT,
			Kv: &mvccpb.KeyValue{Key: []byte("/registry/pod/" + obj.Key()), Value: b, ModRevision: rev + int64(i)}})
	}
	return resp
}

func deleteEvent(key string, rev int64) clientv3.WatchResponse {
	return clientv3.WatchResponse{Events: []*clientv3.Event{{Type: mvccpb.DELETE,
		Kv: &mvccpb.KeyValue{Key: []byte("/registry/pod/" + key), ModRevision: rev}}}}
}

// stamped is obj as the cache holds it at rev.
func stamped(obj *kplanev1.Object, rev int64) *kplanev1.Object {
	o := proto.Clone(obj).(*kplanev1.Object)
	o.Meta().ResourceVersion = store.FormatRevision(rev)
	return o
}

// mixedPods are pods in two namespaces with and without labels, on two
// nodes and none, in two phases and two restart policies.
func mixedPods() []*kplanev1.Object {
	var out []*kplanev1.Object
	for i := range 24 {
		ns := []string{"default", "prod"}[i%2]
		var labels map[string]string
		switch i % 3 {
		case 0:
			labels = map[string]string{"app": "web", "tier": "front"}
		case 1:
			labels = map[string]string{"app": "db"}
		}
		node := []string{"", "n1", "n2"}[i%3/1*0+i/3%3]
		phase := []string{kplanev1.PodRunning, kplanev1.PodPending}[i/4%2]
		restart := []string{"Always", "Never"}[i/5%2]
		out = append(out, kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("p%02d", i), Namespace: ns, Labels: labels, Uid: fmt.Sprint("uid-", i)},
			Spec:     &kplanev1.PodSpec{NodeName: node, RestartPolicy: restart, Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
			Status:   &kplanev1.PodStatus{Phase: phase},
		}))
	}
	return out
}

type selection struct {
	name, ns, labels, fields string
	decodes                  bool // whether the filter needs decoded objects
}

var selections = []selection{
	{"everything", "", "", "", false},
	{"namespace", "prod", "", "", false},
	{"label equality", "", "app=web", "", false},
	{"label set and namespace", "default", "app in (web,db)", "", false},
	{"label absence", "", "!app", "", false},
	{"label inequality", "prod", "app!=web", "", false},
	{"precomputed field", "", "", "spec.nodeName=n1", false},
	{"precomputed field inequality", "prod", "", "spec.nodeName!=,status.phase=Running", false},
	{"name and namespace fields", "", "", "metadata.name=p03,metadata.namespace=prod", false},
	{"label and precomputed field", "", "app=db", "spec.nodeName=n2", false},
	{"decoded field", "", "", "spec.restartPolicy=Never", true},
	{"decoded and precomputed field", "default", "app", "spec.restartPolicy=Always,status.phase=Pending", true},
	{"nothing", "", "app=none", "", false},
}

func filterFor(t *testing.T, s selection) *store.Filter {
	t.Helper()
	f, err := store.NewFilter(kplanev1.LookupKind("Pod"), s.ns, s.labels, s.fields)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func prefixOf(ns string) string {
	if ns == "" {
		return ""
	}
	return ns + "/"
}

// keysWhere is the sorted keys of the objects f matches, judged on the
// decoded objects as the cache did when it kept them decoded.
func keysWhere(objs []*kplanev1.Object, f *store.Filter) []string {
	var out []string
	for _, o := range objs {
		if f.Matches(o) {
			out = append(out, o.Key())
		}
	}
	slices.Sort(out)
	return out
}

// Select and a watch's initial events pick the objects the filter picks
// from the decoded objects, whether they judge by attributes or decode.
func TestSelectAndInitialWatchMatchDecodedFilter(t *testing.T) {
	c := readyPodCache()
	pods := mixedPods()
	c.apply(putEvents(t, pods, 10))
	for _, s := range selections {
		t.Run(s.name, func(t *testing.T) {
			f := filterFor(t, s)
			want := keysWhere(pods, f)
			var got []string
			for _, e := range c.Select(prefixOf(s.ns), f).Entries {
				got = append(got, e.Key)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Select = %v, want %v", got, want)
			}
			for _, encodedOnly := range []bool{false, true} {
				got = nil
				ctx, cancel := context.WithCancel(context.Background())
				if len(want) == 0 {
					cancel() // nothing to wait for
				}
				err := c.Watch(ctx, WatchOptions{Filter: f, Initial: true, EncodedOnly: encodedOnly}, func(r *kplanev1.WatchResponse, b []byte) error {
					obj := &kplanev1.Object{}
					if err := proto.Unmarshal(b, obj); err != nil {
						return err
					}
					if r.GetObject() != nil && !proto.Equal(r.GetObject(), obj) {
						return fmt.Errorf("event object %v differs from its bytes %v", r.GetObject(), obj)
					}
					if r.GetObject() == nil && !encodedOnly {
						return fmt.Errorf("initial event for %s without its object", obj.Key())
					}
					if r.GetResourceVersion() != obj.Meta().GetResourceVersion() {
						return fmt.Errorf("event revision %s, object's %s", r.GetResourceVersion(), obj.Meta().GetResourceVersion())
					}
					got = append(got, obj.Key())
					if len(got) == len(want) {
						cancel()
					}
					return nil
				})
				cancel()
				if err != nil {
					t.Fatalf("watch: %v", err)
				}
				if len(want) > 0 && !slices.Equal(got, want) {
					t.Errorf("initial events (encoded only %v) = %v, want %v", encodedOnly, got, want)
				}
			}
		})
	}
}

// A watcher sees changes as ADDED, MODIFIED or DELETED by whether the
// previous and the new state match its filter, judged as on decoded
// objects.
func TestWatchTransitionsMatchDecodedFilter(t *testing.T) {
	c := readyPodCache()
	pods := mixedPods()
	c.apply(putEvents(t, pods, 10))
	// Every pod changes: labels, node, phase and restart policy rotate,
	// so pods move into and out of every selection.
	var next []*kplanev1.Object
	for i, p := range pods {
		n := proto.Clone(p).(*kplanev1.Object)
		pod := n.GetPod()
		switch i % 4 {
		case 0:
			pod.Metadata.Labels = map[string]string{"app": "db"}
		case 1:
			pod.Spec.NodeName = "n1"
		case 2:
			pod.Status.Phase = kplanev1.PodRunning
		case 3:
			pod.Spec.RestartPolicy = "Never"
		}
		next = append(next, n)
	}
	const from = 100
	c.apply(putEvents(t, next, from))
	// And the first four are deleted.
	for i := range 4 {
		c.apply(deleteEvent(next[i].Key(), from+int64(len(next)+i)))
	}
	for _, s := range selections {
		t.Run(s.name, func(t *testing.T) {
			f := filterFor(t, s)
			var want []string
			for i := range next {
				was, is := f.Matches(pods[i]), f.Matches(next[i])
				switch {
				case is && was:
					want = append(want, "MODIFIED "+next[i].Key())
				case is:
					want = append(want, "ADDED "+next[i].Key())
				case was:
					want = append(want, "DELETED "+next[i].Key())
				}
			}
			for i := range 4 {
				if f.Matches(next[i]) {
					want = append(want, "DELETED "+next[i].Key())
				}
			}
			got := watchAll(t, c, f, from-1, from+int64(len(next)+3))
			if !slices.Equal(got, want) {
				t.Errorf("events\n got %v\nwant %v", got, want)
			}
		})
	}
}

// watchAll watches c from rev until it has sent every event up to last.
func watchAll(t *testing.T, c *Cache, f Matcher, rev, last int64) []string {
	t.Helper()
	// etcd reports progress past the last event, so a watcher whose
	// filter skips the last events still gets a bookmark that passes it.
	progress := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: last + 1}}
	c.apply(progress)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	// As the gRPC server watches: the object travels as the cache's bytes.
	err := c.Watch(ctx, WatchOptions{Filter: f, FromRev: rev, BookmarkInterval: time.Millisecond, EncodedOnly: true}, func(r *kplanev1.WatchResponse, b []byte) error {
		if r.GetType() != kplanev1.EventType_EVENT_TYPE_BOOKMARK {
			obj := &kplanev1.Object{}
			if err := proto.Unmarshal(b, obj); err != nil {
				return err
			}
			got = append(got, strings.TrimPrefix(r.GetType().String(), "EVENT_TYPE_")+" "+obj.Key())
		}
		if v, _ := store.ParseRevision(r.GetResourceVersion()); v >= last {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if ctx.Err() != context.Canceled {
		t.Fatal("the watch did not reach the last event")
	}
	return got
}

// Get, GetAt, Snapshot and Select's entries return the objects stored,
// stamped with their revisions, as private copies; Has, and GetAt at
// another revision, answer without decoding.
func TestReadsReturnStoredObjects(t *testing.T) {
	c := readyPodCache()
	pods := mixedPods()
	c.apply(putEvents(t, pods, 10))
	want := map[string]*kplanev1.Object{}
	for i, p := range pods {
		want[p.Key()] = stamped(p, 10+int64(i))
	}
	for k, w := range want {
		got, ok := c.Get(k)
		if !ok || !proto.Equal(got, w) {
			t.Fatalf("Get(%s) = %v, %v; want %v", k, got, ok, w)
		}
		// The copy is the caller's: it may modify it.
		got.Meta().Labels = map[string]string{"changed": "yes"}
		if again, _ := c.Get(k); !proto.Equal(again, w) {
			t.Fatalf("modifying Get's object changed the cache: %v", again)
		}
		// GetAt answers for the object's own revision only (the
		// conditional update's starting point, store.Options.Cached).
		rev, _ := store.ParseRevision(w.Meta().GetResourceVersion())
		if at, ok := c.GetAt(k, rev); !ok || !proto.Equal(at, w) {
			t.Fatalf("GetAt(%s, %d) = %v, %v; want %v", k, rev, at, ok, w)
		}
	}
	before := decodes.Load()
	if _, ok := c.GetAt("prod/p01", 1); ok {
		t.Error("GetAt found an object at a revision it is not at")
	}
	if !c.Has("prod/p01") || c.Has("prod/p00") {
		t.Error("Has is wrong")
	}
	if _, ok := c.Get("prod/p00"); ok {
		t.Error("Get found an object that is not there")
	}
	if d := decodes.Load() - before; d != 0 {
		t.Errorf("Has, a missing Get and a GetAt at another revision decoded %d objects", d)
	}
	snap, rev := c.Snapshot()
	if rev != 10+int64(len(pods)-1) || len(snap) != len(want) {
		t.Fatalf("Snapshot: %d objects at %d", len(snap), rev)
	}
	for _, o := range snap {
		if !proto.Equal(o, want[o.Key()]) {
			t.Fatalf("Snapshot has %v, want %v", o, want[o.Key()])
		}
	}
	for _, e := range c.Select("", everything{}).Entries {
		o, err := e.Object()
		if err != nil || !proto.Equal(o, want[e.Key]) {
			t.Fatalf("entry %s: %v (%v), want %v", e.Key, o, err, want[e.Key])
		}
		fromBytes := &kplanev1.Object{}
		if err := proto.Unmarshal(e.Encoded(), fromBytes); err != nil || !proto.Equal(fromBytes, want[e.Key]) {
			t.Fatalf("entry %s encodes %v (%v), want %v", e.Key, fromBytes, err, want[e.Key])
		}
	}
}

// A DELETED event carries the object's last state stamped with the
// deletion's revision, in its Object and in its bytes, and its previous
// state as it was.
func TestDeleteEventCarriesLastState(t *testing.T) {
	c := readyPodCache()
	pod := mixedPods()[0]
	c.apply(putEvents(t, []*kplanev1.Object{pod}, 10))
	c.apply(deleteEvent(pod.Key(), 11))
	if c.Has(pod.Key()) {
		t.Fatal("a deleted object is still cached")
	}
	c.mu.RLock()
	e := c.ring[1]
	c.mu.RUnlock()
	want := stamped(pod, 11)
	if last, err := e.Object(); err != nil || e.Type != kplanev1.EventType_EVENT_TYPE_DELETED || e.Rev != 11 || !proto.Equal(last, want) {
		t.Fatalf("event %v at %d with %v (%v), want DELETED at 11 with %v", e.Type, e.Rev, last, err, want)
	}
	fromBytes := &kplanev1.Object{}
	if err := proto.Unmarshal(e.Encoded(), fromBytes); err != nil || !proto.Equal(fromBytes, want) {
		t.Fatalf("event bytes decode to %v (%v), want %v", fromBytes, err, want)
	}
	if !proto.Equal(e.Prev(), stamped(pod, 10)) {
		t.Fatalf("previous state %v, want %v", e.Prev(), stamped(pod, 10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got *kplanev1.WatchResponse
	err := c.Watch(ctx, WatchOptions{Filter: filterFor(t, selection{labels: "app=web"}), FromRev: 10}, func(r *kplanev1.WatchResponse, _ []byte) error {
		got = r
		cancel()
		return nil
	})
	if err != nil || got.GetType() != kplanev1.EventType_EVENT_TYPE_DELETED || !proto.Equal(got.GetObject(), want) || got.GetResourceVersion() != "11" {
		t.Fatalf("watcher got %v (%v), want DELETED %v at 11", got, err, want)
	}
}

// A selection by namespace, labels and the precomputed fields decodes
// nothing: not to List, not for a watch's initial events, not to judge
// an event's previous state. A field selector on another field decodes.
func TestSelectionByAttributesDecodesNothing(t *testing.T) {
	c := readyPodCache()
	pods := mixedPods()
	c.apply(putEvents(t, pods, 10))
	var next []*kplanev1.Object
	for _, p := range pods {
		n := proto.Clone(p).(*kplanev1.Object)
		n.GetPod().Metadata.Labels = map[string]string{"app": "web"}
		next = append(next, n)
	}
	c.apply(putEvents(t, next, 100))
	for _, s := range selections {
		t.Run(s.name, func(t *testing.T) {
			f := filterFor(t, s)
			before := decodes.Load()
			c.Select(prefixOf(s.ns), f)
			want, sent := len(keysWhere(next, f)), 0
			ctx, cancel := context.WithCancel(context.Background())
			if want == 0 {
				cancel() // nothing to wait for
			}
			if err := c.Watch(ctx, WatchOptions{Filter: f, Initial: true, EncodedOnly: true}, func(*kplanev1.WatchResponse, []byte) error {
				if sent++; sent == want {
					cancel()
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			cancel()
			if sent != want {
				t.Errorf("%d initial events, want %d", sent, want)
			}
			watchAll(t, c, f, 99, 100+int64(len(next)-1))
			if d := decodes.Load() - before; (d != 0) != s.decodes {
				t.Errorf("%d objects decoded; want decoding: %v", d, s.decodes)
			}
		})
	}
}
