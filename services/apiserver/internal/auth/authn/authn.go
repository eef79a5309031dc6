// Package authn authenticates requests: the first step of every request,
// before authorization and validation. It turns a request's credentials
// (a bearer token, a client certificate) into a user.Info.
package authn

import (
	"context"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// TokenAuthenticator maps a bearer token to a user. ok is false when the
// token is not one this authenticator knows (the next one is asked); err
// is set when it is one of its tokens and it is refused (bad signature,
// expired, revoked), which ends authentication.
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string) (u *user.Info, ok bool, err error)
}
