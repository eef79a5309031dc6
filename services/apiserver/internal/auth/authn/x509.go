package authn

import (
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// certCacheSize bounds the verified-chain cache; it is cleared when full.
// A cluster has a few dozen client identities, so this is never reached
// in practice; the bound only stops a client from growing it at will.
const certCacheSize = 4096

// X509 authenticates client certificates issued by a CA: the subject's
// CommonName is the user, its Organizations the groups. A verified chain
// is remembered (by the SHA-256 of the certificates) until its first
// certificate expires, so a request on a long-lived connection does not
// pay a signature check each time.
type X509 struct {
	roots *x509.CertPool
	now   func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]cachedCert
}

type cachedCert struct {
	u        *user.Info
	notAfter time.Time
}

// NewX509 authenticates certificates that chain to roots.
func NewX509(roots *x509.CertPool) *X509 {
	return &X509{roots: roots, now: time.Now, cache: map[[32]byte]cachedCert{}}
}

// LoadClientCA reads a PEM bundle of CA certificates (--client-ca-file).
func LoadClientCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("client CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// AuthenticateCerts checks the peer's certificates (leaf first, as TLS
// delivers them) and returns the user they name.
func (a *X509) AuthenticateCerts(certs []*x509.Certificate) (*user.Info, error) {
	if len(certs) == 0 {
		return nil, errors.New("no client certificate")
	}
	h := sha256.New()
	for _, c := range certs {
		h.Write(c.Raw)
	}
	var key [32]byte
	h.Sum(key[:0])
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(c.notAfter) {
		return c.u, nil
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         a.roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, errors.New("client certificate: subject has no common name (the user name)")
	}
	u := &user.Info{Name: leaf.Subject.CommonName, Groups: withAuthenticated(append([]string(nil), leaf.Subject.Organization...))}
	// The chain stays valid until its first certificate expires.
	notAfter := leaf.NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	a.mu.Lock()
	if len(a.cache) >= certCacheSize {
		clear(a.cache)
	}
	a.cache[key] = cachedCert{u: u, notAfter: notAfter}
	a.mu.Unlock()
	return u, nil
}
