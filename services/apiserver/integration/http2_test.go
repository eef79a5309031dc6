package integration_test

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"google.golang.org/grpc/codes"

	"github.com/kplane/kplane/pkg/pki"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// protoRecorder notes the protocol of every response client-go gets.
type protoRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	protos map[string]bool
}

func (p *protoRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(req)
	if err == nil {
		p.mu.Lock()
		p.protos[resp.Proto] = true
		p.mu.Unlock()
	}
	return resp, err
}

// TestHTTP2UnderTLS: under TLS, client-go (offering h2 and http/1.1) gets
// the REST API over HTTP/2, watches included; gRPC clients work whether
// they offer only h2 (served by the native gRPC server) or http/1.1 too
// (their requests then reach the gRPC server through the HTTP/2 server),
// with the same authentication.
func TestHTTP2UnderTLS(t *testing.T) {
	f := startAuth(t, false)
	ctx := testCtx(t)
	rec := &protoRecorder{protos: map[string]bool{}}
	// The PEM data, not the files: files start client-go's certificate
	// reloader, a goroutine that outlives the test.
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host: "https://" + f.srv.Addr(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData: read(pki.CACert), CertData: read(pki.AdminCert), KeyData: read(pki.AdminKey),
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec },
	})
	if err != nil {
		t.Fatal(err)
	}
	rss := cs.AppsV1().ReplicaSets("default")
	w, err := rss.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	labels := map[string]string{"app": "h2"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "h2", Labels: labels},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
	if _, err := rss.Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != kwatch.Added || ev.Object.(*appsv1.ReplicaSet).Name != "h2" {
			t.Fatalf("watch event: %v %+v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event over HTTP/2")
	}
	if _, err := rss.Get(ctx, "h2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	if len(rec.protos) != 1 || !rec.protos["HTTP/2.0"] {
		t.Errorf("client-go's responses came over %v, want HTTP/2.0 only", rec.protos)
	}
	rec.mu.Unlock()

	// gRPC: offering only h2 (grpc-go's default) and offering http/1.1
	// too; with the admin certificate, a list and a watch work; without
	// credentials, both paths refuse alike.
	for _, offer := range [][]string{nil, {"http/1.1"}} {
		cfg := tlsConfig(t, f.dir, f.dir, "admin")
		cfg.NextProtos = offer // credentials.NewTLS adds h2
		c := kplanev1.NewResourcesClient(dialTLS(t, f.srv.Addr(), cfg))
		l, err := c.List(ctx, &kplanev1.ListRequest{Kind: "ReplicaSet", Namespace: "default"})
		if err != nil || len(l.GetItems()) != 1 {
			t.Fatalf("gRPC offering %v: list: %v %v", offer, err, l)
		}
		ws, err := c.Watch(ctx, &kplanev1.WatchRequest{Kind: "ReplicaSet", Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := ws.Recv()
		if err != nil || ev.GetType() != kplanev1.EventType_EVENT_TYPE_ADDED || ev.GetObject().GetReplicaSet().GetMetadata().GetName() != "h2" {
			t.Fatalf("gRPC offering %v: watch: %v %v", offer, err, ev)
		}
		anon := tlsConfig(t, f.dir, "", "")
		anon.NextProtos = offer
		_, err = kplanev1.NewResourcesClient(dialTLS(t, f.srv.Addr(), anon)).List(ctx, &kplanev1.ListRequest{Kind: "ReplicaSet"})
		requireCode(t, err, codes.Unauthenticated)
	}
}
