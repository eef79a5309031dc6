package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestClientGoCreateToken is what `kubectl create token robot
// --duration=15m` does: client-go's typed CreateToken on the
// serviceaccounts/token subresource, in JSON and in protobuf.
func TestClientGoCreateToken(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.WithServiceAccountTokensOpen(key))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := clientset(t, srv)
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secs := int64(900)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "robot",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tr.Status.ExpirationTimestamp.Time); d > 15*time.Minute || d < 14*time.Minute {
		t.Fatalf("expires in %s, want 15m", d)
	}
	u, ok, err := srv.API().ServiceAccountAuthenticator().AuthenticateToken(ctx, tr.Status.Token)
	if !ok || err != nil || u.Name != "system:serviceaccount:default:robot" {
		t.Fatalf("client-go's token: user %+v ok %v err %v", u, ok, err)
	}
	// kubectl's clients speak protobuf.
	pcs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + srv.Addr(), ContentConfig: rest.ContentConfig{
		ContentType: "application/vnd.kubernetes.protobuf", AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	ptr, err := pcs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "robot",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("protobuf TokenRequest: %v", err)
	}
	if _, ok, err := srv.API().ServiceAccountAuthenticator().AuthenticateToken(ctx, ptr.Status.Token); !ok || err != nil {
		t.Fatalf("protobuf-requested token: ok %v err %v", ok, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); err == nil {
		t.Fatal("a token for a missing account was issued")
	}
}
