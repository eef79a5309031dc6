package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"sigs.k8s.io/yaml"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apijson"
)

// maxBodyBytes caps a request body, as the gRPC side caps a message.
const maxBodyBytes = 3 << 20

func (h *Handler) get(w http.ResponseWriter, r *http.Request, req request) {
	resp, err := h.api.Get(r.Context(), &kplanev1.GetRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	h.writeObject(w, r, http.StatusOK, resp.GetObject())
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, req request) {
	q := r.URL.Query()
	limit, s := intParam(q.Get("limit"), "limit")
	if s != nil {
		writeStatus(w, s)
		return
	}
	resp, err := h.api.List(r.Context(), &kplanev1.ListRequest{
		Kind: req.res.Kind, Namespace: req.namespace,
		LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector"),
		Limit: limit, Continue: q.Get("continue"),
		ResourceVersion: q.Get("resourceVersion"), ResourceVersionMatch: q.Get("resourceVersionMatch"),
	})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	h.writeList(w, r, req, resp)
}

func intParam(v, name string) (int64, *metav1.Status) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s: Invalid value: %q: must be a non-negative integer", name, v)
	}
	return n, nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, req request) {
	if s := checkWriteParams(r, true); s != nil {
		writeStatus(w, s)
		return
	}
	obj, warnings, s := decodeBody(r, req)
	if s != nil {
		writeStatus(w, s)
		return
	}
	obj = h.trackUpdate(r, req, nil, obj)
	resp, err := h.api.Create(r.Context(), &kplanev1.CreateRequest{Object: obj, DryRun: isDryRun(r)})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	setWarnings(w, warnings)
	h.writeObject(w, r, http.StatusCreated, resp.GetObject())
}

func (h *Handler) update(w http.ResponseWriter, r *http.Request, req request) {
	if s := checkWriteParams(r, true); s != nil {
		writeStatus(w, s)
		return
	}
	obj, warnings, s := decodeBody(r, req)
	if s != nil {
		writeStatus(w, s)
		return
	}
	if got := obj.Meta().GetName(); got != req.name {
		writeStatus(w, badRequest("the name of the object (%s) does not match the name on the URL (%s)", got, req.name))
		return
	}
	if req.subresource == "" {
		// managedFields are computed against the stored object; a PUT at a
		// stale resourceVersion still fails its compare-and-swap below.
		if cur, err := h.api.Get(r.Context(), &kplanev1.GetRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name}); err == nil {
			obj = h.trackUpdate(r, req, cur.GetObject(), obj)
		}
	}
	out, err := h.put(r, req, obj)
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	setWarnings(w, warnings)
	h.writeObject(w, r, http.StatusOK, out)
}

// put writes obj through Update, or UpdateStatus for the status
// subresource, as a dry run when the request asks for one.
func (h *Handler) put(r *http.Request, req request, obj *kplanev1.Object) (*kplanev1.Object, error) {
	if req.subresource == "status" {
		resp, err := h.api.UpdateStatus(r.Context(), &kplanev1.UpdateStatusRequest{Object: obj, DryRun: isDryRun(r)})
		return resp.GetObject(), err
	}
	resp, err := h.api.Update(r.Context(), &kplanev1.UpdateRequest{Object: obj, DryRun: isDryRun(r)})
	return resp.GetObject(), err
}

// checkWriteParams refuses the write options the request cannot honour
// rather than ignoring them. dryRun=All is honoured where dryRunnable
// (the object writes, whose Resources requests carry dry_run); elsewhere
// a dry run would be a real write, so it is refused.
func checkWriteParams(r *http.Request, dryRunnable bool) *metav1.Status {
	q := r.URL.Query()
	if s := checkDryRun(q["dryRun"], "dryRun"); s != nil {
		return s
	}
	if len(q["dryRun"]) > 0 && !dryRunnable {
		return badRequest("dryRun: Unsupported value: %q: this subresource does not support dry runs", strings.Join(q["dryRun"], ","))
	}
	if fm := q.Get("fieldManager"); len(fm) > 128 {
		return badRequest("fieldManager: Too long: may not be more than 128 bytes")
	}
	switch q.Get("fieldValidation") {
	case "", "Strict", "Warn", "Ignore":
	default:
		return badRequest(`fieldValidation: Unsupported value: %q: supported values: "Ignore", "Strict", "Warn"`, q.Get("fieldValidation"))
	}
	return nil
}

// checkDryRun accepts Kubernetes' one dry-run value, All, as
// Kubernetes' ValidateDryRun does.
func checkDryRun(values []string, field string) *metav1.Status {
	for _, v := range values {
		if v != metav1.DryRunAll {
			return badRequest("%s: Unsupported value: %q: supported values: %q", field, strings.Join(values, ","), metav1.DryRunAll)
		}
	}
	return nil
}

// isDryRun tells whether a request checked by checkWriteParams asks for a
// dry run.
func isDryRun(r *http.Request) bool { return len(r.URL.Query()["dryRun"]) > 0 }

func (h *Handler) delete(w http.ResponseWriter, r *http.Request, req request) {
	opts, s := deleteOptions(r)
	if s != nil {
		writeStatus(w, s)
		return
	}
	dr := &kplanev1.DeleteRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name, GracePeriodSeconds: opts.GracePeriodSeconds, DryRun: len(opts.DryRun) > 0}
	if opts.PropagationPolicy != nil {
		dr.PropagationPolicy = string(*opts.PropagationPolicy)
	}
	if p := opts.Preconditions; p != nil {
		dr.Preconditions = &kplanev1.Preconditions{}
		if p.UID != nil {
			dr.Preconditions.Uid = string(*p.UID)
		}
		if p.ResourceVersion != nil {
			dr.Preconditions.ResourceVersion = *p.ResourceVersion
		}
	}
	resp, err := h.api.Delete(r.Context(), dr)
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	h.writeObject(w, r, http.StatusOK, resp.GetObject())
}

// deleteOptions reads DeleteOptions from the body (kubectl sends one) and
// the query (gracePeriodSeconds, propagationPolicy, dryRun), the query
// winning.
func deleteOptions(r *http.Request) (*metav1.DeleteOptions, *metav1.Status) {
	opts := &metav1.DeleteOptions{}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		return nil, badRequest("read the request body: %v", err)
	}
	if len(body) > 0 && isProtobuf(r.Header.Get("Content-Type")) {
		// client-go sends DeleteOptions in Kubernetes' protobuf.
		if _, _, err := protobufCodec.Decode(body, nil, opts); err != nil {
			return nil, badRequest("decode DeleteOptions: %v", err)
		}
	} else if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(opts); err != nil {
			return nil, badRequest("decode DeleteOptions: %v", err)
		}
	}
	q := r.URL.Query()
	if v := q.Get("gracePeriodSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badRequest("gracePeriodSeconds: Invalid value: %q: must be an integer", v)
		}
		opts.GracePeriodSeconds = &n
	}
	if v := q.Get("propagationPolicy"); v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if s := checkDryRun(opts.DryRun, "dryRun"); s != nil {
		return nil, s
	}
	if s := checkDryRun(q["dryRun"], "dryRun"); s != nil {
		return nil, s
	}
	if len(q["dryRun"]) > 0 {
		opts.DryRun = q["dryRun"] // the query wins, as for the others
	}
	return opts, nil
}

// deleteCollection deletes every object a list with the request's
// selectors returns, one Delete each (as Kubernetes does), and answers
// with the list of what was deleted or marked for deletion.
func (h *Handler) deleteCollection(w http.ResponseWriter, r *http.Request, req request) {
	opts, s := deleteOptions(r)
	if s != nil {
		writeStatus(w, s)
		return
	}
	q := r.URL.Query()
	resp, err := h.api.List(r.Context(), &kplanev1.ListRequest{
		Kind: req.res.Kind, Namespace: req.namespace,
		LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector"),
	})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	out := &kplanev1.ListResponse{ResourceVersion: resp.GetResourceVersion()}
	for _, it := range resp.GetItems() {
		m := it.Meta()
		dr := &kplanev1.DeleteRequest{Kind: req.res.Kind, Namespace: m.GetNamespace(), Name: m.GetName(), GracePeriodSeconds: opts.GracePeriodSeconds, DryRun: len(opts.DryRun) > 0}
		if opts.PropagationPolicy != nil {
			dr.PropagationPolicy = string(*opts.PropagationPolicy)
		}
		d, err := h.api.Delete(r.Context(), dr)
		if err != nil && statusFor(err, req).Code != http.StatusNotFound {
			writeStatus(w, statusFor(err, request{res: req.res, namespace: m.GetNamespace(), name: m.GetName()}))
			return
		}
		if err == nil {
			out.Items = append(out.Items, d.GetObject())
		}
	}
	h.writeList(w, r, req, out)
}

// decodeBody reads the object of a POST or PUT (JSON, or YAML by its
// Content-Type), checks its apiVersion and kind against the URL, and
// fills in the URL's namespace. Unknown fields are errors unless the
// request's fieldValidation is Ignore or Warn; with Warn they come back
// as warnings.
func decodeBody(r *http.Request, req request) (*kplanev1.Object, []string, *metav1.Status) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, nil, badRequest("read the request body: %v", err)
	}
	if len(body) > maxBodyBytes {
		return nil, nil, newStatus(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "the request body is larger than %d bytes", maxBodyBytes)
	}
	switch ct := r.Header.Get("Content-Type"); {
	case isYAML(ct):
		if body, err = yaml.YAMLToJSON(body); err != nil {
			return nil, nil, badRequest("decode YAML: %v", err)
		}
	case isProtobuf(ct):
		// kubectl's typed commands (create namespace, ...) send
		// Kubernetes' protobuf; it is read into Kubernetes' own Go type
		// and continues as that type's JSON.
		if body, err = protobufToJSON(body); err != nil {
			return nil, nil, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "decode the protobuf body: %v", err)
		}
	}
	m, s := decodeMap(body)
	if s != nil {
		return nil, nil, s
	}
	return objectFromMap(m, req, r.URL.Query().Get("fieldValidation"))
}

func decodeMap(body []byte) (map[string]any, *metav1.Status) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, badRequest("decode the request body as a JSON object: %v", err)
	}
	if dec.More() {
		return nil, badRequest("decode the request body: more than one JSON value")
	}
	if m == nil {
		return nil, badRequest("the request body must be an object")
	}
	return m, nil
}

// objectFromMap converts a decoded object of the request's kind.
func objectFromMap(m map[string]any, req request, fieldValidation string) (*kplanev1.Object, []string, *metav1.Status) {
	if k, ok := m["kind"]; ok && k != req.res.Kind {
		return nil, nil, badRequest("kind: Invalid value: %v: the resource %s holds kind %s", k, req.res.GroupResource(), req.res.Kind)
	}
	if v, ok := m["apiVersion"]; ok && v != req.res.GroupVersion() {
		return nil, nil, badRequest("apiVersion: Invalid value: %v: the resource %s is served as %s", v, req.res.GroupResource(), req.res.GroupVersion())
	}
	delete(m, "kind")
	delete(m, "apiVersion")
	var warnings, unknown []string
	opts := apijson.DecodeOptions{UnknownField: func(path string) {
		// Strict (the default) collects every unknown field to refuse the
		// object naming them all, as Kubernetes' strict decoder does.
		switch fieldValidation {
		case "Ignore":
		case "Warn":
			warnings = append(warnings, fmt.Sprintf("unknown field %q", path))
		default:
			unknown = append(unknown, fmt.Sprintf("unknown field %q", path))
		}
	}}
	obj, err := apijson.ObjectFromMap(req.res.Kind, m, opts)
	if err != nil {
		return nil, nil, badRequest("%s in body: %v", req.res.Kind, err)
	}
	if len(unknown) > 0 {
		return nil, nil, badRequest("%s in version %q cannot be handled as a %s: strict decoding error: %s",
			req.res.Kind, req.res.Version, req.res.Kind, strings.Join(unknown, ", "))
	}
	meta := obj.Meta()
	switch {
	case !req.res.info.Namespaced:
		// Kubernetes clears a cluster-scoped object's namespace rather
		// than refusing it (rest.EnsureObjectNamespaceMatchesRequestNamespace),
		// as the gRPC side ignores it.
		meta.Namespace = ""
	case req.res.info.Namespaced && meta.GetNamespace() == "":
		meta.Namespace = req.namespace
	case req.res.info.Namespaced && meta.GetNamespace() != req.namespace:
		return nil, nil, badRequest("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", meta.GetNamespace(), req.namespace)
	}
	return obj, warnings, nil
}

func isProtobuf(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/vnd.kubernetes.protobuf"
}

var protobufCodec = protobuf.NewSerializer(kubeTypes, kubeTypes)

// protobufToJSON converts a Kubernetes protobuf object to its JSON. A
// status holding only empty objects is dropped: Kubernetes' Go types
// marshal struct fields that are never omitted, so `kubectl create
// service` sends "status":{"loadBalancer":{}} although it wrote no status,
// and a field kplane lacks must not fail a request that did not set it.
func protobufToJSON(body []byte) ([]byte, error) {
	obj, _, err := protobufCodec.Decode(body, nil, nil)
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(js, &m) != nil || m["status"] == nil || !emptyJSON(m["status"]) {
		return js, nil
	}
	delete(m, "status")
	return json.Marshal(m)
}

// emptyJSON tells whether a JSON value holds nothing: null, or objects
// whose every value is empty.
func emptyJSON(raw json.RawMessage) bool {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, v := range m {
		if !emptyJSON(v) {
			return false
		}
	}
	return true
}

func isYAML(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/yaml" || mt == "application/apply-patch+yaml")
}

// setWarnings sends warnings as Kubernetes does: Warning headers, which
// kubectl prints as "Warning: ...".
func setWarnings(w http.ResponseWriter, warnings []string) {
	for _, s := range warnings {
		w.Header().Add("Warning", `299 - `+strconv.Quote(s))
	}
}

// objectMap renders an object with apiVersion and kind.
func objectMap(obj *kplanev1.Object) (map[string]any, error) {
	m, err := apijson.ObjectToMap(obj)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", obj.KindName(), err)
	}
	return m, nil
}

// writeObject answers with one object (or its Table row when asked).
func (h *Handler) writeObject(w http.ResponseWriter, r *http.Request, code int, obj *kplanev1.Object) {
	if obj == nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "the service returned no object"))
		return
	}
	if tableRequested(r) {
		h.writeTable(w, r, []*kplanev1.Object{obj}, metav1.ListMeta{ResourceVersion: obj.Meta().GetResourceVersion()})
		return
	}
	m, err := objectMap(obj)
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
		return
	}
	writeJSON(w, code, m)
}

// writeList answers with a <Kind>List: apiVersion and kind on the list
// and on every item.
func (h *Handler) writeList(w http.ResponseWriter, r *http.Request, req request, resp *kplanev1.ListResponse) {
	lm := metav1.ListMeta{ResourceVersion: resp.GetResourceVersion(), Continue: resp.GetContinue()}
	if n := resp.GetRemainingItemCount(); n > 0 {
		lm.RemainingItemCount = &n
	}
	if tableRequested(r) {
		h.writeTable(w, r, resp.GetItems(), lm)
		return
	}
	items := make([]any, 0, len(resp.GetItems()))
	for _, it := range resp.GetItems() {
		m, err := objectMap(it)
		if err != nil {
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
			return
		}
		items = append(items, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"apiVersion": req.res.GroupVersion(),
		"kind":       req.res.Kind + "List",
		"metadata":   lm,
		"items":      items,
	})
}

// errEmptyPatch is returned for a PATCH without a body.
var errEmptyPatch = errors.New("the patch is empty")
