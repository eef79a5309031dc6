// Package serviceaccount is the ServiceAccount token format, shared by
// the code that signs tokens (tokenctl for Secrets, the apiserver's
// TokenRequest) and the code that verifies them (the apiserver's
// authenticator): a JWS-signed JWT (ES256 or EdDSA) with the registered
// claims and a private "kubernetes.io" claim laid out as Kubernetes does,
// so tools that read Kubernetes tokens read these.
package serviceaccount

import (
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Names shared with Kubernetes.
const (
	// DefaultIssuer is the iss claim when --service-account-issuer is unset.
	DefaultIssuer = "kplane"
	// SecretType is the type of a Secret that holds an account's token.
	SecretType = "kubernetes.io/service-account-token"
	// NameAnnotation names the account a token Secret is for.
	NameAnnotation = "kubernetes.io/service-account.name"
	// UIDAnnotation holds that account's uid.
	UIDAnnotation = "kubernetes.io/service-account.uid"
	// DefaultName is the account every namespace has, and pods use by default.
	DefaultName = "default"
	// Token Secret data keys.
	TokenKey     = "token"
	CAKey        = "ca.crt"
	NamespaceKey = "namespace"
	// Extra keys of a bound token's user, naming its pod.
	PodNameExtra = "authentication.kubernetes.io/pod-name"
	PodUIDExtra  = "authentication.kubernetes.io/pod-uid"
)

// subjectPrefix starts the sub claim: system:serviceaccount:<ns>:<name>.
const subjectPrefix = "system:serviceaccount:"

// Claims is what a token says. Expiry zero means no exp (legacy Secret
// tokens, valid for as long as their Secret and account exist).
type Claims struct {
	Issuer    string
	Audiences []string
	IssuedAt  time.Time
	NotBefore time.Time
	Expiry    time.Time

	Namespace          string
	ServiceAccountName string
	ServiceAccountUID  string
	// PodName/PodUID are set in a token bound to a pod.
	PodName string
	PodUID  string
	// SecretName is set in a legacy token stored in a Secret, or one
	// bound to a Secret.
	SecretName string
	SecretUID  string
}

// Subject is the sub claim.
func (c *Claims) Subject() string {
	return subjectPrefix + c.Namespace + ":" + c.ServiceAccountName
}

type ref struct {
	Name string `json:"name"`
	UID  string `json:"uid,omitempty"`
}

type kubeClaim struct {
	Namespace      string `json:"namespace"`
	ServiceAccount ref    `json:"serviceaccount"`
	Pod            *ref   `json:"pod,omitempty"`
	Secret         *ref   `json:"secret,omitempty"`
}

type privateClaims struct {
	Kubernetes *kubeClaim `json:"kubernetes.io,omitempty"`
}

// Signer signs tokens with one private key.
type Signer struct {
	issuer string
	signer jose.Signer
	kid    string
}

// NewSigner returns a signer issuing tokens as issuer ("" = DefaultIssuer).
func NewSigner(issuer string, key crypto.Signer) (*Signer, error) {
	if issuer == "" {
		issuer = DefaultIssuer
	}
	alg, err := algorithm(key.Public())
	if err != nil {
		return nil, err
	}
	kid, err := KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		return nil, fmt.Errorf("new JWS signer: %w", err)
	}
	return &Signer{issuer: issuer, signer: s, kid: kid}, nil
}

// Issuer is the iss claim the signer writes.
func (s *Signer) Issuer() string { return s.issuer }

// Sign returns the token for c; c.Issuer is ignored (the signer's is used).
func (s *Signer) Sign(c Claims) (string, error) {
	if c.Namespace == "" || c.ServiceAccountName == "" {
		return "", errors.New("sign token: namespace and service account name are required")
	}
	std := jwt.Claims{
		Issuer:   s.issuer,
		Subject:  c.Subject(),
		Audience: jwt.Audience(c.Audiences),
	}
	if !c.IssuedAt.IsZero() {
		std.IssuedAt = jwt.NewNumericDate(c.IssuedAt)
	}
	if !c.NotBefore.IsZero() {
		std.NotBefore = jwt.NewNumericDate(c.NotBefore)
	}
	if !c.Expiry.IsZero() {
		std.Expiry = jwt.NewNumericDate(c.Expiry)
	}
	k := &kubeClaim{Namespace: c.Namespace, ServiceAccount: ref{Name: c.ServiceAccountName, UID: c.ServiceAccountUID}}
	if c.PodName != "" {
		k.Pod = &ref{Name: c.PodName, UID: c.PodUID}
	}
	if c.SecretName != "" {
		k.Secret = &ref{Name: c.SecretName, UID: c.SecretUID}
	}
	tok, err := jwt.Signed(s.signer).Claims(std).Claims(privateClaims{Kubernetes: k}).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return tok, nil
}

// Verifier checks tokens against a set of public keys.
type Verifier struct {
	issuer string
	keys   map[string]crypto.PublicKey
	algs   []jose.SignatureAlgorithm
}

// NewVerifier returns a verifier accepting tokens of issuer ("" =
// DefaultIssuer) signed by any of keys.
func NewVerifier(issuer string, keys []crypto.PublicKey) (*Verifier, error) {
	if issuer == "" {
		issuer = DefaultIssuer
	}
	if len(keys) == 0 {
		return nil, errors.New("no public keys to verify service account tokens with")
	}
	v := &Verifier{issuer: issuer, keys: map[string]crypto.PublicKey{}}
	seen := map[jose.SignatureAlgorithm]bool{}
	for i, k := range keys {
		alg, err := algorithm(k)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i+1, err)
		}
		kid, err := KeyID(k)
		if err != nil {
			return nil, err
		}
		v.keys[kid] = k
		if !seen[alg] {
			seen[alg] = true
			v.algs = append(v.algs, alg)
		}
	}
	return v, nil
}

// ErrNotServiceAccountToken says a string is not a JWT at all (so another
// authenticator may know it).
var ErrNotServiceAccountToken = errors.New("not a service account token")

// LooksLikeJWT reports whether token has the three dot-separated parts of
// a compact JWS, the cheap test before trying to verify it.
func LooksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2
}

// Verify checks token's signature, issuer and validity window at now and
// returns its claims. A string that is not a JWT gives
// ErrNotServiceAccountToken.
func (v *Verifier) Verify(token string, now time.Time) (*Claims, error) {
	if !LooksLikeJWT(token) {
		return nil, ErrNotServiceAccountToken
	}
	tok, err := jwt.ParseSigned(token, v.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	if len(tok.Headers) != 1 {
		return nil, errors.New("malformed token: want exactly one signature")
	}
	key, ok := v.keys[tok.Headers[0].KeyID]
	if !ok {
		return nil, fmt.Errorf("token signed by unknown key %q", tok.Headers[0].KeyID)
	}
	var std jwt.Claims
	var priv privateClaims
	if err := tok.Claims(key, &std, &priv); err != nil {
		return nil, fmt.Errorf("invalid token signature: %w", err)
	}
	if std.Issuer != v.issuer {
		return nil, fmt.Errorf("token issuer %q is not %q", std.Issuer, v.issuer)
	}
	// No leeway: every signer and verifier here runs on one clock (the
	// apiserver's), and an expired token must be refused at once.
	if err := std.ValidateWithLeeway(jwt.Expected{Time: now}, 0); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	k := priv.Kubernetes
	if k == nil || k.Namespace == "" || k.ServiceAccount.Name == "" {
		return nil, errors.New("token lacks the kubernetes.io namespace and service account claims")
	}
	if std.Subject != subjectPrefix+k.Namespace+":"+k.ServiceAccount.Name {
		return nil, fmt.Errorf("token subject %q does not match its kubernetes.io claims", std.Subject)
	}
	c := &Claims{
		Issuer:             std.Issuer,
		Audiences:          []string(std.Audience),
		Namespace:          k.Namespace,
		ServiceAccountName: k.ServiceAccount.Name,
		ServiceAccountUID:  k.ServiceAccount.UID,
	}
	if std.IssuedAt != nil {
		c.IssuedAt = std.IssuedAt.Time()
	}
	if std.NotBefore != nil {
		c.NotBefore = std.NotBefore.Time()
	}
	if std.Expiry != nil {
		c.Expiry = std.Expiry.Time()
	}
	if k.Pod != nil {
		if k.Pod.Name == "" || k.Pod.UID == "" {
			return nil, errors.New("token's pod claim lacks name or uid")
		}
		c.PodName, c.PodUID = k.Pod.Name, k.Pod.UID
	}
	if k.Secret != nil {
		if k.Secret.Name == "" {
			return nil, errors.New("token's secret claim lacks a name")
		}
		c.SecretName, c.SecretUID = k.Secret.Name, k.Secret.UID
	}
	return c, nil
}

func base64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
