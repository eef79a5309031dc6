package integration_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestDeleteRemovesObject(t *testing.T) { transports(t, testDeleteRemovesObject) }

func testDeleteRemovesObject(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	p := create(t, c, newPod("default", "web", nil))

	resp, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web"})
	must(t, err, "delete")
	if resp.GetObject().Meta().GetUid() != p.Meta().GetUid() {
		t.Fatalf("Delete returned %v, want the deleted pod", resp.GetObject())
	}
	requireNotFound(t, c, "Pod", "default", "web")
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web"})
	requireCode(t, err, codes.NotFound, wording(c, `Pod "web" not found in namespace "default"`, `pods "web" not found`))

	// The name is free again: a new object gets a new uid.
	again := create(t, c, newPod("default", "web", nil))
	if again.Meta().GetUid() == p.Meta().GetUid() {
		t.Fatalf("recreated pod reuses uid %s", p.Meta().GetUid())
	}
}

func TestDeletePreconditions(t *testing.T) { transports(t, testDeletePreconditions) }

func testDeletePreconditions(t *testing.T, _ *testserver.Server, c kplanev1.ResourcesClient) {
	ctx := testCtx(t)
	p := create(t, c, newPod("default", "web", nil))
	p.Meta().Labels = map[string]string{"v": "2"}
	p2 := update(t, c, p)

	req := func(pre *kplanev1.Preconditions) *kplanev1.DeleteRequest {
		return &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web", Preconditions: pre}
	}
	_, err := c.Delete(ctx, req(&kplanev1.Preconditions{ResourceVersion: p.Meta().GetResourceVersion()}))
	requireCode(t, err, codes.Aborted, "precondition failed: resourceVersion "+p.Meta().GetResourceVersion())
	_, err = c.Delete(ctx, req(&kplanev1.Preconditions{Uid: "some-other-uid"}))
	requireCode(t, err, codes.Aborted, "precondition failed: uid some-other-uid")
	get(t, c, "Pod", "default", "web")

	_, err = c.Delete(ctx, req(&kplanev1.Preconditions{Uid: p2.Meta().GetUid(), ResourceVersion: p2.Meta().GetResourceVersion()}))
	must(t, err, "delete with matching preconditions")
	requireNotFound(t, c, "Pod", "default", "web")
}

func TestFinalizersDelayDeletion(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	in := newSecret("default", "held", map[string][]byte{"k": []byte("v")})
	in.Meta().Finalizers = []string{"example.com/hold"}
	s := create(t, c, in)
	w := watch(t, c, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: s.Meta().GetResourceVersion()})

	resp, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "default", Name: "held"})
	must(t, err, "delete")
	marked := resp.GetObject()
	if marked.Meta().GetDeletionTimestamp() == nil {
		t.Fatalf("Delete of an object with finalizers returned %v, want a deletionTimestamp", marked.Meta())
	}
	got := get(t, c, "Secret", "default", "held")
	if !proto.Equal(got, marked) {
		t.Fatalf("Get after Delete = %v, want the marked object %v", got, marked)
	}
	ev := w.expect(kplanev1.EventType_EVENT_TYPE_MODIFIED, "default/held")
	if ev.GetObject().Meta().GetDeletionTimestamp() == nil {
		t.Fatalf("MODIFIED event lacks the deletionTimestamp")
	}

	// Deleting again changes nothing.
	resp, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "default", Name: "held"})
	must(t, err, "second delete")
	if !proto.Equal(resp.GetObject(), marked) {
		t.Fatalf("second Delete changed the object: %v", resp.GetObject())
	}

	// No finalizer may be added once deletion started.
	add := proto.Clone(got).(*kplanev1.Object)
	add.Meta().Finalizers = append(add.Meta().Finalizers, "example.com/other")
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: add})
	requireCode(t, err, codes.InvalidArgument, "metadata.finalizers: no new finalizers can be added while the object is being deleted")
	// Other updates are fine and keep the deletion mark.
	got.Meta().Labels = map[string]string{"x": "y"}
	got = update(t, c, got)
	if !proto.Equal(got.Meta().GetDeletionTimestamp(), marked.Meta().GetDeletionTimestamp()) {
		t.Fatalf("update changed deletionTimestamp to %v", got.Meta().GetDeletionTimestamp())
	}
	w.expect(kplanev1.EventType_EVENT_TYPE_MODIFIED, "default/held")

	// Removing the last finalizer completes the deletion.
	got.Meta().Finalizers = nil
	update(t, c, got)
	requireNotFound(t, c, "Secret", "default", "held")
	w.expect(kplanev1.EventType_EVENT_TYPE_DELETED, "default/held")
}

func TestGracefulPodDeletion(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	create(t, c, newBoundPod("default", "bound", "node-1"))
	del := func(grace *int64) *kplanev1.Object {
		t.Helper()
		resp, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "bound", GracePeriodSeconds: grace})
		must(t, err, "delete bound pod")
		return resp.GetObject()
	}

	// A bound pod is marked with its termination grace period (default 30).
	marked := del(nil)
	if marked.Meta().GetDeletionTimestamp() == nil || marked.Meta().GetDeletionGracePeriodSeconds() != 30 {
		t.Fatalf("bound pod after Delete: deletionTimestamp %v, grace %d; want set and 30",
			marked.Meta().GetDeletionTimestamp(), marked.Meta().GetDeletionGracePeriodSeconds())
	}
	get(t, c, "Pod", "default", "bound")

	// A shorter grace period shortens it; a longer one does not extend it.
	if m := del(proto.Int64(5)); m.Meta().GetDeletionGracePeriodSeconds() != 5 {
		t.Fatalf("grace after Delete(5) = %d, want 5", m.Meta().GetDeletionGracePeriodSeconds())
	}
	if m := del(proto.Int64(60)); m.Meta().GetDeletionGracePeriodSeconds() != 5 {
		t.Fatalf("grace after Delete(60) = %d, want it to stay 5", m.Meta().GetDeletionGracePeriodSeconds())
	}
	get(t, c, "Pod", "default", "bound")

	// The node agent confirms with a zero grace period: the pod is gone.
	del(proto.Int64(0))
	requireNotFound(t, c, "Pod", "default", "bound")

	// An unbound pod has nothing to stop: it goes at once.
	create(t, c, newPod("default", "unbound", nil))
	_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "unbound"})
	must(t, err, "delete unbound pod")
	requireNotFound(t, c, "Pod", "default", "unbound")
}

func TestPropagationPolicyFinalizers(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		policy, finalizer, name string
	}{
		{"Orphan", "orphan", "rs-orphan"},
		{"Foreground", "foregroundDeletion", "rs-foreground"},
	} {
		name := tc.name
		create(t, c, newReplicaSet("default", name, 1))
		resp, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: "default", Name: name, PropagationPolicy: tc.policy})
		must(t, err, "delete "+tc.policy)
		m := resp.GetObject().Meta()
		if m.GetDeletionTimestamp() == nil || len(m.GetFinalizers()) != 1 || m.GetFinalizers()[0] != tc.finalizer {
			t.Fatalf("%s delete: deletionTimestamp %v finalizers %v, want set and [%s]", tc.policy, m.GetDeletionTimestamp(), m.GetFinalizers(), tc.finalizer)
		}
		got := get(t, c, "ReplicaSet", "default", name)
		if !proto.Equal(got, resp.GetObject()) {
			t.Fatalf("%s: stored %v, want %v", tc.policy, got, resp.GetObject())
		}
		// The garbage collector's part: drop the finalizer, the object goes.
		got.Meta().Finalizers = nil
		update(t, c, got)
		requireNotFound(t, c, "ReplicaSet", "default", name)
	}

	create(t, c, newReplicaSet("default", "rs-background", 1))
	_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: "default", Name: "rs-background", PropagationPolicy: "Background"})
	must(t, err, "delete Background")
	requireNotFound(t, c, "ReplicaSet", "default", "rs-background")
}

func TestNamespaceDeletion(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	create(t, c, newNamespace("team"))
	create(t, c, newPod("team", "web", nil))
	create(t, c, newSecret("team", "s", nil))
	create(t, c, newEvent("team", "ev"))

	_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Namespace", Name: "team"})
	requireCode(t, err, codes.FailedPrecondition, `namespace "team" is not empty`, "1 Pod", "1 Secret")
	get(t, c, "Namespace", "", "team")
	get(t, c, "Pod", "team", "web")

	for _, o := range [][2]string{{"Pod", "web"}, {"Secret", "s"}} {
		_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: o[0], Namespace: "team", Name: o[1]})
		must(t, err, "delete "+o[0])
	}
	// Events do not hold a namespace; they go with it.
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Namespace", Name: "team"})
	must(t, err, "delete empty namespace")
	requireNotFound(t, c, "Namespace", "", "team")
	requireNotFound(t, c, "Event", "team", "ev")
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: newPod("team", "late", nil)})
	requireCode(t, err, codes.NotFound, `namespace "team" not found`)

	for _, sys := range []string{"default", "kplane-system", "kplane-node-lease"} {
		_, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Namespace", Name: sys})
		requireCode(t, err, codes.FailedPrecondition, `namespace "`+sys+`" is a system namespace`)
		get(t, c, "Namespace", "", sys)
	}
}

// A namespace whose deletion waits for a finalizer (a foreground delete)
// is still only removed when empty: dropping the last finalizer of a
// namespace that holds objects is refused, as a plain Delete would be.
func TestNamespaceFinalizerRemovalKeepsEmptinessRule(t *testing.T) {
	_, c := start(t)
	ctx := testCtx(t)
	create(t, c, newNamespace("team"))
	create(t, c, newPod("team", "web", nil))
	create(t, c, newEvent("team", "ev"))

	resp, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Namespace", Name: "team", PropagationPolicy: "Foreground"})
	must(t, err, "foreground delete of a namespace")
	if m := resp.GetObject().Meta(); m.GetDeletionTimestamp() == nil || len(m.GetFinalizers()) != 1 {
		t.Fatalf("foreground delete: deletionTimestamp %v finalizers %v, want set and [foregroundDeletion]", m.GetDeletionTimestamp(), m.GetFinalizers())
	}
	ns := get(t, c, "Namespace", "", "team")
	ns.Meta().Finalizers = nil
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: ns})
	requireCode(t, err, codes.FailedPrecondition, `namespace "team" is not empty`, "1 Pod")
	if got := get(t, c, "Namespace", "", "team"); len(got.Meta().GetFinalizers()) != 1 {
		t.Fatalf("refused update changed the namespace: finalizers %v", got.Meta().GetFinalizers())
	}
	get(t, c, "Pod", "team", "web")

	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "team", Name: "web"})
	must(t, err, "delete pod")
	update(t, c, ns)
	requireNotFound(t, c, "Namespace", "", "team")
	requireNotFound(t, c, "Event", "team", "ev")
}
