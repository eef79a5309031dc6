package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Patch media types.
const (
	mergePatch     = "application/merge-patch+json"
	jsonPatch      = "application/json-patch+json"
	strategicPatch = "application/strategic-merge-patch+json"
)

// patchAttempts bounds how often a patch is reapplied to a newer object
// after losing a compare-and-swap to another writer.
const patchAttempts = 5

// kubeTypes holds Kubernetes' own Go types of the kinds kplane serves; a
// strategic merge patch reads its merge keys and strategies from their
// struct tags, so lists merge exactly as they do on Kubernetes.
var kubeTypes = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, storagev1.AddToScheme, coordinationv1.AddToScheme, rbacv1.AddToScheme, schedulingv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("rest: register Kubernetes types: %v", err)) // static registrations cannot fail
		}
	}
	return s
}()

// patch applies a merge, JSON or strategic merge patch to the current
// object and writes the result with compare-and-swap through the same
// Update (or UpdateStatus) as a PUT. When another writer wins the race the
// patch is applied again to the newer object, unless the patch itself
// names a resourceVersion: then the conflict is the client's to see.
func (h *Handler) patch(w http.ResponseWriter, r *http.Request, req request) {
	if s := checkWriteParams(r, true); s != nil {
		writeStatus(w, s)
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && mt == applyPatchType {
		h.apply(w, r, req)
		return
	}
	if err != nil || (mt != mergePatch && mt != jsonPatch && mt != strategicPatch) {
		writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			"the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s", jsonPatch, mergePatch, strategicPatch, applyPatchType))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		writeStatus(w, badRequest("read the request body: %v", err))
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		writeStatus(w, badRequest("%v", errEmptyPatch))
		return
	}
	var dataStruct runtime.Object
	if mt == strategicPatch {
		gvk := schema.GroupVersionKind{Group: req.res.Group, Version: req.res.Version, Kind: req.res.Kind}
		if dataStruct, err = kubeTypes.New(gvk); err != nil {
			writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
				"strategic merge patch is not supported for %s; use %s or %s", req.res.GroupResource(), mergePatch, jsonPatch))
			return
		}
	}
	for attempt := 1; ; attempt++ {
		cur, err := h.api.Get(r.Context(), &kplanev1.GetRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name})
		if err != nil {
			writeStatus(w, statusFor(err, req))
			return
		}
		curMap, err := objectMap(cur.GetObject())
		if err != nil {
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
			return
		}
		original, err := json.Marshal(curMap)
		if err != nil {
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "%v", err))
			return
		}
		patched, s := applyPatch(mt, original, body, dataStruct)
		if s != nil {
			writeStatus(w, s)
			return
		}
		m, s := decodeMap(patched)
		if s != nil {
			writeStatus(w, s)
			return
		}
		obj, warnings, s := objectFromMap(m, req, r.URL.Query().Get("fieldValidation"))
		if s != nil {
			writeStatus(w, s)
			return
		}
		meta := obj.Meta()
		if meta.GetName() != req.name {
			writeStatus(w, badRequest("metadata.name: Invalid value: %q: the name of a patched object cannot change", meta.GetName()))
			return
		}
		pinned := meta.GetResourceVersion() != cur.GetObject().Meta().GetResourceVersion()
		obj = h.trackUpdate(r, req, cur.GetObject(), obj)
		out, err := h.put(r, req, obj)
		if status.Code(err) == codes.Aborted && !pinned && attempt < patchAttempts {
			continue
		}
		if err != nil {
			writeStatus(w, statusFor(err, req))
			return
		}
		setWarnings(w, warnings)
		h.writeObject(w, r, http.StatusOK, out)
		return
	}
}

// applyPatch applies one patch document with the library Kubernetes uses
// for its type.
func applyPatch(mt string, original, patch []byte, dataStruct runtime.Object) (out []byte, st *metav1.Status) {
	// strategicpatch panics on some malformed patches (a merge key that is
	// not a scalar, found by FuzzRESTPatch); that is the client's bad input.
	defer func() {
		if p := recover(); p != nil {
			out, st = nil, badRequest("the %s patch cannot be applied: %v", mt, p)
		}
	}()
	var err error
	switch mt {
	case mergePatch:
		out, err = jsonpatch.MergePatch(original, patch)
	case jsonPatch:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(patch); err == nil {
			out, err = p.Apply(original)
		}
	case strategicPatch:
		out, err = strategicpatch.StrategicMergePatch(original, patch, dataStruct)
	}
	if err != nil {
		return nil, newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the patch could not be applied: %v", err)
	}
	return out, nil
}
