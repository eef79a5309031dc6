package authz

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// anonymous is the identity of a request that carries none (no
// authenticator configured).
var anonymous = &user.Info{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

// UserFrom returns the request's user, system:anonymous when none.
func UserFrom(ctx context.Context) *user.Info {
	if u, ok := user.From(ctx); ok {
		return u
	}
	return anonymous
}

// Decorator authorizes every Resources method before delegating to the
// wrapped server: one place for the gRPC and REST front ends, which both
// call it. Methods it does not know fail Unimplemented (the embedded
// default) rather than pass unchecked: a new RPC must be added here.
type Decorator struct {
	kplanev1.UnimplementedResourcesServer
	next  kplanev1.ResourcesServer
	authz Authorizer
	esc   *Escalation
	audit *AuditLog
	log   hclog.Logger
}

// DecoratorConfig configures a Decorator.
type DecoratorConfig struct {
	Authorizer Authorizer
	// Escalation, when set, checks RBAC writes (mode RBAC).
	Escalation *Escalation
	// Audit, when set, receives a line per write and per denial.
	Audit  *AuditLog
	Logger hclog.Logger
}

// NewDecorator wraps next.
func NewDecorator(next kplanev1.ResourcesServer, cfg DecoratorConfig) *Decorator {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Decorator{next: next, authz: cfg.Authorizer, esc: cfg.Escalation, audit: cfg.Audit, log: log}
}

// attributes builds the request's attributes for kind.
func attributes(u *user.Info, verb, kind, sub, ns, name string) *Attributes {
	r := kplanev1.ResourceOf(kind)
	return &Attributes{User: u, Verb: verb, APIGroup: r.Group, Resource: r.Plural, Subresource: sub, Kind: kind, Namespace: ns, Name: name}
}

// nameFromSelector returns X when a field selector pins metadata.name=X,
// so a list or watch of one object is authorized like a get of it.
func nameFromSelector(sel string) string {
	for _, term := range strings.Split(sel, ",") {
		term = strings.TrimSpace(term)
		if v, ok := strings.CutPrefix(term, "metadata.name=="); ok {
			return v
		}
		if v, ok := strings.CutPrefix(term, "metadata.name="); ok {
			return v
		}
	}
	return ""
}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// authorize decides, logs and audits a denial; nil means allowed.
func (d *Decorator) authorize(ctx context.Context, a *Attributes) error {
	dec, reason := d.authz.Authorize(ctx, a)
	if dec == Allow {
		return nil
	}
	return d.deny(a, Forbidden(a, reason))
}

// deny logs and audits a refusal.
func (d *Decorator) deny(a *Attributes, err error) error {
	d.log.Info("request denied", "user", a.User.Name, "groups", a.User.Groups, "verb", a.Verb,
		"resource", a.ResourceString(), "namespace", a.Namespace, "name", a.Name, "error", err)
	d.record(a, "deny", codes.PermissionDenied, err)
	return err
}

// record writes an audit line (when auditing is on).
func (d *Decorator) record(a *Attributes, decision string, code codes.Code, err error) {
	if d.audit == nil {
		return
	}
	e := AuditEntry{User: a.User.Name, Groups: a.User.Groups, Verb: a.Verb, APIGroup: a.APIGroup, Resource: a.Resource,
		Subresource: a.Subresource, Kind: a.Kind, Namespace: a.Namespace, Name: a.Name, Decision: decision, Code: code.String()}
	if err != nil && code == codes.PermissionDenied {
		e.Reason = status.Convert(err).Message()
	}
	if lerr := d.audit.Log(e); lerr != nil {
		d.log.Error("audit log write failed", "error", lerr)
	}
}

// done audits an allowed write with the code it ended with.
func (d *Decorator) done(a *Attributes, err error) {
	if writeVerbs[a.Verb] {
		d.record(a, "allow", status.Code(err), nil)
	}
}

// Forbidden is the PermissionDenied error of a denied request, naming
// user, verb, resource (and kind), namespace and name.
func Forbidden(a *Attributes, reason string) error {
	var b strings.Builder
	if a.Name != "" {
		fmt.Fprintf(&b, "%s %q is forbidden: ", a.ResourceString(), a.Name)
	} else {
		fmt.Fprintf(&b, "%s is forbidden: ", a.ResourceString())
	}
	fmt.Fprintf(&b, "User %q cannot %s resource %q", a.User.Name, a.Verb, a.ResourceString())
	if a.Kind != "" {
		fmt.Fprintf(&b, " (kind %s)", a.Kind)
	}
	fmt.Fprintf(&b, " in API group %q", a.APIGroup)
	if a.Namespace != "" {
		fmt.Fprintf(&b, " in the namespace %q", a.Namespace)
	} else {
		b.WriteString(" at the cluster scope")
	}
	if reason != "" {
		b.WriteString(": " + reason)
	}
	return status.Error(codes.PermissionDenied, b.String())
}

// AuthorizeSubresource implements rest.SubresourceAuthorizer (and
// serves the proxy): the REST-only subresources (pods/log, pods/exec,
// pods/portforward, pods/eviction, pods/binding, services/proxy,
// pods/proxy) are authorized as RBAC names them. Denials are audited;
// allowed creates (eviction, binding, exec) too.
func (d *Decorator) AuthorizeSubresource(ctx context.Context, verb, kind, sub, ns, name string) error {
	a := attributes(UserFrom(ctx), verb, kind, sub, ns, name)
	if err := d.authorize(ctx, a); err != nil {
		return err
	}
	d.done(a, nil)
	return nil
}

// unchangedRules reports whether an update of a Role or ClusterRole
// keeps its rules: then nothing new is granted and the escalation check
// is skipped (the collector stripping an owner reference holds none of
// the rules it carries).
func (d *Decorator) unchangedRules(ctx context.Context, obj *kplanev1.Object) bool {
	var rules func(*kplanev1.Object) []*kplanev1.PolicyRule
	switch obj.GetKind().(type) {
	case *kplanev1.Object_Role:
		rules = func(o *kplanev1.Object) []*kplanev1.PolicyRule { return o.GetRole().GetRules() }
	case *kplanev1.Object_ClusterRole:
		rules = func(o *kplanev1.Object) []*kplanev1.PolicyRule { return o.GetClusterRole().GetRules() }
	case *kplanev1.Object_RoleBinding, *kplanev1.Object_ClusterRoleBinding:
		// roleRef is immutable: an update grants what the create did.
		return true
	default:
		return true
	}
	m := obj.Meta()
	old, err := d.next.Get(ctx, &kplanev1.GetRequest{Kind: obj.KindName(), Namespace: m.GetNamespace(), Name: m.GetName()})
	if err != nil {
		return false // the update will fail or be checked in full
	}
	a, b := rules(obj), rules(old.GetObject())
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// checkEscalation runs the RBAC escalation checks on a write of obj.
func (d *Decorator) checkEscalation(ctx context.Context, a *Attributes, obj *kplanev1.Object) error {
	if d.esc == nil {
		return nil
	}
	if a.Verb != "create" && d.unchangedRules(ctx, obj) {
		return nil
	}
	if err := d.esc.Check(ctx, a.User, obj); err != nil {
		return d.deny(a, Forbidden(a, err.Error()))
	}
	return nil
}

// Create implements kplanev1.ResourcesServer. The attributes name the
// object (the Node authorizer needs it); RBAC ignores resourceNames for
// create, as Kubernetes does.
func (d *Decorator) Create(ctx context.Context, req *kplanev1.CreateRequest) (*kplanev1.CreateResponse, error) {
	obj := req.GetObject()
	m := obj.Meta()
	a := attributes(UserFrom(ctx), "create", obj.KindName(), "", m.GetNamespace(), m.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	if err := d.checkEscalation(ctx, a, obj); err != nil {
		return nil, err
	}
	resp, err := d.next.Create(ctx, req)
	d.done(a, err)
	return resp, err
}

// Get implements kplanev1.ResourcesServer.
func (d *Decorator) Get(ctx context.Context, req *kplanev1.GetRequest) (*kplanev1.GetResponse, error) {
	a := attributes(UserFrom(ctx), "get", req.GetKind(), "", req.GetNamespace(), req.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	return d.next.Get(ctx, req)
}

// List implements kplanev1.ResourcesServer. A list of every namespace
// (namespace "") needs a cluster-wide grant.
func (d *Decorator) List(ctx context.Context, req *kplanev1.ListRequest) (*kplanev1.ListResponse, error) {
	a := attributes(UserFrom(ctx), "list", req.GetKind(), "", req.GetNamespace(), nameFromSelector(req.GetFieldSelector()))
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	return d.next.List(ctx, req)
}

// Watch implements kplanev1.ResourcesServer.
func (d *Decorator) Watch(req *kplanev1.WatchRequest, stream kplanev1.Resources_WatchServer) error {
	a := attributes(UserFrom(stream.Context()), "watch", req.GetKind(), "", req.GetNamespace(), nameFromSelector(req.GetFieldSelector()))
	if err := d.authorize(stream.Context(), a); err != nil {
		return err
	}
	return d.next.Watch(req, stream)
}

// Update implements kplanev1.ResourcesServer (verb patch when the REST
// side says so).
func (d *Decorator) Update(ctx context.Context, req *kplanev1.UpdateRequest) (*kplanev1.UpdateResponse, error) {
	obj := req.GetObject()
	m := obj.Meta()
	a := attributes(UserFrom(ctx), verbFrom(ctx, "update"), obj.KindName(), "", m.GetNamespace(), m.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	if err := d.checkEscalation(ctx, a, obj); err != nil {
		return nil, err
	}
	resp, err := d.next.Update(ctx, req)
	d.done(a, err)
	return resp, err
}

// UpdateStatus implements kplanev1.ResourcesServer: update (or patch) of
// <resource>/status.
func (d *Decorator) UpdateStatus(ctx context.Context, req *kplanev1.UpdateStatusRequest) (*kplanev1.UpdateStatusResponse, error) {
	obj := req.GetObject()
	m := obj.Meta()
	a := attributes(UserFrom(ctx), verbFrom(ctx, "update"), obj.KindName(), "status", m.GetNamespace(), m.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	resp, err := d.next.UpdateStatus(ctx, req)
	d.done(a, err)
	return resp, err
}

// Delete implements kplanev1.ResourcesServer (verb deletecollection
// when the REST side deletes a collection).
func (d *Decorator) Delete(ctx context.Context, req *kplanev1.DeleteRequest) (*kplanev1.DeleteResponse, error) {
	a := attributes(UserFrom(ctx), verbFrom(ctx, "delete"), req.GetKind(), "", req.GetNamespace(), req.GetName())
	if a.Verb == "deletecollection" {
		a.Name = "" // a collection delete is granted as a whole, not per name
	}
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	resp, err := d.next.Delete(ctx, req)
	if a.Verb == "deletecollection" {
		a.Name = req.GetName()
	}
	d.done(a, err)
	return resp, err
}

// GetScale implements kplanev1.ResourcesServer: get of <resource>/scale.
func (d *Decorator) GetScale(ctx context.Context, req *kplanev1.GetScaleRequest) (*kplanev1.GetScaleResponse, error) {
	a := attributes(UserFrom(ctx), "get", req.GetKind(), "scale", req.GetNamespace(), req.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	return d.next.GetScale(ctx, req)
}

// UpdateScale implements kplanev1.ResourcesServer: update (or patch) of
// <resource>/scale.
func (d *Decorator) UpdateScale(ctx context.Context, req *kplanev1.UpdateScaleRequest) (*kplanev1.UpdateScaleResponse, error) {
	m := req.GetScale().GetMetadata()
	a := attributes(UserFrom(ctx), verbFrom(ctx, "update"), req.GetKind(), "scale", m.GetNamespace(), m.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	resp, err := d.next.UpdateScale(ctx, req)
	d.done(a, err)
	return resp, err
}

// CheckAccess implements kplanev1.ResourcesServer: anyone may ask what
// they themself may do.
func (d *Decorator) CheckAccess(ctx context.Context, req *kplanev1.CheckAccessRequest) (*kplanev1.CheckAccessResponse, error) {
	if req.GetVerb() == "" {
		return nil, status.Error(codes.InvalidArgument, "verb: required")
	}
	if req.GetResource() == "" {
		return nil, status.Error(codes.InvalidArgument, "resource: required")
	}
	a := &Attributes{User: UserFrom(ctx), Verb: req.GetVerb(), APIGroup: req.GetGroup(), Resource: req.GetResource(),
		Subresource: req.GetSubresource(), Namespace: req.GetNamespace(), Name: req.GetName()}
	if r := lookupResource(req.GetGroup(), req.GetResource()); r != nil {
		a.APIGroup, a.Resource, a.Kind = r.Group, r.Plural, r.Kind
	}
	dec, reason := d.authz.Authorize(ctx, a)
	return &kplanev1.CheckAccessResponse{Allowed: dec == Allow, Reason: reason}, nil
}

// lookupResource finds a served kind by kind name ("Pod"), plural,
// singular or short name ("pods", "pod", "po"), in group when one is
// given; nil for anything else (then the request is checked as given, as
// RBAC can grant resources kplane does not serve).
func lookupResource(group, name string) *kplanev1.Resource {
	for _, k := range kplanev1.Kinds() {
		r := k.Resource()
		if group != "" && r.Group != group {
			continue
		}
		if strings.EqualFold(r.Kind, name) || r.Plural == name || r.Singular == name {
			return r
		}
		for _, s := range r.ShortNames {
			if s == name {
				return r
			}
		}
	}
	return nil
}

// Evict implements kplanev1.ResourcesServer: create of pods/eviction,
// as RBAC names it. The deletion and the budget's status update the
// eviction makes are its own, as in Kubernetes: the evictor needs no
// delete on pods nor update on poddisruptionbudgets/status.
func (d *Decorator) Evict(ctx context.Context, req *kplanev1.EvictRequest) (*kplanev1.EvictResponse, error) {
	a := attributes(UserFrom(ctx), "create", "Pod", "eviction", req.GetNamespace(), req.GetName())
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	resp, err := d.next.Evict(ctx, req)
	d.done(a, err)
	return resp, err
}

// CreateToken implements kplanev1.ResourcesServer: create of
// serviceaccounts/token for the account named. A token bound to a Pod
// carries the pod's name, so the Node authorizer lets a node agent ask
// only for the pods bound to its node.
func (d *Decorator) CreateToken(ctx context.Context, req *kplanev1.CreateTokenRequest) (*kplanev1.CreateTokenResponse, error) {
	a := attributes(UserFrom(ctx), "create", "ServiceAccount", "token", req.GetNamespace(), req.GetServiceAccountName())
	if b := req.GetBoundObject(); b.GetKind() == "Pod" {
		a.BoundPod = b.GetName()
	}
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	resp, err := d.next.CreateToken(ctx, req)
	d.done(a, err)
	return resp, err
}
