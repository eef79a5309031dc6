package integration_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestRestartKeepsEverything stops the apiserver (gracefully, then
// abruptly) and starts it on the same data directory: every object is
// intact and new writes get higher revisions than any before.
func TestRestartKeepsEverything(t *testing.T) {
	for _, mode := range []string{"stop", "kill"} {
		t.Run(mode, func(t *testing.T) {
			srv, c := start(t)
			seed(t, c)
			before := snapshot(t, c)
			maxRev := rev(t, before.revision)

			if mode == "stop" {
				srv.Stop()
			} else {
				srv.Kill()
			}
			srv.Restart(t)

			// The shared connection reconnects; wait for it rather than
			// failing fast while it backs off.
			ctx := testCtx(t)
			_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Namespace", Name: "default"}, grpc.WaitForReady(true))
			must(t, err, "first request after restart")

			after := snapshot(t, c)
			if d := before.diff(after); d != "" {
				t.Fatalf("store differs after %s and restart: %s", mode, d)
			}
			p := create(t, c, newPod("team", "after-restart", nil))
			if r := rev(t, p.Meta().GetResourceVersion()); r <= maxRev {
				t.Fatalf("write after restart got revision %d, not above %d", r, maxRev)
			}
			// Updates of old objects keep working (their revisions are valid CAS tokens).
			old := get(t, c, "Secret", "team", "s-0")
			old.GetSecret().Data = map[string][]byte{"k": []byte("changed")}
			if u := update(t, c, old); rev(t, u.Meta().GetResourceVersion()) <= rev(t, p.Meta().GetResourceVersion()) {
				t.Fatalf("update after restart got revision %s, not above %s", u.Meta().GetResourceVersion(), p.Meta().GetResourceVersion())
			}
			// And watches resume from a revision written before the restart.
			w := watch(t, c, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "team", ResourceVersion: before.revision})
			w.expect(added, p.Key())
		})
	}
}

// TestRestartWithDataDir reuses a data directory across two separate
// servers, as an operator restarting the binary would.
func TestRestartWithDataDir(t *testing.T) {
	dir := t.TempDir()
	srv := testserver.Start(t, testserver.WithDataDir(dir))
	c := srv.Client()
	seed(t, c)
	before := snapshot(t, c)
	srv.Stop()

	srv2 := testserver.Start(t, testserver.WithDataDir(dir))
	c2 := srv2.Client()
	if d := before.diff(snapshot(t, c2)); d != "" {
		t.Fatalf("store differs on a new server over the same data dir: %s", d)
	}
}

// seed writes objects of several kinds, with updates, finalizers and a
// deletion, so a restart has history to keep.
func seed(t *testing.T, c kplanev1.ResourcesClient) {
	t.Helper()
	create(t, c, newNamespace("team"))
	create(t, c, newNode("node-1"))
	for i := range 5 {
		create(t, c, newSecret("team", fmt.Sprintf("s-%d", i), map[string][]byte{"k": []byte("v")}))
		p := create(t, c, newPod("team", fmt.Sprintf("p-%d", i), map[string]string{"i": fmt.Sprint(i)}))
		p.GetPod().Status.Phase = "Running"
		updateStatus(t, c, p)
	}
	rs := create(t, c, newReplicaSet("team", "rs", 2))
	rs.GetReplicaSet().Spec.Replicas = proto.Int32(4)
	update(t, c, rs)
	held := newSecret("team", "held", nil)
	held.Meta().Finalizers = []string{"example.com/hold"}
	create(t, c, held)
	_, err := c.Delete(testCtx(t), &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "team", Name: "held"})
	must(t, err, "mark held")
	_, err = c.Delete(testCtx(t), &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "team", Name: "s-4"})
	must(t, err, "delete s-4")
	create(t, c, newLease("kplane-system", "leader"))
	create(t, c, newEvent("team", "ev"))
}

// TestEventsExpire checks that Events are written with an etcd lease and
// disappear after --event-ttl, while other kinds stay.
func TestEventsExpire(t *testing.T) {
	_, c := start(t, testserver.WithEventTTL(3*time.Second))
	ctx := testCtx(t)
	ev := create(t, c, newEvent("default", "scheduled"))
	create(t, c, newSecret("default", "stays", nil))
	if ev.GetEvent().GetType() != "Normal" || ev.GetEvent().GetCount() != 1 {
		t.Fatalf("event defaults: type %q count %d, want Normal and 1", ev.GetEvent().GetType(), ev.GetEvent().GetCount())
	}
	w := watch(t, c, &kplanev1.WatchRequest{Kind: "Event", ResourceVersion: ev.Meta().GetResourceVersion()})
	get(t, c, "Event", "default", "scheduled")

	waitFor(t, 60*time.Second, "the event to expire", func() bool {
		_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Event", Namespace: "default", Name: "scheduled"})
		return err != nil
	})
	requireNotFound(t, c, "Event", "default", "scheduled")
	w.expect(deleted, "default/scheduled")
	get(t, c, "Secret", "default", "stays")
}
