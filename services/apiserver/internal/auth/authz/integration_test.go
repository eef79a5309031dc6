package authz_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"

	"github.com/kplane/kplane/services/apiserver/internal/auth/authz"
	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
	"github.com/kplane/kplane/services/apiserver/internal/backend"
	"github.com/kplane/kplane/services/apiserver/internal/server"
	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testIdentity is the test-only stand-in for authentication: it takes
// the user from the x-test-user and x-test-groups metadata. It lives in
// this test file alone; the apiserver has no such path.
func testIdentity(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	names := md.Get("x-test-user")
	if len(names) == 0 {
		return ctx
	}
	u := &user.Info{Name: names[0]}
	if g := md.Get("x-test-groups"); len(g) > 0 && g[0] != "" {
		u.Groups = strings.Split(g[0], ",")
	}
	return user.With(ctx, u)
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s identityStream) Context() context.Context { return s.ctx }

// cluster is a real etcd, store, watch caches and Resources server behind
// the decorator (modes Node,RBAC, audit log on), served over gRPC on a
// loopback socket.
type cluster struct {
	t      *testing.T
	store  *store.Store
	conn   *grpc.ClientConn
	audit  string
	client kplanev1.ResourcesClient
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	be, err := backend.Open(ctx, backend.Config{DataDir: t.TempDir(), UnsafeNoFsync: true, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(be.Client, store.Options{KV: be.KV, Logger: hclog.NewNullLogger()})
	caches := map[string]*watchcache.Cache{}
	sources := map[string]authz.Source{}
	done := make(chan struct{})
	running := 0
	for _, k := range kplanev1.Kinds() {
		c := watchcache.New(watchcache.Config{Kind: k, Client: be.Client, Capacity: 1000})
		caches[k.Name] = c
		sources[k.Name] = c
		running++
		go func() {
			c.Run(ctx)
			done <- struct{}{}
		}()
	}
	for _, c := range caches {
		<-c.Ready()
	}
	for _, ns := range strategy.SystemNamespaces {
		if _, err := st.Create(ctx, kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: ns}})); err != nil && status.Code(err) != codes.AlreadyExists {
			t.Fatal(err)
		}
	}
	for _, o := range authz.BootstrapPolicy() {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatalf("bootstrap %s: %v", o.Meta().GetName(), err)
		}
	}
	rbac, node := authz.NewRBAC(), authz.NewNode()
	sinks := map[string]authz.Sink{}
	for _, k := range authz.RBACKinds {
		sinks[k] = rbac
	}
	for _, k := range authz.NodeKinds {
		sinks[k] = node
	}
	feed, err := authz.NewFeed(ctx, sources, sinks, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	chain := authz.Union{node, rbac}
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	audit, err := authz.OpenAuditLog(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	shutdown, stopShutdown := context.WithCancel(context.Background())
	dec := authz.NewDecorator(server.New(st, caches, time.Second, shutdown, hclog.NewNullLogger()),
		authz.DecoratorConfig{Authorizer: chain, Escalation: &authz.Escalation{RBAC: rbac, Authz: chain}, Audit: audit})
	gs := grpc.NewServer(server.CodecOption(),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(testIdentity(ctx), req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, identityStream{ss, testIdentity(ss.Context())})
		}))
	kplanev1.RegisterResourcesServer(gs, dec)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		_ = gs.Serve(lis) // returns at Stop
		close(served)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		stopShutdown()
		gs.Stop()
		<-served
		cancel()
		feed.Wait()
		for i := 0; i < running; i++ {
			<-done
		}
		_ = audit.Close()
		_ = be.Close()
	})
	return &cluster{t: t, store: st, conn: conn, audit: auditPath, client: kplanev1.NewResourcesClient(conn)}
}

// as returns a context that makes the test interceptor see user u.
func as(name string, groups ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-test-user", name, "x-test-groups", strings.Join(groups, ","))
}

var admin = as("kplane-admin", user.SystemPrivilegedGroup)

func wantDenied(t *testing.T, err error, words ...string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("want PermissionDenied, got %v", err)
	}
	for _, w := range words {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("denial %q does not name %q", status.Convert(err).Message(), w)
		}
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a deadline-bounded wait
	}
}

func TestDecoratorOverGRPC(t *testing.T) {
	c := startCluster(t)
	alice := as("alice", user.AllAuthenticated)
	listPods := func() error {
		_, err := c.client.List(alice, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
		return err
	}
	wantDenied(t, listPods(), `User "alice"`, "list", `"pods"`, "kind Pod", `namespace "default"`)

	// Anonymous (no identity at all) is denied too.
	_, err := c.client.Get(context.Background(), &kplanev1.GetRequest{Kind: "Node", Name: "x"})
	wantDenied(t, err, user.Anonymous)

	can := func(ctx context.Context, verb, res, ns string) bool {
		r, err := c.client.CheckAccess(ctx, &kplanev1.CheckAccessRequest{Verb: verb, Resource: res, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetAllowed()
	}
	if can(alice, "list", "pods", "default") {
		t.Fatal("CheckAccess: alice may list pods before any grant")
	}

	// Grant: a RoleBinding of a ClusterRole, confined to default.
	if _, err := c.client.Create(admin, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ClusterRole{
		Metadata: &kplanev1.ObjectMeta{Name: "pod-reader"},
		Rules:    []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	})}); err != nil {
		t.Fatal(err)
	}
	binding := kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "alice-reads"},
		RoleRef: &kplanev1.RoleRef{Kind: "ClusterRole", Name: "pod-reader"}, Subjects: []*kplanev1.Subject{{Kind: "User", Name: "alice"}}})
	if _, err := c.client.Create(admin, &kplanev1.CreateRequest{Object: binding}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "alice allowed to list pods", func() bool { return listPods() == nil })
	if !can(alice, "list", "Pod", "default") || !can(alice, "get", "po", "default") {
		t.Error("CheckAccess: alice may not list pods after the grant")
	}
	// Confined to default: not another namespace, not every namespace.
	_, err = c.client.List(alice, &kplanev1.ListRequest{Kind: "Pod", Namespace: "kplane-system"})
	wantDenied(t, err, "kplane-system")
	_, err = c.client.List(alice, &kplanev1.ListRequest{Kind: "Pod"})
	wantDenied(t, err, "cluster scope")
	// Watch is authorized as watch.
	ws, err := c.client.Watch(alice, &kplanev1.WatchRequest{Kind: "Pod"})
	if err == nil {
		_, err = ws.Recv()
	}
	wantDenied(t, err, "watch")
	// Read-only: no delete.
	_, err = c.client.Delete(alice, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "x"})
	wantDenied(t, err, "delete")

	// Revoke: deleting the binding takes the permission away.
	if _, err := c.client.Delete(admin, &kplanev1.DeleteRequest{Kind: "RoleBinding", Namespace: "default", Name: "alice-reads"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "alice denied again", func() bool { return status.Code(listPods()) == codes.PermissionDenied })

	// A controller's identity cannot write outside its role.
	if _, err := c.store.Create(context.Background(), kplanev1.MustWrap(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "node-1"}})); err != nil {
		t.Fatal(err)
	}
	replicactl := as(authz.ControllerUser("replicactl"), user.AllAuthenticated)
	_, err = c.client.Delete(replicactl, &kplanev1.DeleteRequest{Kind: "Node", Name: "node-1"})
	wantDenied(t, err, "system:kplane:replicactl", "delete", "nodes", "node-1")
	if _, err := c.store.Get(context.Background(), "Node", "", "node-1"); err != nil {
		t.Fatalf("node gone after a denied delete: %v", err)
	}
	if _, err := c.client.List(replicactl, &kplanev1.ListRequest{Kind: "ReplicaSet"}); err != nil {
		t.Errorf("replicactl may not list ReplicaSets: %v", err)
	}
}

func TestEscalationOverGRPC(t *testing.T) {
	c := startCluster(t)
	// ops may write RBAC objects and read pods, nothing more.
	for _, o := range []*kplanev1.Object{
		kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "rbac-writer"}, Rules: []*kplanev1.PolicyRule{
			{ApiGroups: []string{authz.RBACGroup}, Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Verbs: []string{"get", "create", "update", "delete"}},
			{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		}}),
		kplanev1.MustWrap(&kplanev1.ClusterRoleBinding{Metadata: &kplanev1.ObjectMeta{Name: "ops"},
			RoleRef: &kplanev1.RoleRef{Kind: "ClusterRole", Name: "rbac-writer"}, Subjects: []*kplanev1.Subject{{Kind: "User", Name: "ops"}}}),
	} {
		if _, err := c.client.Create(admin, &kplanev1.CreateRequest{Object: o}); err != nil {
			t.Fatal(err)
		}
	}
	ops := as("ops")
	eventually(t, "ops's grant", func() bool {
		_, err := c.client.List(ops, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"})
		return err == nil
	})
	_, err := c.client.Create(ops, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "deleter"},
		Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods", "secrets"}, Verbs: []string{"get", "delete"}}}})})
	wantDenied(t, err, "ops", "delete pods", "get secrets", "escalate")
	if _, err := c.store.Get(context.Background(), "ClusterRole", "", "deleter"); status.Code(err) != codes.NotFound {
		t.Fatalf("escalating role written: %v", err)
	}
	// Within its own permissions: allowed.
	if _, err := c.client.Create(ops, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "reader"},
		Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}})}); err != nil {
		t.Fatalf("non-escalating role refused: %v", err)
	}
	// Binding cluster-admin to itself: refused, nothing written.
	_, err = c.client.Create(ops, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ClusterRoleBinding{Metadata: &kplanev1.ObjectMeta{Name: "ops-admin"},
		RoleRef: &kplanev1.RoleRef{Kind: "ClusterRole", Name: authz.ClusterAdmin}, Subjects: []*kplanev1.Subject{{Kind: "User", Name: "ops"}}})})
	wantDenied(t, err, "bind", "cluster-admin")
	if _, err := c.store.Get(context.Background(), "ClusterRoleBinding", "", "ops-admin"); status.Code(err) != codes.NotFound {
		t.Fatalf("escalating binding written: %v", err)
	}
	// Widening an existing role through an update is refused as well.
	cur, err := c.client.Get(ops, &kplanev1.GetRequest{Kind: "ClusterRole", Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	obj := cur.GetObject()
	obj.GetClusterRole().Rules[0].Verbs = []string{"get", "delete"}
	_, err = c.client.Update(ops, &kplanev1.UpdateRequest{Object: obj})
	wantDenied(t, err, "delete pods")
}

func TestNodeAuthorizerOverGRPC(t *testing.T) {
	c := startCluster(t)
	bg := context.Background()
	mk := func(o *kplanev1.Object) {
		if _, err := c.store.Create(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	mk(kplanev1.MustWrap(&kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "s1"}}))
	mk(kplanev1.MustWrap(&kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "s2"}}))
	for i, n := range []string{"node-1", "node-2"} {
		mk(kplanev1.MustWrap(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: n}}))
		secret := []string{"s1", "s2"}[i]
		mk(kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "p-" + n},
			Spec: &kplanev1.PodSpec{NodeName: n, Containers: []*kplanev1.Container{{Name: "c", Image: "i"}},
				Volumes: []*kplanev1.Volume{{Name: "v", Secret: &kplanev1.SecretVolumeSource{SecretName: secret}}}}}))
	}
	node1 := as(user.NodeUserPrefix+"node-1", user.NodesGroup, user.AllAuthenticated)
	getSecret := func(name string) error {
		_, err := c.client.Get(node1, &kplanev1.GetRequest{Kind: "Secret", Namespace: "default", Name: name})
		return err
	}
	eventually(t, "node-1's pod in the graph", func() bool { return getSecret("s1") == nil })
	wantDenied(t, getSecret("s2"), "node-1", "secrets", "s2")

	n2, err := c.store.Get(bg, "Node", "", "node-2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.client.Update(node1, &kplanev1.UpdateRequest{Object: n2})
	wantDenied(t, err, "nodes", "node-2")
	_, err = c.client.UpdateStatus(node1, &kplanev1.UpdateStatusRequest{Object: n2})
	wantDenied(t, err, "nodes/status")
	n1, err := c.store.Get(bg, "Node", "", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.UpdateStatus(node1, &kplanev1.UpdateStatusRequest{Object: n1}); err != nil {
		t.Fatalf("node-1 may not write its own status: %v", err)
	}
	other, err := c.store.Get(bg, "Pod", "default", "p-node-2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.client.UpdateStatus(node1, &kplanev1.UpdateStatusRequest{Object: other})
	wantDenied(t, err, "pods/status", "p-node-2")
	own, err := c.store.Get(bg, "Pod", "default", "p-node-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.UpdateStatus(node1, &kplanev1.UpdateStatusRequest{Object: own}); err != nil {
		t.Fatalf("node-1 may not write its pod's status: %v", err)
	}

	// Every write and every denial is in the audit log.
	entries := readAudit(t, c.audit)
	var sawDeny, sawWrite bool
	for _, e := range entries {
		if e.Decision == "deny" && e.User == "system:node:node-1" && e.Resource == "secrets" && e.Name == "s2" && e.Code == "PermissionDenied" {
			sawDeny = true
		}
		if e.Decision == "allow" && e.Verb == "update" && e.Subresource == "status" && e.Name == "p-node-1" && e.Code == "OK" &&
			len(e.Groups) > 0 && e.Groups[0] == user.NodesGroup {
			sawWrite = true
		}
		if e.Decision == "allow" && (e.Verb == "get" || e.Verb == "list") {
			t.Errorf("read audited: %+v", e)
		}
	}
	if !sawDeny || !sawWrite {
		t.Errorf("audit log lacks the denial (%v) or the write (%v): %+v", sawDeny, sawWrite, entries)
	}
}

func readAudit(t *testing.T, path string) []authz.AuditEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []authz.AuditEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e authz.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
