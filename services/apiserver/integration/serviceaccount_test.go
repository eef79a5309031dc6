package integration_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	sa "github.com/kplane/kplane/pkg/serviceaccount"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func newECKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func createSA(ctx context.Context, t *testing.T, c kplanev1.ResourcesClient, ns, name string) *kplanev1.Object {
	t.Helper()
	r, err := c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name}})})
	if err != nil {
		t.Fatalf("create service account %s/%s: %v", ns, name, err)
	}
	return r.GetObject()
}

func saPod(name, account string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
		Spec:     &kplanev1.PodSpec{ServiceAccountName: account, Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	})
}

func del(ctx context.Context, t *testing.T, c kplanev1.ResourcesClient, kind, ns, name string) {
	t.Helper()
	zero := int64(0)
	if _, err := c.Delete(ctx, &kplanev1.DeleteRequest{Kind: kind, Namespace: ns, Name: name, GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("delete %s %s/%s: %v", kind, ns, name, err)
	}
}

// TestServiceAccountTokens drives the authenticator of a real apiserver:
// tokens it issues work, each kind of bad or revoked token is refused,
// and revocation needs no new signature check (the claims stay cached;
// liveness is read from the watch caches on every request).
func TestServiceAccountTokens(t *testing.T) {
	signing, other := newECKey(t), newECKey(t)
	_, rotated, _ := ed25519.GenerateKey(rand.Reader)
	srv, c := start(t, testserver.WithServiceAccountTokensOpen(signing, rotated.Public()))
	ctx := testCtx(t)
	auth := srv.API().ServiceAccountAuthenticator()
	if auth == nil {
		t.Fatal("no service account authenticator although keys are set")
	}

	acct := createSA(ctx, t, c, "default", "robot")

	// Admission: a pod naming a missing account is refused, nothing written.
	_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: saPod("ghost-user", "ghost")})
	requireCode(t, err, codes.InvalidArgument, "spec.serviceAccountName", "ghost")
	if _, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "ghost-user"}); err == nil {
		t.Fatal("refused pod was written")
	}
	// Unset serviceAccountName means "default", which does not exist yet
	// (tokenctl creates it): refused too.
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: saPod("no-account", "")})
	requireCode(t, err, codes.InvalidArgument, `"default"`)

	pr, err := c.Create(ctx, &kplanev1.CreateRequest{Object: saPod("worker", "robot")})
	if err != nil {
		t.Fatal(err)
	}
	pod := pr.GetObject()

	authOK := func(tok string) *user.Info {
		t.Helper()
		u, ok, err := auth.AuthenticateToken(ctx, tok)
		if err != nil || !ok {
			t.Fatalf("authenticate: ok %v, err %v", ok, err)
		}
		return u
	}
	refused := func(tok, want string) {
		t.Helper()
		u, ok, err := auth.AuthenticateToken(ctx, tok)
		if err == nil || ok || u != nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("authenticate: user %v ok %v err %v, want an error containing %q", u, ok, err, want)
		}
	}
	eventuallyRefused := func(tok, want string) {
		t.Helper()
		waitFor(t, 10*time.Second, "token refused: "+want, func() bool {
			_, _, err := auth.AuthenticateToken(ctx, tok)
			return err != nil && strings.Contains(err.Error(), want)
		})
	}

	// A bound token of a live pod works.
	tr, err := c.CreateToken(ctx, &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot",
		BoundObject: &kplanev1.BoundObjectReference{Kind: "Pod", Name: "worker", Uid: pod.Meta().GetUid()}})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tr.GetExpirationTimestamp().AsTime()); d <= 50*time.Minute || d > time.Hour {
		t.Fatalf("default lifetime %s, want the 1h maximum", d)
	}
	before := auth.Verifications()
	u := authOK(tr.GetToken())
	if u.Name != "system:serviceaccount:default:robot" || u.UID != acct.Meta().GetUid() ||
		!u.InGroup("system:serviceaccounts") || !u.InGroup("system:serviceaccounts:default") || !u.InGroup(user.AllAuthenticated) ||
		u.Extra[sa.PodNameExtra][0] != "worker" || u.Extra[sa.PodUIDExtra][0] != pod.Meta().GetUid() {
		t.Fatalf("user %+v", u)
	}
	authOK(tr.GetToken())
	if got := auth.Verifications() - before; got != 1 {
		t.Fatalf("two requests with one token verified its signature %d times, want 1", got)
	}
	// Deleting the pod revokes its token, without a new verification.
	del(ctx, t, c, "Pod", "default", "worker")
	eventuallyRefused(tr.GetToken(), "pod default/worker the token is bound to no longer exists")
	if got := auth.Verifications() - before; got != 1 {
		t.Fatalf("revocation re-verified the signature (%d verifications)", got)
	}

	signer, err := sa.NewSigner("", signing)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(s *sa.Signer, c sa.Claims) string {
		t.Helper()
		tok, err := s.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	base := sa.Claims{Namespace: "default", ServiceAccountName: "robot", ServiceAccountUID: acct.Meta().GetUid(), IssuedAt: now, Expiry: now.Add(time.Hour)}

	// A legacy token lives as long as its Secret (and the Secret holds it).
	legacy := base
	legacy.Expiry = time.Time{}
	legacy.SecretName = "robot-token"
	legacyTok := sign(signer, legacy)
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "robot-token", Annotations: map[string]string{sa.NameAnnotation: "robot"}},
		Type:     sa.SecretType, Data: map[string][]byte{sa.TokenKey: []byte(legacyTok)}})})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "legacy token accepted", func() bool {
		_, ok, _ := auth.AuthenticateToken(ctx, legacyTok)
		return ok
	})
	// A token signed with the second (Ed25519) verification key works too.
	edSigner, err := sa.NewSigner("", rotated)
	if err != nil {
		t.Fatal(err)
	}
	authOK(sign(edSigner, base))

	// Refusals.
	good := sign(signer, base)
	parts := strings.Split(good, ".")
	sig := []byte(parts[2])
	// Another base64url character (a flipped bit may leave the alphabet,
	// which is a malformed token rather than a bad signature).
	if sig[5] == 'A' {
		sig[5] = 'B'
	} else {
		sig[5] = 'A'
	}
	refused(parts[0]+"."+parts[1]+"."+string(sig), "signature")
	otherSigner, _ := sa.NewSigner("", other)
	refused(sign(otherSigner, base), "unknown key")
	expired := base
	expired.IssuedAt, expired.Expiry = now.Add(-2*time.Hour), now.Add(-time.Hour)
	refused(sign(signer, expired), "expired")
	wrongIss, _ := sa.NewSigner("elsewhere", signing)
	refused(sign(wrongIss, base), `issuer "elsewhere"`)
	if u, ok, err := auth.AuthenticateToken(ctx, "not-a-jwt"); ok || err != nil || u != nil {
		t.Fatalf("a non-JWT token: ok %v err %v; want it left to other authenticators", ok, err)
	}

	// The Secret's deletion revokes the legacy token.
	authOK(good)
	del(ctx, t, c, "Secret", "default", "robot-token")
	eventuallyRefused(legacyTok, "secret default/robot-token holding the token no longer exists")

	// The account's deletion revokes every token; recreating it (new uid)
	// does not bring them back.
	del(ctx, t, c, "ServiceAccount", "default", "robot")
	eventuallyRefused(good, "service account default/robot no longer exists")
	createSA(ctx, t, c, "default", "robot")
	eventuallyRefused(good, "was recreated")
}

// TestCreateTokenRefusals checks every TokenRequest error, each with its
// code, and that a request longer than the maximum is capped.
func TestCreateTokenRefusals(t *testing.T) {
	_, c := start(t, testserver.WithServiceAccountTokensOpen(newECKey(t)))
	ctx := testCtx(t)
	createSA(ctx, t, c, "default", "robot")
	createSA(ctx, t, c, "default", "other")
	if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: saPod("p", "other")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  *kplanev1.CreateTokenRequest
		code codes.Code
		want string
	}{
		{"no namespace", &kplanev1.CreateTokenRequest{ServiceAccountName: "robot"}, codes.InvalidArgument, "namespace: Required"},
		{"no name", &kplanev1.CreateTokenRequest{Namespace: "default"}, codes.InvalidArgument, "serviceAccountName: Required"},
		{"missing account", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "nobody"}, codes.NotFound, `"nobody" not found`},
		{"too short", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", ExpirationSeconds: 60}, codes.InvalidArgument, "spec.expirationSeconds"},
		{"negative", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", ExpirationSeconds: -1}, codes.InvalidArgument, "must not be negative"},
		{"missing pod", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", BoundObject: &kplanev1.BoundObjectReference{Kind: "Pod", Name: "nope"}}, codes.NotFound, `pods "nope" not found`},
		{"pod of another account", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", BoundObject: &kplanev1.BoundObjectReference{Kind: "Pod", Name: "p"}}, codes.InvalidArgument, `uses service account "other"`},
		{"pod uid mismatch", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "other", BoundObject: &kplanev1.BoundObjectReference{Kind: "Pod", Name: "p", Uid: "x"}}, codes.FailedPrecondition, "spec.boundObjectRef.uid"},
		{"bad kind", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", BoundObject: &kplanev1.BoundObjectReference{Kind: "Node", Name: "n"}}, codes.InvalidArgument, "spec.boundObjectRef.kind"},
		{"bound without name", &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", BoundObject: &kplanev1.BoundObjectReference{Kind: "Pod"}}, codes.InvalidArgument, "spec.boundObjectRef.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateToken(ctx, tc.req)
			requireCode(t, err, tc.code, tc.want)
		})
	}
	r, err := c.CreateToken(ctx, &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "robot", ExpirationSeconds: 10 * 3600})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(r.GetExpirationTimestamp().AsTime()); d > time.Hour {
		t.Fatalf("a 10h request got %s, want it capped at 1h", d)
	}
}

// TestCreateTokenWithoutSigningKey: TokenRequest is Unimplemented and
// pods are admitted without an account check when no key is configured.
func TestCreateTokenWithoutSigningKey(t *testing.T) {
	srv, c := start(t)
	ctx := testCtx(t)
	if srv.API().ServiceAccountAuthenticator() != nil {
		t.Fatal("authenticator built without keys")
	}
	_, err := c.CreateToken(ctx, &kplanev1.CreateTokenRequest{Namespace: "default", ServiceAccountName: "default"})
	requireCode(t, err, codes.Unimplemented, "--service-account-signing-key-file")
	if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: saPod("free", "ghost")}); err != nil {
		t.Fatalf("pod refused with authentication off: %v", err)
	}
}

// TestRESTTokenRequest is what `kubectl create token robot` sends.
func TestRESTTokenRequest(t *testing.T) {
	srv, c := start(t, testserver.WithServiceAccountTokensOpen(newECKey(t)))
	ctx := testCtx(t)
	createSA(ctx, t, c, "default", "robot")
	post := func(name, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+srv.Addr()+"/api/v1/namespaces/default/serviceaccounts/"+name+"/token", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	code, out := post("robot", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":1200}}`)
	if code != http.StatusCreated {
		t.Fatalf("status %d: %v", code, out)
	}
	st, _ := out["status"].(map[string]any)
	tok, _ := st["token"].(string)
	if _, ok, err := srv.API().ServiceAccountAuthenticator().AuthenticateToken(ctx, tok); !ok || err != nil {
		t.Fatalf("REST-issued token: ok %v err %v (%v)", ok, err, out)
	}
	if code, out := post("nobody", `{"spec":{}}`); code != http.StatusNotFound {
		t.Fatalf("missing account: status %d: %v", code, out)
	}
	if code, out := post("robot", `{"spec":{"expirationSeconds":5}}`); code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
		t.Fatalf("short expiration: status %d: %v", code, out)
	}
	if code, out := post("robot", `{"kind":"Eviction"}`); code != http.StatusBadRequest {
		t.Fatalf("wrong kind: status %d: %v", code, out)
	}
}
