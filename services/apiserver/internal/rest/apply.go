package rest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/yaml"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// applyPatchType is server-side apply's media type.
const applyPatchType = "application/apply-patch+yaml"

// appliers holds one field manager per kind, built over the OpenAPI
// schemas the documents serve (structured-merge-diff types them from the
// same merge keys and list types kubectl reads).
type appliers map[schema.GroupVersionKind]*managedfields.FieldManager

func newAppliers(byGV map[string]map[string]*resource) (appliers, error) {
	b := newSchemaBuilder()
	var kinds []schema.GroupVersionKind
	for _, resources := range byGV {
		for _, res := range resources {
			b.kind(res)
			kinds = append(kinds, schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind})
		}
	}
	raw, err := json.Marshal(b.schemas)
	if err != nil {
		return nil, fmt.Errorf("encode the schemas: %w", err)
	}
	var models map[string]*spec.Schema
	if err := json.Unmarshal(raw, &models); err != nil {
		return nil, fmt.Errorf("read the schemas back: %w", err)
	}
	tc, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		return nil, fmt.Errorf("type the schemas for server-side apply: %w", err)
	}
	out := appliers{}
	for _, gvk := range kinds {
		fm, err := managedfields.NewDefaultFieldManager(tc, oneVersion{}, noDefaults{}, unstructuredCreater{}, gvk, gvk.GroupVersion(), "", nil)
		if err != nil {
			return nil, fmt.Errorf("field manager of %s: %w", gvk, err)
		}
		out[gvk] = fm
	}
	return out, nil
}

// oneVersion converts nothing: every kind is served in exactly one
// version, so the field manager's hub is the object's own version.
type oneVersion struct{}

func (oneVersion) Convert(in, out, _ any) error {
	return fmt.Errorf("convert %T to %T: kplane serves one version per kind", in, out)
}

func (oneVersion) ConvertToVersion(in runtime.Object, _ runtime.GroupVersioner) (runtime.Object, error) {
	return in, nil
}

func (oneVersion) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// noDefaults leaves defaulting to the store, which defaults every write
// (pkg/strategy) after the merge.
type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

type unstructuredCreater struct{}

func (unstructuredCreater) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// apply is server-side apply: the applied configuration is merged into
// the live object (or an empty one, creating it) by structured-merge-diff,
// which records in metadata.managedFields what fieldManager owns and
// refuses, unless force=true, to change a field another manager owns
// (409 Conflict naming the manager and the field). The result is written
// with compare-and-swap like any patch and retried on a lost race.
func (h *Handler) apply(w http.ResponseWriter, r *http.Request, req request) {
	q := r.URL.Query()
	manager := q.Get("fieldManager")
	if manager == "" {
		writeStatus(w, badRequest("PATCH requests with apply content type require fieldManager"))
		return
	}
	force := false
	if v := q.Get("force"); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			writeStatus(w, badRequest("force: Invalid value: %q: must be true or false", v))
			return
		}
		force = f
	}
	if req.subresource != "" {
		// Status has no field manager of its own here; merging the whole
		// object and keeping only its status would record wrong owners.
		writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			"server-side apply is not supported on the %s subresource; apply the object, or patch %s/%s with %s", req.subresource, req.res.Plural, req.subresource, mergePatch))
		return
	}
	gvk := schema.GroupVersionKind{Group: req.res.Group, Version: req.res.Version, Kind: req.res.Kind}
	fm, ok := h.appliers[gvk]
	if !ok {
		writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "server-side apply is not supported for %s", req.res.GroupResource()))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		writeStatus(w, badRequest("read the request body: %v", err))
		return
	}
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		writeStatus(w, badRequest("decode the applied configuration as YAML: %v", err))
		return
	}
	applied, s := decodeMap(js)
	if s != nil {
		writeStatus(w, s)
		return
	}
	if applied["apiVersion"] != req.res.GroupVersion() || applied["kind"] != req.res.Kind {
		writeStatus(w, badRequest("the applied configuration must name apiVersion %q and kind %q", req.res.GroupVersion(), req.res.Kind))
		return
	}
	// The configuration must be a valid object of the kind on its own
	// (unknown fields refused as fieldValidation asks); checked on a copy.
	check, s := decodeMap(js)
	if s != nil {
		writeStatus(w, s)
		return
	}
	if _, warnings, s := objectFromMap(check, req, q.Get("fieldValidation")); s != nil {
		writeStatus(w, s)
		return
	} else {
		setWarnings(w, warnings)
	}
	if name, _, _ := unstructured.NestedString(applied, "metadata", "name"); name != req.name {
		writeStatus(w, badRequest("metadata.name: Invalid value: %q: the applied configuration must name the object on the URL (%s)", name, req.name))
		return
	}
	for attempt := 1; ; attempt++ {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(gvk)
		exists := true
		cur, err := h.api.Get(r.Context(), &kplanev1.GetRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name})
		switch {
		case status.Code(err) == codes.NotFound:
			exists = false
		case err != nil:
			writeStatus(w, statusFor(err, req))
			return
		default:
			m, err := objectMap(cur.GetObject())
			if err != nil {
				writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
				return
			}
			raw, err := json.Marshal(m)
			if err != nil {
				writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
				return
			}
			live.Object = cloneMap(raw)
			live.SetAPIVersion(req.res.GroupVersion())
			live.SetKind(req.res.Kind)
		}
		merged, err := fm.Apply(live, &unstructured.Unstructured{Object: cloneMap(js)}, manager, force)
		if err != nil {
			writeStatus(w, applyStatus(err))
			return
		}
		out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(merged)
		if err != nil {
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
			return
		}
		raw, err := json.Marshal(out)
		if err != nil {
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
			return
		}
		m, s := decodeMap(raw)
		if s != nil {
			writeStatus(w, s)
			return
		}
		obj, _, s := objectFromMap(m, req, "Strict")
		if s != nil {
			writeStatus(w, s)
			return
		}
		if !exists {
			resp, err := h.api.Create(r.Context(), &kplanev1.CreateRequest{Object: obj, DryRun: isDryRun(r)})
			if status.Code(err) == codes.AlreadyExists && attempt < patchAttempts {
				continue // created meanwhile: apply to it
			}
			if err != nil {
				writeStatus(w, statusFor(err, req))
				return
			}
			h.writeObject(w, r, http.StatusCreated, resp.GetObject())
			return
		}
		written, err := h.put(r, req, obj)
		if status.Code(err) == codes.Aborted && attempt < patchAttempts {
			continue
		}
		if err != nil {
			writeStatus(w, statusFor(err, req))
			return
		}
		h.writeObject(w, r, http.StatusOK, written)
		return
	}
}

// applyStatus is the Status of a failed merge: structured-merge-diff's
// conflicts come as Kubernetes' 409 Conflict Status already.
func applyStatus(err error) *metav1.Status {
	if se, ok := err.(apierrors.APIStatus); ok {
		st := se.Status()
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"} // kubectl reads a body as a Status by them
		return &st
	}
	return newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the applied configuration could not be merged: %v", err)
}

// cloneMap decodes JSON afresh, so each use gets its own copy to change,
// with numbers as int64 or float64 as unstructured objects hold them.
func cloneMap(js []byte) map[string]any {
	var m map[string]any
	_ = utiljson.Unmarshal(js, &m) // js was decoded once already
	return m
}

// trackUpdate records a create, update or patch in obj's managedFields as
// an Update by the request's field manager (fieldManager, else the
// client's user-agent name, as Kubernetes derives it), so fields written
// without apply have owners too and a later apply by someone else
// conflicts with them. live is the current object, nil for a create;
// managedFields the request leaves out are kept from it. Status writes
// are not tracked. Tracking never fails a write: an object the schemas
// cannot type keeps the managedFields it has.
func (h *Handler) trackUpdate(r *http.Request, req request, live, obj *kplanev1.Object) *kplanev1.Object {
	gvk := schema.GroupVersionKind{Group: req.res.Group, Version: req.res.Version, Kind: req.res.Kind}
	fm, ok := h.appliers[gvk]
	if !ok || req.subresource != "" {
		return obj
	}
	manager := r.URL.Query().Get("fieldManager")
	if manager == "" {
		manager, _, _ = strings.Cut(r.UserAgent(), "/")
	}
	liveU, err := unstructuredOf(live, gvk)
	if err != nil {
		h.log.Warn("managedFields not updated", "kind", req.res.Kind, "name", req.name, "error", err)
		return obj
	}
	newU, err := unstructuredOf(obj, gvk)
	if err != nil {
		h.log.Warn("managedFields not updated", "kind", req.res.Kind, "name", req.name, "error", err)
		return obj
	}
	tracked, err := fm.Update(liveU, newU, manager)
	if err != nil {
		h.log.Warn("managedFields not updated", "kind", req.res.Kind, "name", req.name, "error", err)
		return obj
	}
	// The field manager changes only metadata.managedFields, so only they
	// are carried back onto (a copy of) the object, rather than decoding
	// the whole result again.
	acc, err := apimeta.Accessor(tracked)
	if err != nil {
		h.log.Warn("managedFields not updated", "kind", req.res.Kind, "name", req.name, "error", err)
		return obj
	}
	entries, err := managedFieldsProto(acc.GetManagedFields())
	if err != nil {
		h.log.Warn("managedFields not updated", "kind", req.res.Kind, "name", req.name, "error", err)
		return obj
	}
	out := proto.Clone(obj).(*kplanev1.Object)
	out.Meta().ManagedFields = entries
	return out
}

// unstructuredOf is o (nil: an empty object) as the unstructured object
// the field manager works on. The map pkg/apijson renders is used as it
// is, its json.Numbers turned into the int64 and float64 values
// unstructured objects hold, instead of encoding it to JSON and decoding
// that again (which was most of what tracking a write cost).
func unstructuredOf(o *kplanev1.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if o != nil {
		m, err := objectMap(o)
		if err != nil {
			return nil, err
		}
		if err := unstructuredNumbers(m); err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		u.Object = m
	}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// unstructuredNumbers replaces every json.Number in v (a decoded JSON
// object or array, changed in place) by int64, or float64 when it is not
// an integer, as k8s.io/apimachinery's JSON decoder would have made it.
func unstructuredNumbers(v any) error {
	conv := func(x any) (any, error) {
		n, ok := x.(json.Number)
		if !ok {
			return x, unstructuredNumbers(x)
		}
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
		f, err := n.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", n, err)
		}
		return f, nil
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := conv(e)
			if err != nil {
				return err
			}
			t[k] = c
		}
	case []any:
		for i, e := range t {
			c, err := conv(e)
			if err != nil {
				return err
			}
			t[i] = c
		}
	}
	return nil
}

// managedFieldsProto converts the field manager's entries to the
// object's own (fieldsV1 as the JSON object it is).
func managedFieldsProto(in []metav1.ManagedFieldsEntry) ([]*kplanev1.ManagedFieldsEntry, error) {
	out := make([]*kplanev1.ManagedFieldsEntry, 0, len(in))
	for _, e := range in {
		pe := &kplanev1.ManagedFieldsEntry{
			Manager: e.Manager, Operation: string(e.Operation), ApiVersion: e.APIVersion,
			FieldsType: e.FieldsType, Subresource: e.Subresource,
		}
		if e.Time != nil {
			pe.Time = timestamppb.New(e.Time.Time)
		}
		if e.FieldsV1 != nil {
			// encoding/json then structpb is a third of protojson's cost
			// for this deeply nested, key-only document.
			var m map[string]any
			if err := json.Unmarshal(e.FieldsV1.Raw, &m); err != nil {
				return nil, fmt.Errorf("managedFields of %s: fieldsV1: %w", e.Manager, err)
			}
			fv, err := structpb.NewStruct(m)
			if err != nil {
				return nil, fmt.Errorf("managedFields of %s: fieldsV1: %w", e.Manager, err)
			}
			pe.FieldsV1 = fv
		}
		out = append(out, pe)
	}
	return out, nil
}
