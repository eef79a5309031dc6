package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	sa "github.com/kplane/kplane/pkg/serviceaccount"
)

// Token lifetimes, as Kubernetes bounds them.
const (
	// MinTokenExpiration is the shortest lifetime a TokenRequest may ask.
	MinTokenExpiration = 10 * time.Minute
	// DefaultMaxTokenExpiration is --service-account-max-token-expiration's default.
	DefaultMaxTokenExpiration = time.Hour
)

// Issuer serves TokenRequests: it signs short-lived tokens for existing
// ServiceAccounts, optionally bound to a Pod or Secret.
type Issuer struct {
	signer *sa.Signer
	lookup Lookup
	max    time.Duration
	now    func() time.Time
}

// NewIssuer returns an issuer; maxExpiration 0 means DefaultMaxTokenExpiration.
func NewIssuer(signer *sa.Signer, lookup Lookup, maxExpiration time.Duration, now func() time.Time) (*Issuer, error) {
	if signer == nil || lookup == nil {
		return nil, errors.New("token issuer: signer and lookup are required")
	}
	if maxExpiration == 0 {
		maxExpiration = DefaultMaxTokenExpiration
	}
	if maxExpiration < MinTokenExpiration {
		return nil, fmt.Errorf("max token expiration %s is below the minimum %s", maxExpiration, MinTokenExpiration)
	}
	if now == nil {
		now = time.Now
	}
	return &Issuer{signer: signer, lookup: lookup, max: maxExpiration, now: now}, nil
}

// CreateToken checks req against the current objects and signs a token.
// Errors are gRPC statuses naming the field at fault.
func (i *Issuer) CreateToken(_ context.Context, req *kplanev1.CreateTokenRequest) (*kplanev1.CreateTokenResponse, error) {
	ns, name := req.GetNamespace(), req.GetServiceAccountName()
	if ns == "" {
		return nil, status.Error(codes.InvalidArgument, "namespace: Required value")
	}
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "serviceAccountName: Required value")
	}
	life := time.Duration(req.GetExpirationSeconds()) * time.Second
	switch {
	case req.GetExpirationSeconds() < 0:
		return nil, status.Errorf(codes.InvalidArgument, "spec.expirationSeconds: Invalid value: %d: must not be negative", req.GetExpirationSeconds())
	case life == 0 || life > i.max:
		// Kubernetes caps rather than refuses a longer request.
		life = i.max
	case life < MinTokenExpiration:
		return nil, status.Errorf(codes.InvalidArgument, "spec.expirationSeconds: Invalid value: %d: may not specify a duration less than %d seconds", req.GetExpirationSeconds(), int64(MinTokenExpiration/time.Second))
	}
	acct, ok := i.lookup("ServiceAccount", ns, name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "serviceaccounts %q not found in namespace %q", name, ns)
	}
	now := i.now()
	c := sa.Claims{
		Audiences:          req.GetAudiences(),
		IssuedAt:           now,
		NotBefore:          now,
		Expiry:             now.Add(life),
		Namespace:          ns,
		ServiceAccountName: name,
		ServiceAccountUID:  acct.Meta().GetUid(),
	}
	if len(c.Audiences) == 0 {
		c.Audiences = []string{i.signer.Issuer()}
	}
	if b := req.GetBoundObject(); b != nil {
		if b.GetName() == "" {
			return nil, status.Error(codes.InvalidArgument, "spec.boundObjectRef.name: Required value")
		}
		switch b.GetKind() {
		case "Pod":
			p, ok := i.lookup("Pod", ns, b.GetName())
			if !ok {
				return nil, status.Errorf(codes.NotFound, "spec.boundObjectRef: pods %q not found in namespace %q", b.GetName(), ns)
			}
			uid := p.Meta().GetUid()
			if b.GetUid() != "" && b.GetUid() != uid {
				return nil, status.Errorf(codes.FailedPrecondition, "spec.boundObjectRef.uid: pod %s/%s has uid %s, not %s", ns, b.GetName(), uid, b.GetUid())
			}
			if got := p.GetPod().GetSpec().GetServiceAccountName(); got != name {
				return nil, status.Errorf(codes.InvalidArgument, "spec.boundObjectRef: pod %s/%s uses service account %q, not %q", ns, b.GetName(), got, name)
			}
			c.PodName, c.PodUID = b.GetName(), uid
		case "Secret":
			s, ok := i.lookup("Secret", ns, b.GetName())
			if !ok {
				return nil, status.Errorf(codes.NotFound, "spec.boundObjectRef: secrets %q not found in namespace %q", b.GetName(), ns)
			}
			uid := s.Meta().GetUid()
			if b.GetUid() != "" && b.GetUid() != uid {
				return nil, status.Errorf(codes.FailedPrecondition, "spec.boundObjectRef.uid: secret %s/%s has uid %s, not %s", ns, b.GetName(), uid, b.GetUid())
			}
			c.SecretName, c.SecretUID = b.GetName(), uid
		default:
			return nil, status.Errorf(codes.InvalidArgument, "spec.boundObjectRef.kind: Unsupported value: %q: supported values: \"Pod\", \"Secret\"", b.GetKind())
		}
	}
	tok, err := i.signer.Sign(c)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	return &kplanev1.CreateTokenResponse{Token: tok, ExpirationTimestamp: timestamppb.New(c.Expiry)}, nil
}
