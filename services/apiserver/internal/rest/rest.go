// Package rest is the apiserver's Kubernetes REST front end: /version,
// discovery and the resource paths (/api/v1/..., /apis/<group>/<version>/...)
// that kubectl and client-go use. It has no semantics of its own: every
// request is translated to a call of the same kplane.v1.Resources service
// the gRPC clients use, made in process, so validation, the store, the
// watch cache and errors are the gRPC side's. This package only converts
// between Kubernetes' URLs and JSON and the service's messages.
package rest

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/go-hclog"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/authz"
)

// Version is what GET /version reports.
type Version struct {
	// GitVersion is kplane's own version.
	GitVersion string
}

// Handler serves the REST API over a Resources service.
type Handler struct {
	api     kplanev1.ResourcesServer
	log     hclog.Logger
	version Version
	// byGV maps a group/version to its resources by plural name.
	byGV map[string]map[string]*resource
	disc *discovery
	// openapi holds the /openapi/v3 documents.
	openapi *openAPI
	// appliers are server-side apply's field managers, by kind.
	appliers appliers
	// authz checks the subresources only REST serves (log, exec,
	// portforward, eviction, binding); nil when api does not authorize.
	authz SubresourceAuthorizer
}

// SubresourceAuthorizer is implemented by a Resources service that
// authorizes requests (the authz decorator): the REST side asks it about
// what it serves without a Resources method of its own.
type SubresourceAuthorizer interface {
	AuthorizeSubresource(ctx context.Context, verb, kind, subresource, namespace, name string) error
}

// authorizeSub asks h.authz, when there is one.
func (h *Handler) authorizeSub(ctx context.Context, verb, kind, sub, ns, name string) error {
	if h.authz == nil {
		return nil
	}
	return h.authz.AuthorizeSubresource(ctx, verb, kind, sub, ns, name)
}

// resource is one kind as the REST API serves it.
type resource struct {
	info *kplanev1.KindInfo
	*kplanev1.Resource
}

// New builds the handler over api, which must be the service the gRPC
// server registers.
func New(api kplanev1.ResourcesServer, v Version, log hclog.Logger) *Handler {
	h := &Handler{api: api, log: log, version: v, byGV: map[string]map[string]*resource{}}
	h.authz, _ = api.(SubresourceAuthorizer)
	for _, k := range kplanev1.Kinds() {
		r := &resource{info: k, Resource: k.Resource()}
		gv := r.GroupVersion()
		if h.byGV[gv] == nil {
			h.byGV[gv] = map[string]*resource{}
		}
		h.byGV[gv][r.Plural] = r
	}
	h.disc = newDiscovery(h.byGV)
	oa, err := buildOpenAPI(h.byGV, v.GitVersion)
	if err != nil {
		// The documents are maps of strings built from the compiled-in
		// kinds; encoding them cannot fail at run time.
		panic(fmt.Sprintf("rest: build the OpenAPI documents: %v", err))
	}
	h.openapi = oa
	if h.appliers, err = newAppliers(h.byGV); err != nil {
		// Built from the same static schemas as the documents.
		panic(fmt.Sprintf("rest: build the server-side apply field managers: %v", err))
	}
	return h
}

// Register adds the REST paths to mux. More specific patterns registered
// on the same mux (the service and pod proxy) keep precedence.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /version", h.serveVersion)
	mux.HandleFunc("GET /version/{$}", h.serveVersion)
	mux.HandleFunc("/api", h.serveAPI)
	mux.HandleFunc("/api/", h.serveAPI)
	mux.HandleFunc("/apis", h.serveAPI)
	mux.HandleFunc("/apis/", h.serveAPI)
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews", h.serveSelfSubjectAccessReview)
	mux.HandleFunc("GET /openapi/v3", h.serveOpenAPIIndex)
	mux.HandleFunc("GET /openapi/v3/{gv...}", h.serveOpenAPIDoc)
}

// request is a resource request decoded from its URL.
type request struct {
	res         *resource
	namespace   string
	name        string
	subresource string
}

// serveAPI routes everything under /api and /apis.
func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request) {
	segs := splitPath(r.URL.Path)
	var gv string
	var rest []string
	switch {
	case segs[0] == "api" && len(segs) == 1:
		h.disc.serveCoreVersions(w, r)
		return
	case segs[0] == "api":
		gv, rest = segs[1], segs[2:]
	case segs[0] == "apis" && len(segs) == 1:
		h.disc.serveGroups(w, r)
		return
	case segs[0] == "apis" && len(segs) == 2:
		h.disc.serveGroup(w, r, segs[1])
		return
	default:
		gv, rest = segs[1]+"/"+segs[2], segs[3:]
	}
	resources, ok := h.byGV[gv]
	if !ok {
		if _, virtual := h.disc.resources[gv]; virtual && len(rest) == 0 {
			h.disc.serveResources(w, r, gv)
			return
		}
		writeNotFoundPath(w, r)
		return
	}
	if len(rest) == 0 {
		h.disc.serveResources(w, r, gv)
		return
	}
	req := request{}
	// namespaces/<ns>/<plural>/... is a namespaced resource; anything else
	// under namespaces/<name> (status) is the Namespace object's own.
	if rest[0] == "namespaces" && len(rest) >= 3 {
		if res, ok := resources[rest[2]]; ok && res.info.Namespaced {
			req.namespace = rest[1]
			rest = rest[2:]
		}
	}
	res, ok := resources[rest[0]]
	if !ok || len(rest) > 3 || (req.namespace != "" && !res.info.Namespaced) {
		writeNotFoundPath(w, r)
		return
	}
	req.res = res
	if len(rest) >= 2 {
		req.name = rest[1]
	}
	if len(rest) == 3 {
		req.subresource = rest[2]
		if (req.subresource != "status" || !res.info.HasStatus()) && subresourceOf(res.info, req.subresource) == nil {
			writeNotFoundPath(w, r)
			return
		}
	}
	// A namespaced object is addressed in its namespace: by name or to
	// create it, the path must name one (lists across namespaces need not).
	if res.info.Namespaced && req.namespace == "" && (req.name != "" || r.Method == http.MethodPost) {
		writeNotFoundPath(w, r)
		return
	}
	h.serveResource(w, r, req)
}

func (h *Handler) serveResource(w http.ResponseWriter, r *http.Request, req request) {
	collection := req.name == ""
	if sub := subresourceOf(req.res.info, req.subresource); sub != nil {
		// scale and eviction go through GetScale/UpdateScale and Evict,
		// authorized there; the others have no Resources method of their own.
		if sub.name != "scale" && sub.name != "eviction" {
			verb := "get"
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				verb = "create"
			}
			if err := h.authorizeSub(r.Context(), verb, req.res.Kind, sub.name, req.namespace, req.name); err != nil {
				writeStatus(w, statusFor(err, req))
				return
			}
		} else if r.Method == http.MethodPatch {
			r = r.WithContext(authz.WithVerb(r.Context(), "patch"))
		}
		sub.serve(h, w, r, req)
		return
	}
	// The decorator learns the verb the client used where the method it
	// ends up in does not say it.
	switch {
	case r.Method == http.MethodPatch:
		r = r.WithContext(authz.WithVerb(r.Context(), "patch"))
	case r.Method == http.MethodDelete && collection:
		r = r.WithContext(authz.WithVerb(r.Context(), "deletecollection"))
	}
	switch {
	case r.Method == http.MethodGet && collection && isWatch(r):
		h.watch(w, r, req)
	case r.Method == http.MethodGet && collection:
		h.list(w, r, req)
	case r.Method == http.MethodGet:
		h.get(w, r, req)
	case r.Method == http.MethodPost && collection:
		h.create(w, r, req)
	case r.Method == http.MethodPut && !collection:
		h.update(w, r, req)
	case r.Method == http.MethodPatch && !collection:
		h.patch(w, r, req)
	case r.Method == http.MethodDelete && collection:
		h.deleteCollection(w, r, req)
	case r.Method == http.MethodDelete && req.subresource == "":
		h.delete(w, r, req)
	default:
		writeStatus(w, methodNotAllowed(r))
	}
}

func isWatch(r *http.Request) bool {
	v := r.URL.Query().Get("watch")
	return v == "true" || v == "1"
}

// splitPath returns the path's non-empty segments; the first is "api" or
// "apis" (the only prefixes routed here).
func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
