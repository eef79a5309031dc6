// Package serviceaccount authenticates ServiceAccount tokens and issues
// them (TokenRequest). A token's signature is verified once and its claims
// cached; whether the account (and the Secret or Pod the token is tied
// to) still exists is checked on every request against the watch caches,
// so deleting any of them revokes the token at once without a JWT parse
// per request.
package serviceaccount

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	sa "github.com/kplane/kplane/pkg/serviceaccount"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// Lookup reads the current object of kind namespace/name from a cache
// (the apiserver's watch caches): a map read, cheap enough for every
// request. The object is shared and must not be modified.
type Lookup func(kind, namespace, name string) (*kplanev1.Object, bool)

// DefaultCacheSize bounds the verified-token cache.
const DefaultCacheSize = 4096

// Authenticator is an authn.TokenAuthenticator for ServiceAccount tokens.
type Authenticator struct {
	verifier *sa.Verifier
	lookup   Lookup
	now      func() time.Time
	size     int

	mu    sync.Mutex
	cache map[[32]byte]*sa.Claims
	// verifications counts signature checks (cache misses), so tests and
	// benchmarks can tell a cached request from a parsed one.
	verifications atomic.Int64
}

// AuthenticatorConfig configures an Authenticator.
type AuthenticatorConfig struct {
	Verifier *sa.Verifier
	Lookup   Lookup
	// CacheSize bounds the verified-claims cache (0 = DefaultCacheSize).
	CacheSize int
	// Now is the clock (nil = time.Now).
	Now func() time.Time
}

// NewAuthenticator returns an authenticator over cfg.
func NewAuthenticator(cfg AuthenticatorConfig) (*Authenticator, error) {
	if cfg.Verifier == nil || cfg.Lookup == nil {
		return nil, errors.New("service account authenticator: verifier and lookup are required")
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Authenticator{verifier: cfg.Verifier, lookup: cfg.Lookup, now: cfg.Now, size: cfg.CacheSize, cache: map[[32]byte]*sa.Claims{}}, nil
}

// Verifications is how many tokens had their signature checked.
func (a *Authenticator) Verifications() int64 { return a.verifications.Load() }

// AuthenticateToken implements authn.TokenAuthenticator. A string that is
// not a JWT is not this authenticator's (ok false, no error).
func (a *Authenticator) AuthenticateToken(_ context.Context, token string) (*user.Info, bool, error) {
	if !sa.LooksLikeJWT(token) {
		return nil, false, nil
	}
	now := a.now()
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	c := a.cache[key]
	a.mu.Unlock()
	if c == nil {
		a.verifications.Add(1)
		var err error
		c, err = a.verifier.Verify(token, now)
		if errors.Is(err, sa.ErrNotServiceAccountToken) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		a.remember(key, c, now)
	} else if !c.Expiry.IsZero() && !now.Before(c.Expiry) {
		a.mu.Lock()
		delete(a.cache, key)
		a.mu.Unlock()
		return nil, false, fmt.Errorf("token expired at %s", c.Expiry.UTC().Format(time.RFC3339))
	}
	if err := a.live(c, token); err != nil {
		return nil, false, err
	}
	u := &user.Info{
		Name:   user.ServiceAccountUser(c.Namespace, c.ServiceAccountName),
		UID:    c.ServiceAccountUID,
		Groups: user.ServiceAccountGroups(c.Namespace),
	}
	if c.PodName != "" {
		u.Extra = map[string][]string{sa.PodNameExtra: {c.PodName}, sa.PodUIDExtra: {c.PodUID}}
	}
	return u, true, nil
}

// remember caches verified claims. When full, expired entries go first,
// then arbitrary ones: a dropped entry only costs one more verification.
func (a *Authenticator) remember(key [32]byte, c *sa.Claims, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= a.size {
		for k, v := range a.cache {
			if !v.Expiry.IsZero() && !now.Before(v.Expiry) {
				delete(a.cache, k)
			}
		}
		for k := range a.cache {
			if len(a.cache) < a.size {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[key] = c
}

// live checks that what the token names still exists: the account with
// the uid it was issued for, the Secret holding a legacy token (still
// holding this token), the Pod or Secret a bound token is tied to.
func (a *Authenticator) live(c *sa.Claims, token string) error {
	acct, ok := a.lookup("ServiceAccount", c.Namespace, c.ServiceAccountName)
	if !ok {
		return fmt.Errorf("service account %s/%s no longer exists", c.Namespace, c.ServiceAccountName)
	}
	if c.ServiceAccountUID != "" && acct.Meta().GetUid() != c.ServiceAccountUID {
		return fmt.Errorf("service account %s/%s was recreated (uid %s, token names %s)", c.Namespace, c.ServiceAccountName, acct.Meta().GetUid(), c.ServiceAccountUID)
	}
	if c.PodName != "" {
		p, ok := a.lookup("Pod", c.Namespace, c.PodName)
		if !ok {
			return fmt.Errorf("pod %s/%s the token is bound to no longer exists", c.Namespace, c.PodName)
		}
		if p.Meta().GetUid() != c.PodUID {
			return fmt.Errorf("pod %s/%s the token is bound to was recreated (uid %s, token names %s)", c.Namespace, c.PodName, p.Meta().GetUid(), c.PodUID)
		}
	}
	if c.SecretName != "" {
		s, ok := a.lookup("Secret", c.Namespace, c.SecretName)
		if !ok {
			return fmt.Errorf("secret %s/%s holding the token no longer exists", c.Namespace, c.SecretName)
		}
		if c.SecretUID != "" && s.Meta().GetUid() != c.SecretUID {
			return fmt.Errorf("secret %s/%s the token is bound to was recreated", c.Namespace, c.SecretName)
		}
		// A legacy token (no expiry) lives in its Secret: replacing the
		// Secret's token revokes the old one.
		if c.Expiry.IsZero() && string(s.GetSecret().GetData()[sa.TokenKey]) != token {
			return fmt.Errorf("secret %s/%s no longer holds this token", c.Namespace, c.SecretName)
		}
	}
	return nil
}
