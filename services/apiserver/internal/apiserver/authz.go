package apiserver

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/authz"
)

// startAuthorizers builds the authorizer chain of cfg.AuthorizationModes
// and starts feeding the Node and RBAC indexes from the watch caches;
// the feed stops with ctx. esc is nil unless RBAC is on.
func (a *APIServer) startAuthorizers(ctx context.Context) (authz.Authorizer, *authz.Escalation, error) {
	modes := a.cfg.AuthorizationModes
	if len(modes) == 0 {
		// Without authenticators every request is anonymous, and only
		// AlwaysAllow lets it do anything; with them, who may do what is
		// RBAC's (and the Node authorizer's) to say.
		modes = []string{authz.ModeAlwaysAllow}
		if a.authn.Enabled() {
			modes = []string{authz.ModeNode, authz.ModeRBAC}
		}
	}
	var chain authz.Union
	sinks := map[string]authz.Sink{}
	var rbac *authz.RBAC
	for _, m := range modes {
		switch m {
		case authz.ModeAlwaysAllow:
			chain = append(chain, authz.AlwaysAllow)
		case authz.ModeNode:
			n := authz.NewNode()
			for _, k := range authz.NodeKinds {
				sinks[k] = n
			}
			chain = append(chain, n)
		case authz.ModeRBAC:
			rbac = authz.NewRBAC()
			for _, k := range authz.RBACKinds {
				sinks[k] = rbac
			}
			chain = append(chain, rbac)
		default:
			return nil, nil, fmt.Errorf("authorization mode %q: want AlwaysAllow, Node or RBAC", m)
		}
	}
	if len(sinks) > 0 {
		sources := map[string]authz.Source{}
		for k, c := range a.caches {
			sources[k] = c
		}
		feed, err := authz.NewFeed(ctx, sources, sinks, a.log.Named("authz"))
		if err != nil {
			return nil, nil, err
		}
		a.authzFeed = feed
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			feed.Wait()
		}()
	}
	var esc *authz.Escalation
	if rbac != nil {
		esc = &authz.Escalation{RBAC: rbac, Authz: chain}
	}
	a.log.Info("authorization", "modes", modes)
	return chain, esc, nil
}

// ensureBootstrapPolicy creates the built-in roles and bindings, and on
// every start puts back their built-in content unless an administrator
// set the autoupdate annotation to "false". Other objects are never
// touched.
func (a *APIServer) ensureBootstrapPolicy(ctx context.Context) error {
	for _, want := range authz.BootstrapPolicy() {
		m := want.Meta()
		_, err := a.store.Create(ctx, want)
		if err == nil || status.Code(err) != codes.AlreadyExists {
			if err != nil {
				return fmt.Errorf("bootstrap %s %s: %w", want.KindName(), m.GetName(), err)
			}
			continue
		}
		cur, err := a.store.Get(ctx, want.KindName(), m.GetNamespace(), m.GetName())
		if err != nil {
			return fmt.Errorf("bootstrap %s %s: %w", want.KindName(), m.GetName(), err)
		}
		if cur.Meta().GetAnnotations()[authz.BootstrapAnnotation] == "false" {
			continue
		}
		next, changed := bootstrapUpdate(cur, want)
		if !changed {
			continue
		}
		if _, err := a.store.Update(ctx, next); err != nil {
			return fmt.Errorf("bootstrap: reset %s %s: %w", want.KindName(), m.GetName(), err)
		}
		a.log.Info("bootstrap policy object reset to its built-in content", "kind", want.KindName(), "name", m.GetName())
	}
	return nil
}

// bootstrapUpdate returns cur with want's rules or subjects, and whether
// anything differed. A binding's roleRef is the same by construction
// (the names pair them), and is immutable anyway.
func bootstrapUpdate(cur, want *kplanev1.Object) (*kplanev1.Object, bool) {
	next := proto.Clone(cur).(*kplanev1.Object)
	switch x := next.GetKind().(type) {
	case *kplanev1.Object_Role:
		x.Role.Rules = want.GetRole().GetRules()
	case *kplanev1.Object_ClusterRole:
		x.ClusterRole.Rules = want.GetClusterRole().GetRules()
	case *kplanev1.Object_RoleBinding:
		x.RoleBinding.Subjects = want.GetRoleBinding().GetSubjects()
	case *kplanev1.Object_ClusterRoleBinding:
		x.ClusterRoleBinding.Subjects = want.GetClusterRoleBinding().GetSubjects()
	}
	return next, !proto.Equal(next, cur)
}
