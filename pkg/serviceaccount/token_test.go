package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ecKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func edKey(t testing.TB) crypto.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var now = time.Unix(1_800_000_000, 0)

func claims() Claims {
	return Claims{
		Audiences: []string{"kplane"}, IssuedAt: now, NotBefore: now, Expiry: now.Add(time.Hour),
		Namespace: "ns", ServiceAccountName: "sa", ServiceAccountUID: "u1", PodName: "p", PodUID: "pu",
	}
}

func TestRoundTrip(t *testing.T) {
	for name, key := range map[string]crypto.Signer{"ES256": ecKey(t), "EdDSA": edKey(t)} {
		t.Run(name, func(t *testing.T) {
			s, err := NewSigner("", key)
			if err != nil {
				t.Fatal(err)
			}
			// Another key first: the kid picks the right one.
			v, err := NewVerifier("", []crypto.PublicKey{ecKey(t).Public(), key.Public()})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := s.Sign(claims())
			if err != nil {
				t.Fatal(err)
			}
			c, err := v.Verify(tok, now.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if c.Issuer != DefaultIssuer || c.Subject() != "system:serviceaccount:ns:sa" || c.ServiceAccountUID != "u1" ||
				c.PodName != "p" || c.PodUID != "pu" || !c.Expiry.Equal(now.Add(time.Hour)) || c.Audiences[0] != "kplane" {
				t.Fatalf("claims %+v", c)
			}
		})
	}
}

func TestLegacyTokenHasNoExpiry(t *testing.T) {
	key := ecKey(t)
	s, _ := NewSigner("", key)
	v, _ := NewVerifier("", []crypto.PublicKey{key.Public()})
	tok, err := s.Sign(Claims{Namespace: "ns", ServiceAccountName: "sa", ServiceAccountUID: "u", SecretName: "sec"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(tok, now.Add(100*365*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Expiry.IsZero() || c.SecretName != "sec" {
		t.Fatalf("claims %+v", c)
	}
}

func TestVerifyRefuses(t *testing.T) {
	key := ecKey(t)
	s, _ := NewSigner("", key)
	v, _ := NewVerifier("", []crypto.PublicKey{key.Public()})
	good, _ := s.Sign(claims())
	other, _ := NewSigner("", ecKey(t))
	byOther, _ := other.Sign(claims())
	wrongIss, _ := NewSigner("someone-else", key)
	wrongIssTok, _ := wrongIss.Sign(claims())
	parts := strings.Split(good, ".")
	sig := []byte(parts[2])
	// Another base64url character (a flipped bit may leave the alphabet,
	// which is a malformed token rather than a bad signature).
	if sig[3] == 'A' {
		sig[3] = 'B'
	} else {
		sig[3] = 'A'
	}
	forged := parts[0] + "." + parts[1] + "." + string(sig)
	// A payload swapped under the original signature.
	c2 := claims()
	c2.ServiceAccountName = "admin"
	t2, _ := s.Sign(c2)
	swapped := parts[0] + "." + strings.Split(t2, ".")[1] + "." + parts[2]

	for _, tc := range []struct {
		name, tok string
		at        time.Time
		want      string
	}{
		{"forged signature", forged, now, "signature"},
		{"swapped payload", swapped, now, "signature"},
		{"other key", byOther, now, "unknown key"},
		{"wrong issuer", wrongIssTok, now, "issuer"},
		{"expired", good, now.Add(time.Hour + time.Second), "expired"},
		{"not yet valid", good, now.Add(-time.Minute), "not valid yet"},
		{"garbage", "a.b.c", now, "malformed"},
		{"not a jwt", "abc", now, "not a service account token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(tc.tok, tc.at)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	key := ecKey(t)
	priv, err := EncodePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := EncodePublicKeyPEM(key.Public())
	ed := edKey(t)
	edPub, _ := EncodePublicKeyPEM(ed.Public())
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pk, err := LoadPrivateKeyFile(write("sa.key", priv))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := LoadPublicKeysFiles(write("sa.pub", append(pub, edPub...)), write("priv-as-pub", priv))
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys %d, err %v", len(keys), err)
	}
	if a, _ := KeyID(pk.Public()); a != mustKID(t, keys[0]) || a != mustKID(t, keys[2]) {
		t.Fatal("key ids differ for the same key")
	}

	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	rsaDER, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384Pub, _ := EncodePublicKeyPEM(p384.Public())
	ecDER, _ := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	for _, tc := range []struct {
		name string
		load func() error
		want string
	}{
		{"missing file", func() error { _, err := LoadPrivateKeyFile(filepath.Join(dir, "nope")); return err }, "read service account private key"},
		{"no PEM", func() error { _, err := LoadPrivateKeyFile(write("x", []byte("hello"))); return err }, "no PEM block"},
		{"SEC1 not PKCS#8", func() error {
			_, err := LoadPrivateKeyFile(write("sec1", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})))
			return err
		}, `want "PRIVATE KEY"`},
		{"RSA", func() error {
			_, err := LoadPrivateKeyFile(write("rsa", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: rsaDER})))
			return err
		}, "unsupported key type"},
		{"P-384 public", func() error { _, err := LoadPublicKeysFiles(write("p384", p384Pub)); return err }, "want P-256"},
		{"cert block", func() error {
			_, err := LoadPublicKeysFiles(write("c", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})))
			return err
		}, `want "PUBLIC KEY"`},
		{"no files", func() error { _, err := LoadPublicKeysFiles(); return err }, "no service account public key files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.load()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func mustKID(t *testing.T, k crypto.PublicKey) string {
	t.Helper()
	id, err := KeyID(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// FuzzVerify feeds the parser arbitrary strings: it must never panic and
// must never accept anything the key did not sign.
func FuzzVerify(f *testing.F) {
	key := ecKey(f)
	s, _ := NewSigner("", key)
	v, _ := NewVerifier("", []crypto.PublicKey{key.Public()})
	good, _ := s.Sign(claims())
	f.Add(good)
	f.Add("a.b.c")
	f.Add("")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add(good[:len(good)-3])
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(tok, now)
		if err == nil && tok != good {
			// A different string that verifies must carry the same claims
			// (e.g. base64 padding variants); anything else is a forgery.
			if c.Subject() != "system:serviceaccount:ns:sa" || c.PodUID != "pu" {
				t.Fatalf("accepted forged token %q: %+v", tok, c)
			}
		}
	})
}
