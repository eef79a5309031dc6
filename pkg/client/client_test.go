package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testserver.PeerLeakOptions()...) }

// fakeServer is a small in-memory Resources server: enough to prove the
// client's transport, credentials and typed helpers, independent of the
// real apiserver.
type fakeServer struct {
	kplanev1.UnimplementedResourcesServer

	mu         sync.Mutex
	wantToken  string   // "" = no auth check
	seenTokens []string // authorization values received
	objs       map[string]*kplanev1.Object
	rv         int64
	lists      int // List calls, to check pagination

	watchRelease chan struct{} // closed by the test to let Watch send its ADDED event
}

func newFakeServer() *fakeServer {
	return &fakeServer{objs: map[string]*kplanev1.Object{}, watchRelease: make(chan struct{})}
}

func (s *fakeServer) setToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wantToken = tok
}

func (s *fakeServer) tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seenTokens...)
}

func (s *fakeServer) auth(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := strings.Join(md.Get("authorization"), ",")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seenTokens = append(s.seenTokens, got)
	if s.wantToken != "" && got != "Bearer "+s.wantToken {
		return status.Errorf(codes.Unauthenticated, "bad token %q", got)
	}
	return nil
}

func storeKey(kind, ns, name string) string { return kind + "/" + kplanev1.MetaKey(ns, name) }

func (s *fakeServer) Get(ctx context.Context, req *kplanev1.GetRequest) (*kplanev1.GetResponse, error) {
	if req.GetName() == "block" {
		<-ctx.Done() // lets the test observe the client's default deadline
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[storeKey(req.GetKind(), req.GetNamespace(), req.GetName())]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s %s not found", req.GetKind(), req.GetName())
	}
	return &kplanev1.GetResponse{Object: proto.Clone(o).(*kplanev1.Object)}, nil
}

func (s *fakeServer) Create(_ context.Context, req *kplanev1.CreateRequest) (*kplanev1.CreateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := proto.Clone(req.GetObject()).(*kplanev1.Object)
	m := o.Meta()
	k := storeKey(o.KindName(), m.GetNamespace(), m.GetName())
	if _, ok := s.objs[k]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "%s exists", k)
	}
	s.rv++
	m.ResourceVersion = strconv.FormatInt(s.rv, 10)
	m.Uid = "uid-" + m.ResourceVersion
	s.objs[k] = o
	return &kplanev1.CreateResponse{Object: proto.Clone(o).(*kplanev1.Object)}, nil
}

func (s *fakeServer) Update(_ context.Context, req *kplanev1.UpdateRequest) (*kplanev1.UpdateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := proto.Clone(req.GetObject()).(*kplanev1.Object)
	m := o.Meta()
	k := storeKey(o.KindName(), m.GetNamespace(), m.GetName())
	cur, ok := s.objs[k]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s not found", k)
	}
	if m.GetResourceVersion() != "" && m.GetResourceVersion() != cur.Meta().GetResourceVersion() {
		return nil, status.Errorf(codes.Aborted, "%s: stale resourceVersion", k)
	}
	s.rv++
	m.ResourceVersion = strconv.FormatInt(s.rv, 10)
	m.Uid = cur.Meta().GetUid()
	s.objs[k] = o
	return &kplanev1.UpdateResponse{Object: proto.Clone(o).(*kplanev1.Object)}, nil
}

func (s *fakeServer) Delete(_ context.Context, req *kplanev1.DeleteRequest) (*kplanev1.DeleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := storeKey(req.GetKind(), req.GetNamespace(), req.GetName())
	cur, ok := s.objs[k]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s not found", k)
	}
	if p := req.GetPreconditions(); p != nil && p.GetUid() != "" && p.GetUid() != cur.Meta().GetUid() {
		return nil, status.Errorf(codes.Aborted, "%s: uid precondition failed", k)
	}
	if req.GetPropagationPolicy() != "Orphan" || req.GetGracePeriodSeconds() != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "test expects Orphan with grace 0, got %q %d", req.GetPropagationPolicy(), req.GetGracePeriodSeconds())
	}
	delete(s.objs, k)
	return &kplanev1.DeleteResponse{Object: cur}, nil
}

// List pages through objects sorted by key; the continue token carries the
// snapshot's revision and the last key, as a real server's would.
func (s *fakeServer) List(_ context.Context, req *kplanev1.ListRequest) (*kplanev1.ListResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	rv, after := strconv.FormatInt(s.rv, 10), ""
	if c := req.GetContinue(); c != "" {
		rv, after, _ = strings.Cut(c, "|")
	}
	var keys []string
	for k, o := range s.objs {
		if o.KindName() == req.GetKind() && (req.GetNamespace() == "" || o.Meta().GetNamespace() == req.GetNamespace()) && k > after {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	resp := &kplanev1.ListResponse{ResourceVersion: rv}
	for i, k := range keys {
		if req.GetLimit() > 0 && int64(i) == req.GetLimit() {
			resp.Continue = rv + "|" + keys[i-1]
			break
		}
		resp.Items = append(resp.Items, proto.Clone(s.objs[k]).(*kplanev1.Object))
	}
	return resp, nil
}

func (s *fakeServer) Watch(req *kplanev1.WatchRequest, stream grpc.ServerStreamingServer[kplanev1.WatchResponse]) error {
	if err := stream.Send(&kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: "7"}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
		return stream.Context().Err()
	case <-s.watchRelease:
	}
	pod := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "w", Namespace: "default", ResourceVersion: "8"}}
	if err := stream.Send(&kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_ADDED, Object: kplanev1.MustWrap(pod), ResourceVersion: "8"}); err != nil {
		return err
	}
	if err := stream.Send(&kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_ERROR, Error: "too old resource version: 3 (5)"}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// startServer serves fs on a loopback port, with TLS when cert is non-nil.
func startServer(t *testing.T, fs *fakeServer, cert *tls.Certificate) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := fs.auth(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := fs.auth(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})))
	}
	gs := grpc.NewServer(opts...)
	kplanev1.RegisterResourcesServer(gs, fs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

// selfSigned makes a CA-flagged self-signed certificate for 127.0.0.1 and
// writes its PEM to a file, returning both.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "kplane-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, path
}

func writeToken(t *testing.T, path, tok string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An explicit mtime makes the change visible even on file systems with
	// coarse timestamps.
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTokenFileOverTLS(t *testing.T) {
	fs := newFakeServer()
	fs.setToken("first-token")
	cert, caFile := selfSigned(t)
	addr := startServer(t, fs, &cert)

	tokenFile := filepath.Join(t.TempDir(), "token")
	base := time.Now().Add(-time.Minute)
	writeToken(t, tokenFile, "first-token", base)

	c := dial(t, client.Options{Address: addr, TLSCA: caFile, TokenFile: tokenFile})
	pods := client.Pods(c)
	ctx := context.Background()
	if _, err := pods.Create(ctx, &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "a", Namespace: "default"}}); err != nil {
		t.Fatalf("create over TLS with token: %v", err)
	}
	got, err := pods.Get(ctx, "default", "a")
	if err != nil {
		t.Fatalf("get over TLS with token: %v", err)
	}
	if got.GetMetadata().GetName() != "a" || got.GetMetadata().GetUid() == "" {
		t.Fatalf("unexpected pod %v", got)
	}

	// Rotate the token: the next call must carry the new one.
	fs.setToken("second-token")
	writeToken(t, tokenFile, "second-token", base.Add(30*time.Second))
	if _, err := pods.Get(ctx, "default", "a"); err != nil {
		t.Fatalf("get after token rotation: %v", err)
	}
	toks := fs.tokens()
	if last := toks[len(toks)-1]; last != "Bearer second-token" {
		t.Fatalf("server saw %q after rotation", last)
	}

	// The raw embedded client works too and shares the credentials.
	if _, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "a"}); err != nil {
		t.Fatalf("raw get: %v", err)
	}
}

func TestWrongTokenIsUnauthenticated(t *testing.T) {
	fs := newFakeServer()
	fs.setToken("right")
	addr := startServer(t, fs, nil)
	c := dial(t, client.Options{Address: addr, Token: "wrong"})
	_, err := client.Pods(c).Get(context.Background(), "default", "x")
	if client.Code(err) != codes.Unauthenticated {
		t.Fatalf("want Unauthenticated, got %v", err)
	}
}

func TestTLSRejectsUnknownCA(t *testing.T) {
	fs := newFakeServer()
	cert, _ := selfSigned(t)
	_, otherCA := selfSigned(t)
	addr := startServer(t, fs, &cert)
	c := dial(t, client.Options{Address: addr, TLSCA: otherCA, Token: "t"})
	_, err := client.Pods(c).Get(context.Background(), "default", "x")
	if !client.IsUnavailable(err) {
		t.Fatalf("want Unavailable for an untrusted server certificate, got %v", err)
	}
	if n := len(fs.tokens()); n != 0 {
		t.Fatalf("server received %d calls over an untrusted connection", n)
	}
}

func TestDialValidation(t *testing.T) {
	ctx := context.Background()
	if _, err := client.Dial(ctx, client.Options{Address: "10.1.2.3:6443", Token: "t"}); err == nil {
		t.Fatal("token over plaintext to a remote host must be refused")
	}
	if _, err := client.Dial(ctx, client.Options{Token: "t", TokenFile: "/x"}); err == nil {
		t.Fatal("token and token file together must be refused")
	}
	if _, err := client.Dial(ctx, client.Options{TokenFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("a missing token file must be reported by Dial")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, client.Options{TokenFile: empty}); err == nil {
		t.Fatal("an empty token file must be reported by Dial")
	}
	if _, err := client.Dial(ctx, client.Options{TLSCA: empty}); err == nil {
		t.Fatal("a CA file without certificates must be reported by Dial")
	}
	_, caFile := selfSigned(t)
	for _, c := range []struct {
		o    client.Options
		want string
	}{
		{client.Options{ClientCertFile: caFile, ClientKeyFile: caFile}, "needs TLS"},
		{client.Options{TLSCA: caFile, ClientCertFile: caFile}, "needs its key"},
		{client.Options{TLSCA: caFile, ClientKeyFile: caFile}, "needs its certificate"},
		{client.Options{TLSCA: caFile, ClientCertFile: caFile, ClientKeyFile: caFile}, "client certificate and key"},
		{client.Options{TLSCA: caFile, ClientCertFile: "/nonexistent.crt", ClientKeyFile: caFile}, "read client certificate"},
		{client.Options{TLSCAData: []byte("junk")}, "inline TLS CA data"},
	} {
		if _, err := client.Dial(ctx, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.o, err, c.want)
		}
	}
	for _, addr := range []string{"127.0.0.1:6443", "localhost:1", "[::1]:6443", "dns:///localhost:6443", "unix:///tmp/k.sock"} {
		c, err := client.Dial(ctx, client.Options{Address: addr, Token: "t"})
		if err != nil {
			t.Fatalf("token to loopback %s refused: %v", addr, err)
		}
		_ = c.Close()
	}
}

func TestAddFlags(t *testing.T) {
	var o client.Options
	fs := flagSet()
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--apiserver", "a:1", "--token-file", "/t", "--tls-ca", "/ca", "--client-cert-file", "/c", "--client-key-file", "/k"}); err != nil {
		t.Fatal(err)
	}
	if o.Address != "a:1" || o.TokenFile != "/t" || o.TLSCA != "/ca" || o.ClientCertFile != "/c" || o.ClientKeyFile != "/k" {
		t.Fatalf("flags not applied: %+v", o)
	}
	var d client.Options
	fs = flagSet()
	d.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if d.Address != client.DefaultAddress {
		t.Fatalf("default address %q", d.Address)
	}
}

func TestCallTimeoutAppliesToUnaryNotWatch(t *testing.T) {
	fs := newFakeServer()
	addr := startServer(t, fs, nil)
	c := dial(t, client.Options{Address: addr, CallTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	w, err := client.Pods(c).Watch(ctx, "default", client.WatchOptions{AllowBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev, err := w.Recv()
	if err != nil || ev.Type != kplanev1.EventType_EVENT_TYPE_BOOKMARK || ev.ResourceVersion != "7" {
		t.Fatalf("first event: %v %v", ev, err)
	}

	// A unary call without a deadline gets CallTimeout...
	_, err = client.Pods(c).Get(ctx, "default", "block")
	if client.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("want DeadlineExceeded from the default call timeout, got %v", err)
	}
	// ...while the watch, opened before and so older than CallTimeout, is
	// still alive and receives the next event.
	close(fs.watchRelease)
	ev, err = w.Recv()
	if err != nil {
		t.Fatalf("watch broken by the call timeout: %v", err)
	}
	if ev.Type != kplanev1.EventType_EVENT_TYPE_ADDED || ev.Object.GetMetadata().GetName() != "w" {
		t.Fatalf("unexpected event %+v", ev)
	}
	// An ERROR event saying "too old" surfaces as OutOfRange.
	if _, err = w.Recv(); !client.IsOutOfRange(err) {
		t.Fatalf("want OutOfRange, got %v", err)
	}

	// A caller's own deadline wins over CallTimeout.
	short, cancelShort := context.WithTimeout(ctx, time.Hour)
	defer cancelShort()
	if _, err := client.Pods(c).Get(short, "default", "absent"); !client.IsNotFound(err) {
		t.Fatalf("want NotFound, got %v", err)
	}
}

func TestTypedCRUDAndPagedList(t *testing.T) {
	fs := newFakeServer()
	addr := startServer(t, fs, nil)
	c := dial(t, client.Options{Address: addr, Block: true})
	ctx := context.Background()
	pods := client.For[*kplanev1.Pod](c)
	if pods.Kind() != "Pod" {
		t.Fatalf("kind %q", pods.Kind())
	}
	for i := 0; i < 7; i++ {
		if _, err := pods.Create(ctx, &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pods.Create(ctx, &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p0", Namespace: "default"}}); !client.IsAlreadyExists(err) {
		t.Fatalf("want AlreadyExists, got %v", err)
	}
	// A node must not show up in a pod list.
	if _, err := client.Nodes(c).Create(ctx, &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}

	items, rv, err := pods.List(ctx, "default", client.ListOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 7 {
		t.Fatalf("paged list returned %d items, want 7", len(items))
	}
	if rv != "8" {
		t.Fatalf("list resourceVersion %q, want the snapshot's 8", rv)
	}
	fs.mu.Lock()
	lists := fs.lists
	fs.mu.Unlock()
	if lists != 3 {
		t.Fatalf("want 3 pages of at most 3, got %d calls", lists)
	}

	p := items[0]
	p.GetMetadata().Labels = map[string]string{"app": "web"}
	up, err := pods.Update(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if up.GetMetadata().GetLabels()["app"] != "web" || up.GetMetadata().GetResourceVersion() == p.GetMetadata().GetResourceVersion() {
		t.Fatalf("update not applied: %v", up)
	}
	if _, err := pods.Update(ctx, p); !client.IsConflict(err) {
		t.Fatalf("stale update: want conflict, got %v", err)
	}

	grace := int64(0)
	del, err := pods.Delete(ctx, "default", "p0", client.DeleteOptions{
		Preconditions:      &kplanev1.Preconditions{Uid: up.GetMetadata().GetUid()},
		PropagationPolicy:  client.PropagationOrphan,
		GracePeriodSeconds: &grace,
	})
	if err != nil {
		t.Fatal(err)
	}
	if del.GetMetadata().GetName() != "p0" {
		t.Fatalf("delete returned %v", del)
	}
	if _, err := pods.Get(ctx, "default", "p0"); !client.IsNotFound(err) {
		t.Fatalf("want NotFound after delete, got %v", err)
	}
}

func TestRetryOnConflict(t *testing.T) {
	ctx := context.Background()
	conflict := status.Error(codes.Aborted, "conflict")
	b := client.Backoff{Steps: 4, Duration: time.Millisecond, Factor: 2, Jitter: 0.1}

	calls := 0
	err := client.RetryOnConflict(ctx, b, func() error {
		calls++
		if calls < 3 {
			return conflict
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("want success on the third call, got %v after %d", err, calls)
	}

	calls = 0
	err = client.RetryOnConflict(ctx, b, func() error { calls++; return conflict })
	if calls != 4 || !client.IsConflict(err) {
		t.Fatalf("want 4 bounded attempts ending in a conflict, got %d, %v", calls, err)
	}

	calls = 0
	other := status.Error(codes.NotFound, "gone")
	err = client.RetryOnConflict(ctx, b, func() error { calls++; return other })
	if calls != 1 || !client.IsNotFound(err) {
		t.Fatalf("a non-conflict error must not be retried: %d calls, %v", calls, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = client.RetryOnConflict(cctx, client.Backoff{Steps: 10, Duration: time.Hour}, func() error {
		calls++
		cancel()
		return conflict
	})
	if calls != 1 || err == nil {
		t.Fatalf("cancelled retry: %d calls, %v", calls, err)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := client.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second}
	for attempt := 0; attempt < 20; attempt++ {
		base := 100 * time.Millisecond << attempt
		if base > time.Second || base <= 0 {
			base = time.Second
		}
		d := b.Delay(attempt)
		if d < base || d > base+base/2 {
			t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, base, base+base/2)
		}
	}
}

func TestErrorHelpers(t *testing.T) {
	wrapped := fmt.Errorf("ctx: %w", status.Error(codes.NotFound, "x"))
	if !client.IsNotFound(wrapped) || client.IsConflict(wrapped) {
		t.Fatal("wrapped NotFound misclassified")
	}
	if client.IsNotFound(nil) || client.IsUnavailable(nil) {
		t.Fatal("nil is no error")
	}
	if !client.IsUnavailable(status.Error(codes.Unavailable, "")) || !client.IsOutOfRange(status.Error(codes.OutOfRange, "")) ||
		!client.IsAlreadyExists(status.Error(codes.AlreadyExists, "")) || !client.IsInvalid(status.Error(codes.InvalidArgument, "")) {
		t.Fatal("status codes misclassified")
	}
}

func flagSet() *flag.FlagSet { return flag.NewFlagSet("test", flag.ContinueOnError) }
