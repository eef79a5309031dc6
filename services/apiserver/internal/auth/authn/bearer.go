package authn

import (
	"errors"
	"strings"
)

// ErrMalformedAuthorization is returned for an authorization value that
// is present but is not "Bearer <token>"; such a request carries
// credentials that cannot be checked, so it is refused rather than
// treated as anonymous.
var ErrMalformedAuthorization = errors.New(`authorization must be "Bearer <token>"`)

// ParseBearer extracts the bearer token from the values of an
// authorization header (HTTP) or metadata key (gRPC). present reports
// whether any value was given at all. The scheme is matched without
// regard to case, as RFC 9110 says; more than one value, an empty token
// or one with whitespace inside is malformed.
func ParseBearer(values []string) (token string, present bool, err error) {
	if len(values) == 0 {
		return "", false, nil
	}
	if len(values) > 1 {
		return "", true, errors.New("more than one authorization value")
	}
	v := strings.TrimSpace(values[0])
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true, ErrMalformedAuthorization
	}
	token = strings.TrimLeft(rest, " ")
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", true, ErrMalformedAuthorization
	}
	return token, true, nil
}
