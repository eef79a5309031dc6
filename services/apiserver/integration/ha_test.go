package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func adminOf(s *testserver.Server) kplanev1.AdminClient { return kplanev1.NewAdminClient(s.Conn()) }

// leaderIndex is the index of the member whose etcd is the Raft leader,
// as the member list of one live apiserver shows it.
func leaderIndex(t *testing.T, ms []*testserver.Member, via int) int {
	t.Helper()
	var idx = -1
	waitFor(t, time.Minute, "an etcd leader", func() bool {
		resp, err := adminOf(ms[via].Server).EtcdMemberList(testCtx(t), &kplanev1.EtcdMemberListRequest{})
		if err != nil {
			return false
		}
		for _, m := range resp.GetMembers() {
			if !m.GetIsLeader() {
				continue
			}
			for i, mm := range ms {
				if mm.Name == m.GetName() {
					idx = i
					return true
				}
			}
		}
		return false
	})
	return idx
}

// TestHAReadsAreLinearizableAcrossApiservers: three apiservers, each
// embedding one etcd member. A write acknowledged by one is read at once
// through the others (Get and List go through Raft), and a List's
// resourceVersion is the same cluster-wide revision on every apiserver.
func TestHAReadsAreLinearizableAcrossApiservers(t *testing.T) {
	ms := testserver.StartCluster(t, 3)
	ctx := testCtx(t)
	for i := 0; i < 9; i++ {
		w := ms[i%3].Client()
		s := create(t, w, newSecret("default", fmt.Sprintf("lin-%d", i), map[string][]byte{"v": {byte(i)}}))
		for j, m := range ms {
			got := get(t, m.Client(), "Secret", "default", s.Meta().GetName())
			if got.Meta().GetResourceVersion() != s.Meta().GetResourceVersion() {
				t.Fatalf("apiserver %d reads %s at %s, written at %s", j, s.Key(), got.Meta().GetResourceVersion(), s.Meta().GetResourceVersion())
			}
			l, err := m.Client().List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
			must(t, err, "list")
			if len(l.GetItems()) != i+1 || rev(t, l.GetResourceVersion()) < rev(t, s.Meta().GetResourceVersion()) {
				t.Fatalf("apiserver %d lists %d secrets at %s after write %d at %s", j, len(l.GetItems()), l.GetResourceVersion(), i, s.Meta().GetResourceVersion())
			}
		}
	}
}

// TestHAWatchResumesOnAnotherApiserver: a watch on one apiserver that
// dies is resumed on another from the last resourceVersion received;
// together the two streams carry every change once, in order. The etcd
// leader is then killed: the survivors elect one, writes continue, and
// the restarted member catches up.
func TestHAWatchResumesOnAnotherApiserver(t *testing.T) {
	ms := testserver.StartCluster(t, 3)
	ctx := testCtx(t)
	victim := leaderIndex(t, ms, 0) // the harder case: the watch's apiserver leads etcd
	other := ms[(victim+1)%3]
	writer := ms[(victim+2)%3]
	start := list(t, writer.Client(), &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"}).GetResourceVersion()

	const total = 40
	w := watch(t, ms[victim].Client(), &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: start})
	var seen []string
	var last string
	for i := 0; i < total/2; i++ {
		create(t, writer.Client(), newSecret("default", fmt.Sprintf("w-%02d", i), nil))
	}
	for len(seen) < total/2 {
		ev := w.nextNonBookmark()
		seen = append(seen, ev.GetObject().Meta().GetName())
		last = ev.GetResourceVersion()
	}
	ms[victim].Kill()
	if err := w.recvErr(); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Fatalf("watch on the killed apiserver ended with %v, want Unavailable", err)
	}
	// Writes continue through the survivors once they have a leader.
	for i := total / 2; i < total; i++ {
		obj := newSecret("default", fmt.Sprintf("w-%02d", i), nil)
		waitFor(t, time.Minute, "a write after the leader was killed", func() bool {
			_, err := writer.Client().Create(ctx, &kplanev1.CreateRequest{Object: obj})
			return err == nil || status.Code(err) == codes.AlreadyExists
		})
	}
	w2 := watch(t, other.Client(), &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: last})
	prev := rev(t, last)
	for len(seen) < total {
		ev := w2.nextNonBookmark()
		if r := rev(t, ev.GetResourceVersion()); r <= prev {
			t.Fatalf("resumed watch sent revision %d after %d", r, prev)
		} else {
			prev = r
		}
		seen = append(seen, ev.GetObject().Meta().GetName())
	}
	for i, n := range seen {
		if want := fmt.Sprintf("w-%02d", i); n != want {
			t.Fatalf("event %d is %s, want %s (all: %v)", i, n, want, seen)
		}
	}
	// The killed member comes back and catches up: it reads what was
	// written while it was down.
	ms[victim].Restart(t)
	got := get(t, ms[victim].Client(), "Secret", "default", fmt.Sprintf("w-%02d", total-1))
	if got == nil {
		t.Fatal("restarted member does not read the last write")
	}
	w3 := watch(t, ms[victim].Client(), &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: last})
	n := 0
	for n < total/2 {
		ev := w3.nextNonBookmark()
		if want := fmt.Sprintf("w-%02d", total/2+n); ev.GetObject().Meta().GetName() != want {
			t.Fatalf("restarted member's watch: event %s, want %s", ev.GetObject().Meta().GetName(), want)
		}
		n++
	}
}

// TestHAQuorumLoss: with two of three members down, a write fails with
// Unavailable, never succeeds or answers wrongly, and the read of the
// survivor fails alike; once one member returns, both work again.
func TestHAQuorumLoss(t *testing.T) {
	ms := testserver.StartCluster(t, 3)
	s := create(t, ms[0].Client(), newSecret("default", "before", nil))
	w := watch(t, ms[0].Client(), &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: s.Meta().GetResourceVersion()})
	ms[1].Kill()
	ms[2].Kill()
	// The survivor has no leader: its watches end so that their clients
	// go elsewhere, and its gRPC health turns NOT_SERVING.
	if err := w.recvErr(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("watch on the member without a leader: %v, want Unavailable naming the missing leader", err)
	}
	hc := healthpb.NewHealthClient(ms[0].Conn())
	waitFor(t, 30*time.Second, "NOT_SERVING without a leader", func() bool {
		resp, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{Service: "kplane.v1.Resources"})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := ms[0].Client().Create(ctx, &kplanev1.CreateRequest{Object: newSecret("default", "during", nil)})
	if c := status.Code(err); c != codes.Unavailable {
		t.Fatalf("write without quorum: %v, want Unavailable", err)
	}
	_, err = ms[0].Client().Get(ctx, &kplanev1.GetRequest{Kind: "Secret", Namespace: "default", Name: s.Meta().GetName()})
	if c := status.Code(err); c != codes.Unavailable {
		t.Fatalf("linearizable read without quorum: %v, want Unavailable", err)
	}
	waitFor(t, 30*time.Second, "readyz to fail without a leader", func() bool {
		return !ready(ms[0].Server)
	})
	ms[1].Restart(t)
	waitFor(t, time.Minute, "SERVING once quorum is back", func() bool {
		resp, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{Service: "kplane.v1.Resources"})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	waitFor(t, time.Minute, "a write once quorum is back", func() bool {
		_, err := ms[0].Client().Create(ctx, &kplanev1.CreateRequest{Object: newSecret("default", "after", nil)})
		return err == nil
	})
	// The write that failed was not applied later behind the client's back
	// in a way that contradicts what was answered: Unavailable is
	// "unknown", so either outcome is allowed; the read must agree with
	// itself on every live member.
	for _, m := range ms[:2] {
		l := list(t, m.Client(), &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
		if !strings.Contains(strings.Join(names(l.GetItems()), ","), "after") {
			t.Fatalf("member lists %v, missing the write made after quorum returned", names(l.GetItems()))
		}
	}
}

func ready(s *testserver.Server) bool {
	return s.API().ReadyErr() == nil
}

// TestHAMemberAddRemove: a member is added through the admin API and its
// apiserver joins with state existing; a removed member's apiserver
// stops, and its data dir is refused on the next start.
func TestHAMemberAddRemove(t *testing.T) {
	ms := testserver.StartCluster(t, 3)
	ctx := testCtx(t)
	adm := adminOf(ms[0].Server)

	_, err := adm.EtcdMemberAdd(ctx, &kplanev1.EtcdMemberAddRequest{Name: "m1", PeerUrls: []string{"http://127.0.0.1:1"}})
	requireCode(t, err, codes.AlreadyExists, `etcd member "m1" already exists`)
	_, err = adm.EtcdMemberAdd(ctx, &kplanev1.EtcdMemberAddRequest{Name: "m9", PeerUrls: []string{"127.0.0.1:1"}})
	requireCode(t, err, codes.InvalidArgument, "peer_urls[0]")
	_, err = adm.EtcdMemberAdd(ctx, &kplanev1.EtcdMemberAddRequest{PeerUrls: []string{"http://127.0.0.1:1"}})
	requireCode(t, err, codes.InvalidArgument, "name: required")
	_, err = adm.EtcdMemberRemove(ctx, &kplanev1.EtcdMemberRemoveRequest{Name: "nobody"})
	requireCode(t, err, codes.NotFound, `no etcd member with name "nobody"`)
	_, err = adm.EtcdMemberRemove(ctx, &kplanev1.EtcdMemberRemoveRequest{})
	requireCode(t, err, codes.InvalidArgument, "give exactly one")

	// Remove m2: its apiserver notices and stops serving.
	// etcd refuses a removal until every member has been connected for a
	// while (strict reconfiguration check): Unavailable, retried.
	var resp *kplanev1.EtcdMemberRemoveResponse
	waitFor(t, time.Minute, "m2 removed", func() bool {
		var err error
		resp, err = adm.EtcdMemberRemove(ctx, &kplanev1.EtcdMemberRemoveRequest{Name: "m2"})
		if err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("remove m2: %v", err)
		}
		return err == nil
	})
	if len(resp.GetMembers()) != 2 || resp.GetRemoved().GetName() != "m2" {
		t.Fatalf("remove: %v", resp)
	}
	select {
	case <-ms[2].API().Done():
	case <-time.After(time.Minute):
		t.Fatal("the removed member's apiserver did not notice its removal")
	}
	if err := ms[2].API().Err(); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("removed apiserver's error: %v", err)
	}
	ms[2].Kill()
	err = ms[2].RestartErr()
	if err == nil || !strings.Contains(err.Error(), "removed from its cluster") {
		t.Fatalf("restart on the removed member's data dir: %v, want a refusal naming the removal", err)
	}
	if _, serr := os.Stat(filepath.Join(ms[2].DataDir(), "etcd-member-removed")); serr != nil {
		t.Fatalf("removed member's data dir is not marked: %v", serr)
	}

	// Add m3 and start it with state existing.
	peer := testserver.FreePeerURL(t)
	var add *kplanev1.EtcdMemberAddResponse
	waitFor(t, time.Minute, "m3 added", func() bool {
		var err error
		add, err = adm.EtcdMemberAdd(ctx, &kplanev1.EtcdMemberAddRequest{Name: "m3", PeerUrls: []string{peer}})
		if err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("add m3: %v", err)
		}
		return err == nil
	})
	if !strings.Contains(add.GetInitialCluster(), "m3="+peer) || !strings.Contains(add.GetInitialCluster(), "m0=") {
		t.Fatalf("initial cluster %q", add.GetInitialCluster())
	}
	m3 := testserver.New(t, testserver.WithEtcdMember("m3", add.GetInitialCluster(), "existing"))
	must(t, m3.StartErr(), "start m3")
	s := create(t, ms[0].Client(), newSecret("default", "for-m3", nil))
	if got := get(t, m3.Client(), "Secret", "default", "for-m3"); got.Meta().GetResourceVersion() != s.Meta().GetResourceVersion() {
		t.Fatalf("m3 reads %s, want %s", got.Meta().GetResourceVersion(), s.Meta().GetResourceVersion())
	}
	list, err := adminOf(m3).EtcdMemberList(ctx, &kplanev1.EtcdMemberListRequest{})
	must(t, err, "list via m3")
	var got []string
	leaders := 0
	for _, m := range list.GetMembers() {
		got = append(got, m.GetName())
		if m.GetIsLeader() {
			leaders++
		}
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "m0,m1,m3" || leaders != 1 {
		t.Fatalf("members %v with %d leaders", got, leaders)
	}
}

// TestSnapshotRestoreKeepsResourceVersions: backup, wipe, restore: every
// object is back with the same resourceVersion, and new writes get
// higher revisions.
func TestSnapshotRestoreKeepsResourceVersions(t *testing.T) {
	srv, c := start(t)
	seed(t, c)
	before := snapshot(t, c)
	file := filepath.Join(t.TempDir(), "kplane.snapshot")
	saveSnapshot(t, srv, file)
	srv.Stop()
	must(t, os.RemoveAll(srv.DataDir()), "wipe the data dir")

	restored := testserver.Start(t, testserver.WithEtcdRestoreFrom(file))
	after := snapshot(t, restored.Client())
	if d := before.diff(after); d != "" {
		t.Fatalf("restored store differs: %s", d)
	}
	p := create(t, restored.Client(), newPod("team", "after-restore", nil))
	if rev(t, p.Meta().GetResourceVersion()) <= rev(t, before.revision) {
		t.Fatalf("write after restore at %s, not above %s", p.Meta().GetResourceVersion(), before.revision)
	}
	// Restoring over a data dir that holds etcd data is refused.
	again := testserver.New(t, testserver.WithDataDir(restored.DataDir()), testserver.WithEtcdRestoreFrom(file))
	restored.Stop()
	if err := again.StartErr(); err == nil || !strings.Contains(err.Error(), "already holds etcd data") {
		t.Fatalf("restore over existing data: %v", err)
	}
	bad := testserver.New(t, testserver.WithEtcdRestoreFrom(filepath.Join(t.TempDir(), "missing")))
	if err := bad.StartErr(); err == nil || !strings.Contains(err.Error(), "--etcd-restore-from") {
		t.Fatalf("restore from a missing file: %v", err)
	}
}

func saveSnapshot(t *testing.T, srv *testserver.Server, file string) {
	t.Helper()
	stream, err := adminOf(srv).EtcdSnapshot(testCtx(t), &kplanev1.EtcdSnapshotRequest{})
	must(t, err, "snapshot")
	f, err := os.Create(file)
	must(t, err, "create snapshot file")
	defer func() { _ = f.Close() }()
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		must(t, err, "receive snapshot")
		_, err = f.Write(msg.GetData())
		must(t, err, "write snapshot")
	}
	must(t, f.Sync(), "sync snapshot")
}

// TestAdminIsForAdminsOnly: with RBAC, a user who is not an admin is
// PermissionDenied on every admin method; system:masters is allowed.
func TestAdminIsForAdminsOnly(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	must(t, os.WriteFile(tokens, []byte("admintoken,alice,1,\"system:masters\"\nbobtoken,bob,2\n"), 0o600), "token file")
	srv := testserver.Start(t, testserver.WithTokenAuthFile(tokens), testserver.WithAuthorization("", "RBAC"))
	adm := adminOf(srv)
	ctx := testCtx(t)
	bob := withToken(ctx, "bobtoken")
	_, err := adm.EtcdMemberList(bob, &kplanev1.EtcdMemberListRequest{})
	requireCode(t, err, codes.PermissionDenied, `user "bob" may not list etcd members`)
	_, err = adm.EtcdMemberAdd(bob, &kplanev1.EtcdMemberAddRequest{Name: "x", PeerUrls: []string{"http://127.0.0.1:1"}})
	requireCode(t, err, codes.PermissionDenied)
	_, err = adm.EtcdMemberRemove(bob, &kplanev1.EtcdMemberRemoveRequest{Name: "kplane"})
	requireCode(t, err, codes.PermissionDenied)
	stream, err := adm.EtcdSnapshot(bob, &kplanev1.EtcdSnapshotRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	requireCode(t, err, codes.PermissionDenied)
	_, err = adm.EtcdMemberList(ctx, &kplanev1.EtcdMemberListRequest{})
	requireCode(t, err, codes.Unauthenticated)

	resp, err := adm.EtcdMemberList(withToken(ctx, "admintoken"), &kplanev1.EtcdMemberListRequest{}, grpc.WaitForReady(true))
	must(t, err, "admin lists members")
	if len(resp.GetMembers()) != 1 || !resp.GetMembers()[0].GetIsLeader() {
		t.Fatalf("members %v", resp.GetMembers())
	}
	_, err = adm.EtcdMemberRemove(withToken(ctx, "admintoken"), &kplanev1.EtcdMemberRemoveRequest{Name: "kplane"})
	requireCode(t, err, codes.FailedPrecondition, "only member")
}
