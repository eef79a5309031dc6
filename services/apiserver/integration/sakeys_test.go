package integration

import (
	"crypto"

	"github.com/kplane/kplane/services/apiserver/internal/apiserver"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// WithServiceAccountKeysAnonymous turns ServiceAccount tokens on for a
// plaintext test apiserver. The keys turn authentication on; the tests'
// own requests carry no credentials, so they come in as
// system:anonymous, which AlwaysAllow lets through: issuing and checking
// tokens is under test, not authorization (a bad token is still
// Unauthenticated).
func WithServiceAccountKeysAnonymous(signing crypto.Signer, verify ...crypto.PublicKey) testserver.Option {
	return func(c *apiserver.Config) {
		testserver.WithServiceAccountKeys(signing, verify...)(c)
		c.AnonymousAuth = true
		c.AuthorizationModes = []string{"AlwaysAllow"}
	}
}
