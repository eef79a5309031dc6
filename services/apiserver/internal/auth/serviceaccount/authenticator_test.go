package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	sa "github.com/kplane/kplane/pkg/serviceaccount"
)

// objects is a Lookup over a map, standing in for the watch caches (the
// apiserver's integration tests use the real ones).
type objects struct {
	mu sync.Mutex
	m  map[string]*kplanev1.Object
}

func (o *objects) lookup(kind, ns, name string) (*kplanev1.Object, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	x, ok := o.m[kind+"/"+ns+"/"+name]
	return x, ok
}

func setup(t testing.TB, size int, now func() time.Time) (*Authenticator, *sa.Signer, *objects) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sa.NewSigner("", k)
	if err != nil {
		t.Fatal(err)
	}
	v, err := sa.NewVerifier("", []crypto.PublicKey{k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	objs := &objects{m: map[string]*kplanev1.Object{
		"ServiceAccount/ns/sa": kplanev1.MustWrap(&kplanev1.ServiceAccount{Metadata: &kplanev1.ObjectMeta{Namespace: "ns", Name: "sa", Uid: "u1"}}),
	}}
	a, err := NewAuthenticator(AuthenticatorConfig{Verifier: v, Lookup: objs.lookup, CacheSize: size, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return a, s, objs
}

// An entry expires with its token even though it is cached.
func TestCachedTokenExpires(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	a, s, _ := setup(t, 0, now)
	tok, err := s.Sign(sa.Claims{Namespace: "ns", ServiceAccountName: "sa", ServiceAccountUID: "u1", IssuedAt: clock, Expiry: clock.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.AuthenticateToken(context.Background(), tok); !ok || err != nil {
		t.Fatalf("ok %v err %v", ok, err)
	}
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	if _, ok, err := a.AuthenticateToken(context.Background(), tok); ok || err == nil {
		t.Fatal("an expired cached token was accepted")
	}
	if a.Verifications() != 1 {
		t.Fatalf("verifications %d, want 1 (expiry is checked on the cached entry)", a.Verifications())
	}
}

// The cache never grows past its bound.
func TestCacheBounded(t *testing.T) {
	a, s, _ := setup(t, 8, nil)
	for i := range 50 {
		tok, err := s.Sign(sa.Claims{Namespace: "ns", ServiceAccountName: "sa", ServiceAccountUID: "u1", Audiences: []string{fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := a.AuthenticateToken(context.Background(), tok); !ok || err != nil {
			t.Fatalf("token %d: ok %v err %v", i, ok, err)
		}
		a.mu.Lock()
		n := len(a.cache)
		a.mu.Unlock()
		if n > 8 {
			t.Fatalf("cache holds %d entries, bound 8", n)
		}
	}
}

func TestNewAuthenticatorRequiresParts(t *testing.T) {
	if _, err := NewAuthenticator(AuthenticatorConfig{}); err == nil {
		t.Fatal("no error without verifier and lookup")
	}
	if _, err := NewIssuer(nil, nil, 0, nil); err == nil {
		t.Fatal("no error without signer and lookup")
	}
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s, _ := sa.NewSigner("", k)
	if _, err := NewIssuer(s, (&objects{}).lookup, time.Minute, nil); err == nil {
		t.Fatal("a maximum below 10m was accepted")
	}
}

// BenchmarkAuthenticateToken compares a request whose token is cached
// (a hash, a map read, three liveness lookups) with a full verification.
func BenchmarkAuthenticateToken(b *testing.B) {
	a, s, _ := setup(b, 0, nil)
	tok, err := s.Sign(sa.Claims{Namespace: "ns", ServiceAccountName: "sa", ServiceAccountUID: "u1", Expiry: time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, ok, err := a.AuthenticateToken(ctx, tok); !ok || err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			a.mu.Lock()
			clear(a.cache)
			a.mu.Unlock()
			if _, ok, err := a.AuthenticateToken(ctx, tok); !ok || err != nil {
				b.Fatal(err)
			}
		}
	})
}
