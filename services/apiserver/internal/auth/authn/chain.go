package authn

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// Config selects the authenticators of a Chain.
type Config struct {
	// ClientCA verifies client certificates; nil turns them off.
	ClientCA *x509.CertPool
	// Tokens are asked in order for a bearer token; the first that
	// knows it decides (the static token file, then e.g. ServiceAccount
	// tokens).
	Tokens []TokenAuthenticator
	// Anonymous lets requests without credentials in as system:anonymous.
	Anonymous bool
	// Logger receives one line per refusal.
	Logger hclog.Logger
}

// Credentials are what one request presents.
type Credentials struct {
	// Authorization holds the values of the authorization header or
	// metadata key.
	Authorization []string
	// PeerCerts are the client's TLS certificates, leaf first.
	PeerCerts []*x509.Certificate
	// Public marks a request allowed without credentials even when
	// anonymous access is off (gRPC health checks).
	Public bool
}

// Chain authenticates requests with client certificates, then bearer
// tokens. A request that presents credentials is either authenticated by
// them or refused: bad credentials never fall back to anonymous.
type Chain struct {
	x509      *X509
	tokens    []TokenAuthenticator
	anonymous bool
	log       hclog.Logger
}

// New builds a Chain. With neither a client CA nor a token authenticator
// it is disabled: every request is system:anonymous, as before
// authentication existed.
func New(cfg Config) *Chain {
	c := &Chain{tokens: cfg.Tokens, anonymous: cfg.Anonymous, log: cfg.Logger}
	if cfg.ClientCA != nil {
		c.x509 = NewX509(cfg.ClientCA)
	}
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	return c
}

// Enabled reports whether any authenticator is configured.
func (c *Chain) Enabled() bool { return c.x509 != nil || len(c.tokens) > 0 }

// ClientCerts reports whether client certificates are checked (the TLS
// server then asks for them).
func (c *Chain) ClientCerts() bool { return c.x509 != nil }

// AnonymousUser is the identity of a request without credentials.
func AnonymousUser() *user.Info {
	return &user.Info{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
}

// Error is an authentication refusal; its message is safe to return to
// the client (it never holds a token).
type Error struct{ Reason string }

func (e *Error) Error() string { return "unauthenticated: " + e.Reason }

// IsRefusal reports whether err is an authentication refusal.
func IsRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Authenticate returns the user cr names, or an *Error.
func (c *Chain) Authenticate(ctx context.Context, cr Credentials) (*user.Info, error) {
	if !c.Enabled() {
		return AnonymousUser(), nil
	}
	if c.x509 != nil && len(cr.PeerCerts) > 0 {
		u, err := c.x509.AuthenticateCerts(cr.PeerCerts)
		if err != nil {
			return nil, &Error{Reason: err.Error()}
		}
		return u, nil
	}
	token, present, err := ParseBearer(cr.Authorization)
	if err != nil {
		return nil, &Error{Reason: err.Error()}
	}
	if present {
		for _, t := range c.tokens {
			u, ok, err := t.AuthenticateToken(ctx, token)
			if err != nil {
				return nil, &Error{Reason: fmt.Sprintf("bearer token refused: %v", err)}
			}
			if ok {
				return u, nil
			}
		}
		return nil, &Error{Reason: "invalid bearer token"}
	}
	if c.anonymous || cr.Public {
		return AnonymousUser(), nil
	}
	return nil, &Error{Reason: "no credentials (a client certificate or a bearer token is required)"}
}
