// Package integration_test drives a real in-process apiserver (embedded
// etcd in a temporary directory, gRPC on a random loopback port) through a
// real gRPC client, as DESIGN.md's integration tier describes. Every test
// starts its own server, so tests are independent and may run in any order.
package integration_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestMain fails the package when a test leaves goroutines behind: every
// watch stream, watch cache and etcd goroutine must end with its server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testserver.PeerLeakOptions()...)
}

// timeout bounds every test's RPCs: long enough for -race on two shared
// cores, short enough that a hang fails the test instead of the package.
const timeout = 2 * time.Minute

// start runs an apiserver for the test and returns it with a client over
// its shared connection.
func start(t *testing.T, opts ...testserver.Option) (*testserver.Server, kplanev1.ResourcesClient) {
	t.Helper()
	srv := testserver.Start(t, opts...)
	return srv, srv.Client()
}

// testCtx is a context that ends with the test (or after timeout).
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it returns true or the deadline passes; it is
// how tests wait for asynchronous effects without fixed sleeps.
func waitFor(t *testing.T, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, deadline, what, cond)
}

// requireCode asserts that err is a gRPC status with code and that its
// message contains every substring.
func requireCode(t *testing.T, err error, code codes.Code, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v containing %q", code, substrings)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status, want %v", err, code)
	}
	if st.Code() != code {
		t.Fatalf("code = %v (%q), want %v", st.Code(), st.Message(), code)
	}
	for _, s := range substrings {
		if !strings.Contains(st.Message(), s) {
			t.Fatalf("message %q does not contain %q", st.Message(), s)
		}
	}
}

// must fails the test on err.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// rev parses an object's resourceVersion.
func rev(t *testing.T, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("resourceVersion %q is not a positive integer", rv)
	}
	return n
}

// ---- object builders

func meta(ns, name string, labels map[string]string) *kplanev1.ObjectMeta {
	return &kplanev1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

func podSpec() *kplanev1.PodSpec {
	return &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25"}}}
}

func newPod(ns, name string, labels map[string]string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Pod{Metadata: meta(ns, name, labels), Spec: podSpec()})
}

func newBoundPod(ns, name, node string) *kplanev1.Object {
	o := newPod(ns, name, nil)
	o.GetPod().Spec.NodeName = node
	return o
}

func newSecret(ns, name string, data map[string][]byte) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Secret{Metadata: meta(ns, name, nil), Data: data})
}

func newNamespace(name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: name}})
}

func newNode(name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name}})
}

func newReplicaSet(ns, name string, replicas int32) *kplanev1.Object {
	lbl := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: meta(ns, name, nil),
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: lbl},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: lbl}, Spec: podSpec()},
		},
	})
}

func newLease(ns, name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Lease{
		Metadata: meta(ns, name, nil),
		Spec:     &kplanev1.LeaseSpec{HolderIdentity: "holder", LeaseDurationSeconds: 15},
	})
}

func newEvent(ns, name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Event{
		Metadata:       meta(ns, name, nil),
		InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web"},
		Reason:         "Scheduled",
		Message:        "assigned to node-1",
	})
}

// ---- RPC shorthands that fail the test on error

func create(t *testing.T, c kplanev1.ResourcesClient, obj *kplanev1.Object) *kplanev1.Object {
	t.Helper()
	resp, err := c.Create(testCtx(t), &kplanev1.CreateRequest{Object: obj})
	must(t, err, "create "+obj.KindName()+" "+obj.Key())
	return resp.GetObject()
}

func get(t *testing.T, c kplanev1.ResourcesClient, kind, ns, name string) *kplanev1.Object {
	t.Helper()
	resp, err := c.Get(testCtx(t), &kplanev1.GetRequest{Kind: kind, Namespace: ns, Name: name})
	must(t, err, "get "+kind+" "+ns+"/"+name)
	return resp.GetObject()
}

func update(t *testing.T, c kplanev1.ResourcesClient, obj *kplanev1.Object) *kplanev1.Object {
	t.Helper()
	resp, err := c.Update(testCtx(t), &kplanev1.UpdateRequest{Object: obj})
	must(t, err, "update "+obj.KindName()+" "+obj.Key())
	return resp.GetObject()
}

func updateStatus(t *testing.T, c kplanev1.ResourcesClient, obj *kplanev1.Object) *kplanev1.Object {
	t.Helper()
	resp, err := c.UpdateStatus(testCtx(t), &kplanev1.UpdateStatusRequest{Object: obj})
	must(t, err, "update status "+obj.KindName()+" "+obj.Key())
	return resp.GetObject()
}

func list(t *testing.T, c kplanev1.ResourcesClient, req *kplanev1.ListRequest) *kplanev1.ListResponse {
	t.Helper()
	resp, err := c.List(testCtx(t), req)
	must(t, err, "list "+req.GetKind())
	return resp
}

func requireNotFound(t *testing.T, c kplanev1.ResourcesClient, kind, ns, name string) {
	t.Helper()
	_, err := c.Get(testCtx(t), &kplanev1.GetRequest{Kind: kind, Namespace: ns, Name: name})
	requireCode(t, err, codes.NotFound, "not found")
}

// names returns the sorted "namespace/name" keys of objects.
func names(objs []*kplanev1.Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Key())
	}
	sort.Strings(out)
	return out
}

// ---- whole-store snapshots

// storeSnapshot is every object of every kind plus the revision the
// store was at: if nothing was written in between, two snapshots are
// equal, resourceVersions included.
type storeSnapshot struct {
	revision string
	objects  map[string][]*kplanev1.Object
}

func snapshot(t *testing.T, c kplanev1.ResourcesClient) storeSnapshot {
	t.Helper()
	s := storeSnapshot{objects: map[string][]*kplanev1.Object{}}
	for _, k := range kplanev1.KindNames() {
		resp := list(t, c, &kplanev1.ListRequest{Kind: k})
		s.objects[k] = resp.GetItems()
		// The last List's revision is the store's current revision; all
		// Lists read it as no write happens while the snapshot is taken.
		s.revision = resp.GetResourceVersion()
	}
	return s
}

// diff describes how two snapshots differ, or returns "".
func (s storeSnapshot) diff(other storeSnapshot) string {
	var out []string
	if s.revision != other.revision {
		out = append(out, fmt.Sprintf("store revision %s -> %s (something was written)", s.revision, other.revision))
	}
	for _, k := range kplanev1.KindNames() {
		a, b := s.objects[k], other.objects[k]
		if len(a) != len(b) {
			out = append(out, fmt.Sprintf("%s: %d objects -> %d", k, len(a), len(b)))
			continue
		}
		for i := range a {
			if !proto.Equal(a[i], b[i]) {
				out = append(out, fmt.Sprintf("%s %s changed (resourceVersion %s -> %s)", k, a[i].Key(),
					a[i].Meta().GetResourceVersion(), b[i].Meta().GetResourceVersion()))
			}
		}
	}
	return strings.Join(out, "; ")
}

// ---- watch helpers

// watcher reads one watch stream in the test goroutine.
type watcher struct {
	t      *testing.T
	stream grpc.ServerStreamingClient[kplanev1.WatchResponse]
	cancel context.CancelFunc
}

func watch(t *testing.T, c kplanev1.ResourcesClient, req *kplanev1.WatchRequest) *watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	stream, err := c.Watch(ctx, req)
	if err != nil {
		cancel()
		t.Fatalf("watch %s: %v", req.GetKind(), err)
	}
	w := &watcher{t: t, stream: stream, cancel: cancel}
	t.Cleanup(cancel)
	return w
}

// next returns the next event, failing the test on a stream error.
func (w *watcher) next() *kplanev1.WatchResponse {
	w.t.Helper()
	ev, err := w.stream.Recv()
	if err != nil {
		w.t.Fatalf("watch: %v", err)
	}
	return ev
}

// nextNonBookmark skips bookmarks.
func (w *watcher) nextNonBookmark() *kplanev1.WatchResponse {
	w.t.Helper()
	for {
		ev := w.next()
		if ev.GetType() != kplanev1.EventType_EVENT_TYPE_BOOKMARK {
			return ev
		}
	}
}

// expect reads the next non-bookmark event and checks its type and key.
func (w *watcher) expect(typ kplanev1.EventType, key string) *kplanev1.WatchResponse {
	w.t.Helper()
	ev := w.nextNonBookmark()
	if ev.GetType() != typ || ev.GetObject().Key() != key {
		w.t.Fatalf("watch event = %v %s (rv %s), want %v %s", ev.GetType(), ev.GetObject().Key(), ev.GetResourceVersion(), typ, key)
	}
	if ev.GetResourceVersion() == "" {
		w.t.Fatalf("watch event %v %s has no resourceVersion", typ, key)
	}
	return ev
}

// recvErr reads until the stream fails and returns that error.
func (w *watcher) recvErr() error {
	for {
		if _, err := w.stream.Recv(); err != nil {
			return err
		}
	}
}
