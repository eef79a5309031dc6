package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The comparisons the store builds are the ones clientv3's builders make.
func TestComparisonsAreClientv3s(t *testing.T) {
	for name, c := range map[string]struct{ got, want *pb.Compare }{
		"absent":   {createdIs("/k", pb.Compare_EQUAL, 0), cmpOf(clientv3.Compare(clientv3.CreateRevision("/k"), "=", 0))},
		"exists":   {createdIs("/k", pb.Compare_GREATER, 0), cmpOf(clientv3.Compare(clientv3.CreateRevision("/k"), ">", 0))},
		"at rev":   {modifiedAt("/k", 42), cmpOf(clientv3.Compare(clientv3.ModRevision("/k"), "=", 42))},
		"value":    {valueIs("/k", "v"), cmpOf(clientv3.Compare(clientv3.Value("/k"), "=", "v"))},
		"no under": {noneUnder("/p/"), cmpOf(clientv3.Compare(clientv3.CreateRevision("/p/"), "=", 0).WithPrefix())},
	} {
		if !proto.Equal(c.got, c.want) {
			t.Errorf("%s: built %v, clientv3 builds %v", name, c.got, c.want)
		}
	}
}

func cmpOf(c clientv3.Cmp) *pb.Compare { return c.GetCompare() }

// A store over an external etcd calls the KV API on its client's
// connection: every kind of write transaction (conditions, claims and
// their release, leases, prefix conditions, dry runs) behaves as over the
// embedded etcd, and errors keep their codes.
func TestWritesOverANetworkedClient(t *testing.T) {
	ctx, be := openBackend(t)
	members, err := be.Client.MemberList(ctx)
	if err != nil || len(members.Members) == 0 {
		t.Fatalf("member list: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: members.Members[0].ClientURLs, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() }) // test teardown
	s := New(cli, Options{Logger: hclog.NewNullLogger()})

	code := func(err error) codes.Code { return status.Code(err) }
	ns := kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "team"}})
	if _, err := s.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	pod := func(ns, name string) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name},
			Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}})
	}
	created, err := s.Create(ctx, pod("team", "a"))
	if err != nil || created.Meta().ResourceVersion == "" {
		t.Fatalf("create pod: %v (resourceVersion %q)", err, created.GetPod().GetMetadata().GetResourceVersion())
	}
	if _, err := s.Create(ctx, pod("team", "a")); code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v, want AlreadyExists", err)
	}
	if _, err := s.Create(ctx, pod("nowhere", "a")); code(err) != codes.NotFound {
		t.Fatalf("create into a missing namespace: %v, want NotFound", err)
	}
	if _, err := s.Create(WithDryRun(ctx), pod("team", "dry")); err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if _, err := s.Get(ctx, "Pod", "team", "dry"); code(err) != codes.NotFound {
		t.Fatalf("a dry run stored its pod: %v", err)
	}
	created.Meta().Labels = map[string]string{"tier": "web"}
	updated, err := s.Update(ctx, created)
	if err != nil || updated.Meta().ResourceVersion == created.GetPod().GetMetadata().GetResourceVersion() {
		t.Fatalf("update: %v", err)
	}
	if _, err := s.Update(ctx, created); code(err) != codes.Aborted {
		t.Fatalf("update at a stale revision: %v, want a conflict (Aborted)", err)
	}

	// A claimed value is taken in the create's transaction, refused to a
	// second claimant and released by the delete's.
	svc := func(name string) *kplanev1.Object {
		return kplanev1.MustWrap(&kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Namespace: "team", Name: name},
			Spec: &kplanev1.ServiceSpec{ClusterIp: "127.16.0.50", Ports: []*kplanev1.ServicePort{{Port: 80}}}})
	}
	if _, err := s.Create(ctx, svc("one")); err != nil {
		t.Fatalf("create service: %v", err)
	}
	if _, err := s.Create(ctx, svc("two")); code(err) != codes.InvalidArgument {
		t.Fatalf("second service on the same cluster IP: %v, want InvalidArgument", err)
	}
	if _, err := s.Delete(ctx, "Service", "team", "one", DeleteOptions{}); err != nil {
		t.Fatalf("delete service: %v", err)
	}
	if _, err := s.Create(ctx, svc("two")); err != nil {
		t.Fatalf("the released cluster IP was not free again: %v", err)
	}

	// An Event expires: its key is stored with a lease.
	ev := kplanev1.MustWrap(&kplanev1.Event{Metadata: &kplanev1.ObjectMeta{Namespace: "team", Name: "e"},
		InvolvedObject: &kplanev1.ObjectReference{Kind: "Pod", Namespace: "team", Name: "a"}, Reason: "Started", Message: "m", Type: "Normal"})
	if _, err := s.Create(ctx, ev); err != nil {
		t.Fatalf("create event: %v", err)
	}
	resp, err := cli.Get(ctx, ObjectKey(kplanev1.LookupKind("Event"), "team", "e"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the event was not stored with a lease: %v %v", err, resp.Kvs)
	}

	// A namespace is deleted only empty (prefix conditions), and with
	// its events (a prefix delete).
	if _, err := s.Delete(ctx, "Namespace", "", "team", DeleteOptions{}); code(err) != codes.FailedPrecondition {
		t.Fatalf("delete a namespace holding a pod: %v, want FailedPrecondition", err)
	}
	if _, err := s.Create(ctx, kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "quiet"}})); err != nil {
		t.Fatal(err)
	}
	ev.Meta().Namespace, ev.Meta().ResourceVersion, ev.GetEvent().InvolvedObject.Namespace = "quiet", "", "quiet"
	if _, err := s.Create(ctx, ev); err != nil {
		t.Fatalf("create event: %v", err)
	}
	if _, err := s.Delete(ctx, "Namespace", "", "quiet", DeleteOptions{}); err != nil {
		t.Fatalf("delete a namespace holding only an event: %v", err)
	}
	left, err := cli.Get(ctx, ListPrefix(kplanev1.LookupKind("Event"), "quiet"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || left.Count != 0 {
		t.Fatalf("the namespace's events outlived it: %v, %v", err, left)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Create(cancelled, pod("team", "late")); code(err) != codes.Canceled {
		t.Fatalf("create with a cancelled context: %v, want Canceled", err)
	}
}

// An in-process client has no connection to call the KV API on: the
// store refuses it at once, naming what is missing.
func TestInProcessClientNeedsKV(t *testing.T) {
	_, be := openBackend(t)
	defer func() {
		r := recover()
		if msg, _ := r.(string); !strings.Contains(msg, "Options.KV") {
			t.Fatalf("New without a KV for an in-process client: recovered %v, want a panic naming Options.KV", r)
		}
	}()
	New(be.Client, Options{})
}
