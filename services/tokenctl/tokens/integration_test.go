package tokens

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/controllertest"
	sa "github.com/kplane/kplane/pkg/serviceaccount"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 30 * time.Second

// keyFiles writes a signing key and a self-signed CA into a directory.
func keyFiles(t *testing.T) (key *ecdsa.PrivateKey, keyPath, caPath string, caPEM []byte) {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sa.EncodePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPath = filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	caPath = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return key, keyPath, caPath, caPEM
}

func TestTokenController(t *testing.T) {
	key, keyPath, caPath, caPEM := keyFiles(t)
	srv := testserver.Start(t, testserver.WithServiceAccountTokensOpen(nil, key.Public()))
	controllertest.Run(t, srv.Addr(), NewService(), "--service-account-private-key-file", keyPath, "--root-ca-file", caPath)
	api := srv.Client()
	auth := srv.API().ServiceAccountAuthenticator()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	get := func(kind, ns, name string) (*kplanev1.Object, bool) {
		r, err := api.Get(ctx, &kplanev1.GetRequest{Kind: kind, Namespace: ns, Name: name})
		if err != nil {
			return nil, false
		}
		return r.GetObject(), true
	}
	create := func(m proto.Message) *kplanev1.Object {
		t.Helper()
		r, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(m)})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetObject()
	}
	del := func(kind, ns, name string) {
		t.Helper()
		if _, err := api.Delete(ctx, &kplanev1.DeleteRequest{Kind: kind, Namespace: ns, Name: name}); err != nil {
			t.Fatal(err)
		}
	}

	// Every namespace gets a default account; a deleted one comes back.
	create(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "team"}})
	for _, ns := range []string{"default", "team"} {
		testutil.Eventually(t, wait, "default service account in "+ns, func() bool { _, ok := get("ServiceAccount", ns, "default"); return ok })
	}
	first, _ := get("ServiceAccount", "team", "default")
	del("ServiceAccount", "team", "default")
	testutil.Eventually(t, wait, "default service account recreated", func() bool {
		o, ok := get("ServiceAccount", "team", "default")
		return ok && o.Meta().GetUid() != first.Meta().GetUid()
	})

	// A token Secret is filled, and its token authenticates.
	acct := create(&kplanev1.ServiceAccount{Metadata: &kplanev1.ObjectMeta{Namespace: "team", Name: "robot"}})
	tokenSecret := func(name, account string, ann map[string]string) *kplanev1.Secret {
		a := map[string]string{sa.NameAnnotation: account}
		for k, v := range ann {
			a[k] = v
		}
		return &kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Namespace: "team", Name: name, Annotations: a}, Type: sa.SecretType}
	}
	create(tokenSecret("robot-token", "robot", nil))
	var sec *kplanev1.Secret
	testutil.Eventually(t, wait, "token secret filled", func() bool {
		o, ok := get("Secret", "team", "robot-token")
		sec = o.GetSecret()
		return ok && len(sec.GetData()[sa.TokenKey]) > 0
	})
	if string(sec.GetData()[sa.NamespaceKey]) != "team" || string(sec.GetData()[sa.CAKey]) != string(caPEM) ||
		sec.GetMetadata().GetAnnotations()[sa.UIDAnnotation] != acct.Meta().GetUid() {
		t.Fatalf("secret data/annotations: ns %q ca %d bytes, annotations %v", sec.GetData()[sa.NamespaceKey], len(sec.GetData()[sa.CAKey]), sec.GetMetadata().GetAnnotations())
	}
	tok := string(sec.GetData()[sa.TokenKey])
	u, ok, err := auth.AuthenticateToken(ctx, tok)
	if !ok || err != nil || u.Name != "system:serviceaccount:team:robot" || u.UID != acct.Meta().GetUid() {
		t.Fatalf("secret's token: user %+v ok %v err %v", u, ok, err)
	}
	// An unrelated Secret is left alone.
	create(&kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Namespace: "team", Name: "plain"}, Data: map[string][]byte{"x": []byte("y")}})

	// Secrets of a missing account, or of an older account of that name, go.
	create(tokenSecret("orphan", "nobody", nil))
	create(tokenSecret("stale", "robot", map[string]string{sa.UIDAnnotation: "not-the-uid"}))
	for _, name := range []string{"orphan", "stale"} {
		testutil.Eventually(t, wait, "secret "+name+" deleted", func() bool { _, ok := get("Secret", "team", name); return !ok })
	}
	// Deleting the account deletes its Secret and revokes the token.
	del("ServiceAccount", "team", "robot")
	testutil.Eventually(t, wait, "robot-token deleted", func() bool { _, ok := get("Secret", "team", "robot-token"); return !ok })
	if _, ok, err := auth.AuthenticateToken(ctx, tok); ok || err == nil {
		t.Fatal("token of a deleted account accepted")
	}
	if _, ok := get("Secret", "team", "plain"); !ok {
		t.Fatal("an ordinary Secret was deleted")
	}
}

func TestFlagErrors(t *testing.T) {
	_, keyPath, caPath, _ := keyFiles(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "bad")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *controller
		want string
	}{
		{"no key", &controller{}, "--service-account-private-key-file is required"},
		{"missing key", &controller{keyFile: filepath.Join(dir, "nope")}, "--service-account-private-key-file"},
		{"bad key", &controller{keyFile: notPEM}, "no PEM block"},
		{"missing CA", &controller{keyFile: keyPath, caFile: filepath.Join(dir, "nope")}, "--root-ca-file"},
		{"bad CA", &controller{keyFile: keyPath, caFile: notPEM}, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.loadKeys()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	ok := controller{keyFile: keyPath, caFile: caPath}
	if err := ok.loadKeys(); err != nil {
		t.Fatal(err)
	}
}
