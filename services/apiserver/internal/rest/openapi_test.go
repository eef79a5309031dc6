package rest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	clientdiscovery "k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi3"
	restclient "k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/kplane/kplane/pkg/apijson"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openAPIServer serves the REST handler's paths over a real socket. The
// OpenAPI documents do not call the Resources service, so none is given.
func openAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	New(nil, Version{GitVersion: "v1.32.0-kplane"}, hclog.NewNullLogger()).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// openAPIRoot reads the documents the way kubectl does: client-go's
// OpenAPI v3 client over the discovery client.
func openAPIRoot(t *testing.T, srv *httptest.Server) openapi3.Root {
	t.Helper()
	dc, err := clientdiscovery.NewDiscoveryClientForConfig(&restclient.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return openapi3.NewRoot(dc.OpenAPIV3())
}

func gvkExtension(t *testing.T, ext spec.Extensions) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	raw, ok := ext[extGVK]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var list []schema.GroupVersionKind
	if err := json.Unmarshal(b, &list); err == nil {
		return list
	}
	var one schema.GroupVersionKind
	if err := json.Unmarshal(b, &one); err != nil {
		t.Fatalf("%s is neither a GVK nor a list of them: %s", extGVK, b)
	}
	return append(out, one)
}

// TestOpenAPIEveryKind asserts that every kind of the table has, with no
// hand-written schema, a component carrying its GVK with metadata, spec
// and the fields of its message, and a PATCH operation that names the
// kind and takes fieldValidation: what kubectl checks before it leaves
// validation to the server.
func TestOpenAPIEveryKind(t *testing.T) {
	srv := openAPIServer(t)
	root := openAPIRoot(t, srv)
	for _, k := range kplanev1.Kinds() {
		res := k.Resource()
		gvk := schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}
		doc, err := root.GVSpec(gvk.GroupVersion())
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		var found *spec.Schema
		for _, s := range doc.Components.Schemas {
			for _, g := range gvkExtension(t, s.Extensions) {
				if g == gvk {
					found = s
				}
			}
		}
		if found == nil {
			t.Errorf("%s: no schema carries %s %v", res.Kind, extGVK, gvk)
			continue
		}
		md := k.New().ProtoReflect().Descriptor()
		for _, f := range []string{"apiVersion", "kind", "metadata"} {
			if _, ok := found.Properties[f]; !ok {
				t.Errorf("%s: schema has no %q", res.Kind, f)
			}
		}
		for i := 0; i < md.Fields().Len(); i++ {
			if _, ok := found.Properties[md.Fields().Get(i).JSONName()]; !ok {
				t.Errorf("%s: schema lacks field %s", res.Kind, md.Fields().Get(i).JSONName())
			}
		}
		if !patchTakesFieldValidation(doc, gvk) {
			t.Errorf("%s: no PATCH operation with %s and the fieldValidation query parameter", res.Kind, extGVK)
		}
	}
}

func patchTakesFieldValidation(doc *spec3.OpenAPI, gvk schema.GroupVersionKind) bool {
	for _, p := range doc.Paths.Paths {
		op := p.Patch
		if op == nil {
			continue
		}
		g, ok := op.Extensions[extGVK].(map[string]any)
		if !ok || g["group"] != gvk.Group || g["version"] != gvk.Version || g["kind"] != gvk.Kind {
			continue
		}
		_, smp := op.RequestBody.Content[strategicPatch]
		if _, err := kubeTypes.New(gvk); (err == nil) != smp {
			return false // strategic merge is offered exactly where the server applies it
		}
		for _, param := range op.Parameters {
			if param.Name == "fieldValidation" && param.In == "query" {
				return true
			}
		}
	}
	return false
}

// TestOpenAPISchemaShapes checks the schemas against the JSON kplane
// serves: Kubernetes' special types, maps, lists with their merge
// extensions, enums of proto enums and the proto comments as docs.
func TestOpenAPISchemaShapes(t *testing.T) {
	root := openAPIRoot(t, openAPIServer(t))
	core, err := root.GVSpec(schema.GroupVersion{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	apps, err := root.GVSpec(schema.GroupVersion{Group: "apps", Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	prop := func(doc *spec3.OpenAPI, msg, field string) spec.Schema {
		t.Helper()
		s, ok := doc.Components.Schemas[msg]
		if !ok {
			t.Fatalf("no schema %s", msg)
		}
		p, ok := s.Properties[field]
		if !ok {
			t.Fatalf("%s has no property %s", msg, field)
		}
		return p
	}
	containers := prop(core, "kplane.v1.PodSpec", "containers")
	if containers.Type[0] != "array" || containers.Items.Schema.Ref.String() != "#/components/schemas/kplane.v1.Container" ||
		containers.Extensions[extMergeKey] != "name" || containers.Extensions[extPatchStrategy] != "merge" ||
		containers.Extensions[extListType] != "map" || !reflect.DeepEqual(containers.Extensions[extListMapKeys], []any{"name"}) {
		t.Errorf("PodSpec.containers: %+v %v", containers.Type, containers.Extensions)
	}
	if p := prop(core, "kplane.v1.Container", "ports"); p.Extensions[extMergeKey] != "containerPort" {
		t.Errorf("Container.ports merge key: %v", p.Extensions)
	}
	if p := prop(core, "kplane.v1.Container", "command"); p.Extensions[extListType] != "atomic" || p.Extensions[extMergeKey] != nil {
		t.Errorf("Container.command (no patch strategy): %v", p.Extensions)
	}
	if p := prop(core, "kplane.v1.ObjectMeta", "finalizers"); p.Extensions[extListType] != "set" || p.Extensions[extPatchStrategy] != "merge" {
		t.Errorf("ObjectMeta.finalizers: %v", p.Extensions)
	}
	if p := prop(core, "kplane.v1.ObjectMeta", "creationTimestamp"); p.Type[0] != "string" || p.Format != "date-time" {
		t.Errorf("creationTimestamp: %v %q", p.Type, p.Format)
	}
	if p := prop(core, "kplane.v1.ObjectMeta", "labels"); p.Type[0] != "object" || p.AdditionalProperties.Schema.Type[0] != "string" {
		t.Errorf("labels: %+v", p)
	}
	if p := prop(core, "kplane.v1.ResourceRequirements", "limits"); p.AdditionalProperties.Schema.Type[0] != "string" {
		t.Errorf("limits (quantities as strings): %+v", p)
	}
	if p := prop(core, "kplane.v1.ObjectMeta", "generation"); p.Type[0] != "integer" || p.Format != "int64" {
		t.Errorf("generation: %v %q", p.Type, p.Format)
	}
	if p := prop(core, "kplane.v1.Secret", "data"); p.AdditionalProperties.Schema.Format != "byte" {
		t.Errorf("Secret.data: %+v", p)
	}
	surge := prop(apps, "kplane.v1.RollingUpdateDeployment", "maxSurge")
	if surge.Extensions[extIntOrString] != true || len(surge.Type) != 0 {
		t.Errorf("maxSurge: %v %v", surge.Type, surge.Extensions)
	}
	nodeName := prop(core, "kplane.v1.PodSpec", "nodeName")
	if nodeName.Description != "nodeName is set by the scheduler when it binds the pod; immutable once set." {
		t.Errorf("PodSpec.nodeName description: %q", nodeName.Description)
	}
	strategy := prop(apps, "kplane.v1.DeploymentSpec", "strategy")
	if len(strategy.AllOf) != 1 || strategy.AllOf[0].Ref.String() != "#/components/schemas/kplane.v1.DeploymentStrategy" {
		t.Errorf("DeploymentSpec.strategy: %+v", strategy)
	}
	if _, ok := core.Components.Schemas["kplane.v1.Deployment"]; ok {
		t.Error("the core document holds apps' Deployment")
	}
	if _, ok := core.Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}/status"]; !ok {
		t.Error("no pods/status path")
	}
	if _, ok := core.Paths.Paths["/api/v1/nodes/{name}"]; !ok {
		t.Error("no path for the cluster-scoped nodes")
	}
	if p, ok := apps.Paths.Paths["/apis/apps/v1/replicasets"]; !ok || p.Get == nil || p.Get.Extensions[extAction] != "list" {
		t.Error("no list of replicasets across namespaces")
	}
}

// TestOpenAPIMergeKeysAgree walks every kind's message and asserts that
// the patch strategy and merge key kubectl reads from the document for
// each field are the ones the server's strategic merge patch reads from
// k8s.io/api's struct tags.
func TestOpenAPIMergeKeysAgree(t *testing.T) {
	root := openAPIRoot(t, openAPIServer(t))
	checked := 0
	for _, k := range kplanev1.Kinds() {
		res := k.Resource()
		gvk := schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}
		obj, err := kubeTypes.New(gvk)
		if err != nil {
			continue // a kind without a Kubernetes Go type has no tags to agree with
		}
		doc, err := root.GVSpec(gvk.GroupVersion())
		if err != nil {
			t.Fatal(err)
		}
		schemas := doc.Components.Schemas
		name := string(k.New().ProtoReflect().Descriptor().FullName())
		fromDoc := strategicpatch.PatchMetaFromOpenAPIV3{SchemaList: schemas, Schema: schemas[name]}
		fromStruct, err := strategicpatch.NewPatchMetaFromStruct(obj)
		if err != nil {
			t.Fatal(err)
		}
		checked += compareMergeMeta(t, res.Kind, k.New().ProtoReflect().Descriptor(), fromDoc, fromStruct, map[string]bool{})
	}
	if checked < 20 {
		t.Errorf("only %d list fields compared; the walk is broken", checked)
	}
}

func compareMergeMeta(t *testing.T, path string, md protoreflect.MessageDescriptor, doc, st strategicpatch.LookupPatchMeta, seen map[string]bool) int {
	if seen[string(md.FullName())+"@"+path] || strings.Count(path, ".") > 12 {
		return 0
	}
	seen[string(md.FullName())+"@"+path] = true
	n := 0
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		key := fd.JSONName()
		p := path + "." + key
		if fd.IsMap() || apijson.IsTimestamp(fd) || apijson.IsIntOrString(fd) {
			continue
		}
		if fd.IsList() {
			stSub, stMeta, err := st.LookupPatchMetadataForSlice(key)
			if err != nil {
				continue // not a field of Kubernetes' type
			}
			docSub, docMeta, err := doc.LookupPatchMetadataForSlice(key)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			n++
			if docMeta.GetPatchMergeKey() != stMeta.GetPatchMergeKey() || strings.Join(docMeta.GetPatchStrategies(), ",") != strings.Join(stMeta.GetPatchStrategies(), ",") {
				t.Errorf("%s: document merges by %q %v, struct tags by %q %v", p,
					docMeta.GetPatchMergeKey(), docMeta.GetPatchStrategies(), stMeta.GetPatchMergeKey(), stMeta.GetPatchStrategies())
			}
			if fd.Kind() == protoreflect.MessageKind {
				n += compareMergeMeta(t, p+"[]", fd.Message(), docSub, stSub, seen)
			}
			continue
		}
		if fd.Kind() != protoreflect.MessageKind {
			continue
		}
		stSub, _, err := st.LookupPatchMetadataForStruct(key)
		if err != nil {
			continue
		}
		docSub, _, err := doc.LookupPatchMetadataForStruct(key)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		n += compareMergeMeta(t, p, fd.Message(), docSub, stSub, seen)
	}
	return n
}

// TestOpenAPIHTTP checks the caching Kubernetes' clients rely on: the
// index names each document by its hash, a hashed URL is immutable, the
// ETag answers If-None-Match with 304, a stale hash is redirected.
func TestOpenAPIHTTP(t *testing.T) {
	srv := openAPIServer(t)
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	idx := get("/openapi/v3")
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.NewDecoder(idx.Body).Decode(&index); err != nil || idx.StatusCode != 200 {
		t.Fatalf("index: %d %v", idx.StatusCode, err)
	}
	// One document per group/version some kind is served under.
	want := map[string]bool{}
	for _, kind := range kplanev1.KindNames() {
		gv := kplanev1.APIVersion(kind)
		if strings.Contains(gv, "/") {
			want["apis/"+gv] = true
		} else {
			want["api/"+gv] = true
		}
	}
	for key := range want {
		if !strings.HasPrefix(index.Paths[key].ServerRelativeURL, "/openapi/v3/"+key+"?hash=") {
			t.Errorf("index %s: %q", key, index.Paths[key].ServerRelativeURL)
		}
	}
	if len(index.Paths) != len(want) || !want["apis/apps/v1"] || !want["api/v1"] {
		t.Errorf("index has %d paths, want %d: %v", len(index.Paths), len(want), index.Paths)
	}
	if etag := idx.Header.Get("ETag"); etag == "" || get("/openapi/v3", "If-None-Match", etag).StatusCode != http.StatusNotModified {
		t.Errorf("index ETag %q does not answer If-None-Match with 304", etag)
	}

	u := index.Paths["apis/apps/v1"].ServerRelativeURL
	hash := u[strings.Index(u, "hash=")+len("hash="):]
	doc := get(u)
	if doc.StatusCode != 200 || doc.Header.Get("ETag") != `"`+hash+`"` || doc.Header.Get("Cache-Control") != "public, immutable" ||
		doc.Header.Get("Expires") == "" || doc.Header.Get("Content-Type") != "application/json" {
		t.Errorf("hashed document: %d %v", doc.StatusCode, doc.Header)
	}
	body, err := io.ReadAll(doc.Body)
	if err != nil || !json.Valid(body) {
		t.Fatalf("document body: %v", err)
	}
	if r := get("/openapi/v3/apis/apps/v1", "If-None-Match", `"`+hash+`"`); r.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %d", r.StatusCode)
	}
	if r := get("/openapi/v3/apis/apps/v1"); r.StatusCode != 200 || r.Header.Get("Cache-Control") != "" {
		t.Errorf("unhashed document: %d Cache-Control %q", r.StatusCode, r.Header.Get("Cache-Control"))
	}
	if r := get("/openapi/v3/apis/apps/v1?hash=0123"); r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != u {
		t.Errorf("stale hash: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get("/openapi/v3/apis/nope/v1"); r.StatusCode != http.StatusNotFound {
		t.Errorf("unknown group/version: %d", r.StatusCode)
	}
	if r := get(u, "Accept", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"); r.StatusCode != http.StatusNotAcceptable {
		t.Errorf("protobuf only: %d", r.StatusCode)
	}
}

// BenchmarkBuildOpenAPI measures what building every document costs the
// apiserver at start, and prints the documents' sizes.
func BenchmarkBuildOpenAPI(b *testing.B) {
	h := New(nil, Version{GitVersion: "v1.32.0-kplane"}, hclog.NewNullLogger())
	total := 0
	for key, d := range h.openapi.docs {
		b.Logf("%s: %d bytes", key, len(d.body))
		total += len(d.body)
	}
	b.Logf("all documents: %d bytes", total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := buildOpenAPI(h.byGV, "v1.32.0-kplane"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrackUpdate measures recording one ReplicaSet write in
// managedFields (what every REST create, PUT and patch now pays).
func BenchmarkTrackUpdate(b *testing.B) {
	h := New(nil, Version{GitVersion: "v1.32.0-kplane"}, hclog.NewNullLogger())
	req := request{res: h.byGV["apps/v1"]["replicasets"], namespace: "default", name: "web"}
	obj, err := apijson.ObjectFromMap("ReplicaSet", map[string]any{
		"metadata": map[string]any{"name": "web", "namespace": "default", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"replicas": json.Number("2"),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx"}}},
			},
		},
	}, apijson.DecodeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/?fieldManager=bench", nil)
	if len(h.trackUpdate(r, req, nil, obj).Meta().GetManagedFields()) != 1 {
		b.Fatal("no managedFields entry recorded")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.trackUpdate(r, req, nil, obj)
	}
}
