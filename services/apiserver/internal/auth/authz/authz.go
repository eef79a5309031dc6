// Package authz decides whether an authenticated user (package user) may
// do what a request asks: the RBAC and Node authorizers, their union in
// the order --authorization-mode names them, the decorator that puts the
// decision in front of every Resources method (gRPC and REST alike),
// RBAC's escalation checks, the bootstrap policy and the audit log.
package authz

import (
	"context"
	"fmt"
	"strings"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// Attributes describe one request as RBAC sees it.
type Attributes struct {
	User *user.Info
	// Verb is get, list, watch, create, update, patch, delete,
	// deletecollection (or escalate, bind for the escalation checks).
	Verb string
	// APIGroup is "" for the core group.
	APIGroup string
	// Resource is the plural ("pods"); Subresource is "status", "scale",
	// "log", ... or "".
	Resource    string
	Subresource string
	// Kind is the kind name, for messages ("Pod").
	Kind      string
	Namespace string
	Name      string
	// BoundPod names the pod (in Namespace) a serviceaccounts/token
	// request binds its token to; the Node authorizer lets a node ask
	// only for its own pods' tokens.
	BoundPod string
}

// ResourceString is resource or resource/subresource.
func (a *Attributes) ResourceString() string {
	if a.Subresource == "" {
		return a.Resource
	}
	return a.Resource + "/" + a.Subresource
}

// Decision is an authorizer's answer.
type Decision int

const (
	// NoOpinion lets the next authorizer decide; the last one's
	// NoOpinion denies.
	NoOpinion Decision = iota
	// Allow ends the chain allowing the request.
	Allow
	// Deny ends the chain denying it.
	Deny
)

// Authorizer decides on one request. reason explains the decision for
// logs and CheckAccess.
type Authorizer interface {
	Authorize(ctx context.Context, a *Attributes) (d Decision, reason string)
}

// AuthorizerFunc adapts a function.
type AuthorizerFunc func(ctx context.Context, a *Attributes) (Decision, string)

// Authorize implements Authorizer.
func (f AuthorizerFunc) Authorize(ctx context.Context, a *Attributes) (Decision, string) {
	return f(ctx, a)
}

// AlwaysAllow allows every request (mode AlwaysAllow).
var AlwaysAllow Authorizer = AuthorizerFunc(func(context.Context, *Attributes) (Decision, string) {
	return Allow, "authorization mode AlwaysAllow"
})

// Union asks each authorizer in order; the first Allow or Deny decides.
// Members of system:masters are allowed before any is asked.
type Union []Authorizer

// Authorize implements Authorizer.
func (u Union) Authorize(ctx context.Context, a *Attributes) (Decision, string) {
	if a.User != nil && a.User.InGroup(user.SystemPrivilegedGroup) {
		return Allow, "member of " + user.SystemPrivilegedGroup
	}
	var reasons []string
	for _, z := range u {
		d, why := z.Authorize(ctx, a)
		if d != NoOpinion {
			return d, why
		}
		if why != "" {
			reasons = append(reasons, why)
		}
	}
	return Deny, strings.Join(reasons, "; ")
}

// Mode names of --authorization-mode.
const (
	ModeAlwaysAllow = "AlwaysAllow"
	ModeNode        = "Node"
	ModeRBAC        = "RBAC"
)

// ParseModes splits and checks an --authorization-mode value.
func ParseModes(s string) ([]string, error) {
	var modes []string
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case ModeAlwaysAllow, ModeNode, ModeRBAC:
		default:
			return nil, fmt.Errorf("authorization mode %q: want AlwaysAllow, Node or RBAC (comma list)", m)
		}
		if seen[m] {
			return nil, fmt.Errorf("authorization mode %q given twice", m)
		}
		seen[m] = true
		modes = append(modes, m)
	}
	return modes, nil
}

type verbKey struct{}

// WithVerb tells the decorator the verb the client used when the method
// alone does not say it: REST's PATCH calls Update ("patch"), a
// collection DELETE calls Delete per item ("deletecollection"), a
// ?watch=true GET calls Watch.
func WithVerb(ctx context.Context, verb string) context.Context {
	return context.WithValue(ctx, verbKey{}, verb)
}

// refinements are the verbs WithVerb may substitute for a method's own:
// a client cannot make a delete look like a get.
var refinements = map[string]string{"update": "patch", "delete": "deletecollection",
	// REST's collection delete lists what it deletes.
	"list": "deletecollection"}

// verbFrom returns the verb WithVerb set when it refines def, else def.
func verbFrom(ctx context.Context, def string) string {
	if v, ok := ctx.Value(verbKey{}).(string); ok && refinements[def] == v {
		return v
	}
	return def
}
