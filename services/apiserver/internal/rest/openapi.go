package rest

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// openAPIDoc is one served OpenAPI v3 document and its ETag, the
// upper-case hex SHA-512 of its bytes as Kubernetes computes it.
type openAPIDoc struct {
	body []byte
	etag string
}

func newOpenAPIDoc(v any) (openAPIDoc, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return openAPIDoc{}, fmt.Errorf("encode the OpenAPI document: %w", err)
	}
	return openAPIDoc{body: body, etag: fmt.Sprintf("%X", sha512.Sum512(body))}, nil
}

// openAPI is the /openapi/v3 tree: the index and one document per
// group/version ("api/v1", "apis/apps/v1"). The documents depend only on
// the compiled-in kinds, so they are built once.
type openAPI struct {
	index openAPIDoc
	docs  map[string]openAPIDoc
}

// buildOpenAPI derives every document from the kinds served.
func buildOpenAPI(byGV map[string]map[string]*resource, version string) (*openAPI, error) {
	o := &openAPI{docs: map[string]openAPIDoc{}}
	paths := map[string]any{}
	for gv, resources := range byGV {
		key := "apis/" + gv
		if !strings.Contains(gv, "/") {
			key = "api/" + gv
		}
		doc, err := newOpenAPIDoc(groupVersionDocument(resources, version))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gv, err)
		}
		o.docs[key] = doc
		paths[key] = map[string]any{"serverRelativeURL": serverRelativeURL(key, doc.etag)}
	}
	index, err := newOpenAPIDoc(map[string]any{"paths": paths})
	if err != nil {
		return nil, err
	}
	o.index = index
	return o, nil
}

func serverRelativeURL(key, etag string) string {
	return "/openapi/v3/" + key + "?hash=" + etag
}

// groupVersionDocument is the OpenAPI v3 document of one group/version:
// a path per resource and verb, and the schemas they use.
func groupVersionDocument(resources map[string]*resource, version string) map[string]any {
	b := newSchemaBuilder()
	plurals := make([]string, 0, len(resources))
	for p := range resources {
		plurals = append(plurals, p)
	}
	sort.Strings(plurals)
	paths := map[string]any{}
	for _, p := range plurals {
		addResourcePaths(paths, resources[p], b.kind(resources[p]))
	}
	return map[string]any{
		"openapi":    "3.0.0",
		"info":       map[string]any{"title": "Kubernetes", "version": version},
		"paths":      paths,
		"components": map[string]any{"schemas": b.schemas},
	}
}

// Query and path parameters, inline in every operation so a client that
// looks for one on an operation (kubectl looks for fieldValidation on
// PATCH) finds it there.
func queryParam(name, typ, description string) map[string]any {
	return map[string]any{"name": name, "in": "query", "description": description, "schema": map[string]any{"type": typ, "uniqueItems": true}}
}

func pathParam(name, description string) map[string]any {
	return map[string]any{"name": name, "in": "path", "required": true, "description": description, "schema": map[string]any{"type": "string", "uniqueItems": true}}
}

var (
	paramNamespace = pathParam("namespace", "object name and auth scope, such as for teams and projects")
	paramName      = pathParam("name", "name of the object")
	paramPretty    = queryParam("pretty", "string", "If 'true', then the output is pretty printed.")
	writeParams    = []any{
		queryParam("dryRun", "string", "When present, indicates that modifications should not be persisted. The only value is All: the request is validated and admitted and answered with the object as it would be, and nothing is written."),
		queryParam("fieldManager", "string", "fieldManager is a name associated with the actor or entity that is making these changes (at most 128 characters)."),
		queryParam("force", "boolean", "force takes the fields of a server-side apply from their other managers instead of failing with a conflict; only for apply patches."),
		queryParam("fieldValidation", "string", "fieldValidation instructs the server on how to handle objects in the request containing unknown fields: Ignore drops them, Warn drops them with a Warning header per field, Strict (the default) fails the request with BadRequest naming them."),
	}
	listParams = []any{
		queryParam("allowWatchBookmarks", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
		queryParam("continue", "string", "The continue option is the token of the previous page of a chunked list."),
		queryParam("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields."),
		queryParam("labelSelector", "string", "A selector to restrict the list of returned objects by their labels."),
		queryParam("limit", "integer", "limit is the maximum number of objects to return; more are fetched with continue."),
		queryParam("resourceVersion", "string", "resourceVersion sets a constraint on the revision the list or watch is served from."),
		queryParam("resourceVersionMatch", "string", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
		queryParam("timeoutSeconds", "integer", "Timeout for the list/watch call."),
		queryParam("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."),
	}
	deleteParams = []any{
		queryParam("dryRun", "string", "When present, indicates that modifications should not be persisted. The only value is All: the request is validated and admitted and answered with the object as it would be, and nothing is written."),
		queryParam("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted."),
		queryParam("propagationPolicy", "string", "Whether and how garbage collection will be performed: Orphan, Background or Foreground."),
	}
)

// addResourcePaths adds the operations of one resource: the collection
// (list/watch, create, deletecollection), the object (get, replace,
// patch, delete), its status subresource, and for a namespaced kind the
// list across all namespaces.
func addResourcePaths(paths map[string]any, res *resource, component string) {
	prefix := "/api/" + res.Version
	if res.Group != "" {
		prefix = "/apis/" + res.Group + "/" + res.Version
	}
	scope := ""
	var scopeParams []any
	collection := prefix + "/" + res.Plural
	if res.info.Namespaced {
		scope = "Namespaced"
		scopeParams = []any{paramNamespace}
		collection = prefix + "/namespaces/{namespace}/" + res.Plural
		paths[prefix+"/"+res.Plural] = map[string]any{
			"parameters": []any{paramPretty},
			"get":        operation(res, "list", "list"+res.Kind+"ForAllNamespaces", "list or watch objects of kind "+res.Kind, listParams, nil, listResponses(component)),
		}
	}
	gvk := opName(res)
	objResponses := func(codes ...string) map[string]any {
		return responses(ref(component), codes...)
	}
	body := map[string]any{"required": true, "content": map[string]any{"*/*": map[string]any{"schema": ref(component)}}}
	patchTypes := map[string]any{
		jsonPatch:  map[string]any{"schema": ref(patchSchema)},
		mergePatch: map[string]any{"schema": ref(patchSchema)},
		// Server-side apply (apply.go).
		applyPatchType: map[string]any{"schema": ref(patchSchema)},
	}
	// A strategic merge patch needs Kubernetes' Go type for its merge keys
	// (patch.go); a kind without one is not offered it, so kubectl's apply
	// falls back to a merge patch rather than being refused.
	if _, err := kubeTypes.New(schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}); err == nil {
		patchTypes[strategicPatch] = map[string]any{"schema": ref(patchSchema)}
	}
	patchBody := map[string]any{"required": true, "content": patchTypes}
	paths[collection] = map[string]any{
		"parameters": append([]any{paramPretty}, scopeParams...),
		"get":        operation(res, "list", "list"+gvk+scope+res.Kind, "list or watch objects of kind "+res.Kind, listParams, nil, listResponses(component)),
		"post":       operation(res, "post", "create"+gvk+scope+res.Kind, "create a "+res.Kind, writeParams, body, objResponses("200", "201", "202")),
		"delete":     operation(res, "deletecollection", "deleteCollection"+gvk+scope+res.Kind, "delete collection of "+res.Kind, append(append([]any{}, listParams...), deleteParams...), deleteBody(), responses(ref(statusSchema), "200")),
	}
	item := collection + "/{name}"
	itemParams := append(append([]any{paramName}, scopeParams...), paramPretty)
	paths[item] = map[string]any{
		"parameters": itemParams,
		"get":        operation(res, "get", "read"+gvk+scope+res.Kind, "read the specified "+res.Kind, nil, nil, objResponses("200")),
		"put":        operation(res, "put", "replace"+gvk+scope+res.Kind, "replace the specified "+res.Kind, writeParams, body, objResponses("200", "201")),
		"patch":      operation(res, "patch", "patch"+gvk+scope+res.Kind, "partially update the specified "+res.Kind, writeParams, patchBody, objResponses("200", "201")),
		"delete":     operation(res, "delete", "delete"+gvk+scope+res.Kind, "delete a "+res.Kind, deleteParams, deleteBody(), responses(ref(statusSchema), "200", "202")),
	}
	if res.info.HasStatus() {
		paths[item+"/status"] = map[string]any{
			"parameters": itemParams,
			"get":        operation(res, "get", "read"+gvk+scope+res.Kind+"Status", "read status of the specified "+res.Kind, nil, nil, objResponses("200")),
			"put":        operation(res, "put", "replace"+gvk+scope+res.Kind+"Status", "replace status of the specified "+res.Kind, writeParams, body, objResponses("200", "201")),
			"patch":      operation(res, "patch", "patch"+gvk+scope+res.Kind+"Status", "partially update status of the specified "+res.Kind, writeParams, patchBody, objResponses("200", "201")),
		}
	}
}

// opName is the group/version part of an operationId, as Kubernetes
// spells it: CoreV1, AppsV1, CoordinationV1.
func opName(res *resource) string {
	g := "core"
	if res.Group != "" {
		g, _, _ = strings.Cut(res.Group, ".")
	}
	return strings.ToUpper(g[:1]) + g[1:] + strings.ToUpper(res.Version[:1]) + res.Version[1:]
}

func operation(res *resource, action, id, description string, params []any, body map[string]any, resp map[string]any) map[string]any {
	op := map[string]any{
		"operationId": id,
		"description": description,
		"tags":        []any{strings.ToLower(opName(res))},
		"responses":   resp,
		extAction:     action,
		// One object, not a list, on operations: that is where kubectl
		// looks for the kind a PATCH serves.
		extGVK: map[string]any{"group": res.Group, "version": res.Version, "kind": res.Kind},
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if body != nil {
		op["requestBody"] = body
	}
	return op
}

func deleteBody() map[string]any {
	return map[string]any{"content": map[string]any{"*/*": map[string]any{"schema": ref(deleteOptsSchema)}}}
}

func listResponses(schema string) map[string]any {
	r := responses(ref(schema+"List"), "200")
	ok := r["200"].(map[string]any)["content"].(map[string]any)
	ok["application/json;stream=watch"] = map[string]any{"schema": ref(schema + "List")}
	return r
}

// responses answers each code with the schema in JSON and YAML, and
// 401 with nothing, as Kubernetes' documents do.
func responses(schema map[string]any, codes ...string) map[string]any {
	out := map[string]any{"401": map[string]any{"description": "Unauthorized"}}
	for _, c := range codes {
		out[c] = map[string]any{
			"description": http.StatusText(code(c)),
			"content": map[string]any{
				"application/json": map[string]any{"schema": schema},
				"application/yaml": map[string]any{"schema": schema},
			},
		}
	}
	return out
}

// serveOpenAPIIndex answers GET /openapi/v3: the group/version paths with
// the hash-addressed URL of each document.
func (h *Handler) serveOpenAPIIndex(w http.ResponseWriter, r *http.Request) {
	if !acceptsJSON(r) {
		writeStatus(w, notAcceptable())
		return
	}
	serveOpenAPIBytes(w, r, h.openapi.index)
}

// serveOpenAPIDoc answers GET /openapi/v3/<api/v1|apis/g/v>. With the
// current hash the answer is immutable and cached for a year, as
// Kubernetes serves it; a stale hash is redirected to the current one.
func (h *Handler) serveOpenAPIDoc(w http.ResponseWriter, r *http.Request) {
	key := strings.Trim(r.PathValue("gv"), "/")
	doc, ok := h.openapi.docs[key]
	if !ok {
		writeNotFoundPath(w, r)
		return
	}
	if !acceptsJSON(r) {
		writeStatus(w, notAcceptable())
		return
	}
	if hash := r.URL.Query().Get("hash"); hash != "" {
		if hash != doc.etag {
			http.Redirect(w, r, serverRelativeURL(key, doc.etag), http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Vary", "Accept")
		w.Header().Set("Cache-Control", "public, immutable")
		w.Header().Set("Expires", time.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat))
	}
	serveOpenAPIBytes(w, r, doc)
}

// code is an HTTP status code written as a responses key ("201").
func code(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// serveOpenAPIBytes writes a document with its ETag, answering a matching
// If-None-Match with 304.
func serveOpenAPIBytes(w http.ResponseWriter, r *http.Request, doc openAPIDoc) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", `"`+doc.etag+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(doc.body))
}

// acceptsJSON reports whether the request takes JSON; only JSON is served
// (Kubernetes also offers the documents as protobuf).
func acceptsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return true
	}
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch mt {
		case "application/json", "application/*", "*/*":
			return true
		}
	}
	return false
}

func notAcceptable() *metav1.Status {
	return newStatus(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, "only application/json is served for the OpenAPI documents")
}
