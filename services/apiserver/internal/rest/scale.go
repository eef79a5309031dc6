package rest

import (
	"encoding/json"
	"io"
	"net/http"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"
)

// scaleVerbs are the verbs of the scale subresource.
var scaleVerbs = []string{"get", "patch", "update"}

// hasScale reports whether a kind has spec.replicas behind the store's
// GetScale/UpdateScale (the strategy registry decides, as the store does).
func hasScale(k *kplanev1.KindInfo) bool {
	_, ok := strategy.For(k.Name).(strategy.Scaler)
	return ok
}

// serveScale serves <plural>/<name>/scale as autoscaling/v1 Scale over the
// service's GetScale and UpdateScale: GET reads, PUT writes, PATCH
// applies a patch to the current Scale and writes that.
func (h *Handler) serveScale(w http.ResponseWriter, r *http.Request, req request) {
	switch r.Method {
	case http.MethodGet:
		resp, err := h.api.GetScale(r.Context(), &kplanev1.GetScaleRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name})
		if err != nil {
			writeStatus(w, statusFor(err, req))
			return
		}
		writeJSON(w, http.StatusOK, toKubeScale(resp.GetScale()))
	case http.MethodPut:
		if s := checkWriteParams(r, false); s != nil {
			writeStatus(w, s)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
		if err != nil {
			writeStatus(w, badRequest("read the request body: %v", err))
			return
		}
		sc, s := decodeScale(body, r.Header.Get("Content-Type"))
		if s != nil {
			writeStatus(w, s)
			return
		}
		h.writeScale(w, r, req, sc)
	case http.MethodPatch:
		h.patchScale(w, r, req)
	default:
		writeStatus(w, methodNotAllowed(r))
	}
}

// patchScale applies a merge, JSON or strategic merge patch to the
// current Scale. Unless the patch sets metadata.resourceVersion itself,
// the write carries no precondition, so UpdateScale reapplies the
// replicas to a newer object after losing a race (a replicas patch means
// "this many", whatever else changed).
func (h *Handler) patchScale(w http.ResponseWriter, r *http.Request, req request) {
	if s := checkWriteParams(r, false); s != nil {
		writeStatus(w, s)
		return
	}
	mt, s := patchType(r)
	if s != nil {
		writeStatus(w, s)
		return
	}
	patchBody, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		writeStatus(w, badRequest("read the request body: %v", err))
		return
	}
	if len(patchBody) == 0 {
		writeStatus(w, badRequest("%v", errEmptyPatch))
		return
	}
	cur, err := h.api.GetScale(r.Context(), &kplanev1.GetScaleRequest{Kind: req.res.Kind, Namespace: req.namespace, Name: req.name})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	orig := toKubeScale(cur.GetScale())
	origJSON, err := json.Marshal(orig)
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "render the scale: %v", err))
		return
	}
	patched, s := applyPatch(mt, origJSON, patchBody, &autoscalingv1.Scale{})
	if s != nil {
		writeStatus(w, s)
		return
	}
	sc, s := decodeScale(patched, "application/json")
	if s != nil {
		writeStatus(w, s)
		return
	}
	if sc.ResourceVersion == orig.ResourceVersion {
		sc.ResourceVersion = ""
	}
	h.writeScale(w, r, req, sc)
}

// patchType returns the media type of a PATCH, 415 for one not served.
func patchType(r *http.Request) (string, *metav1.Status) {
	mt := mediaType(r.Header.Get("Content-Type"))
	switch mt {
	case mergePatch, jsonPatch, strategicPatch:
		return mt, nil
	}
	return "", newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
		"the body of the request was in an unknown format - accepted media types include: %s, %s, %s", jsonPatch, mergePatch, strategicPatch)
}

// decodeScale reads an autoscaling/v1 Scale (JSON, or Kubernetes'
// protobuf), unknown fields refused.
func decodeScale(body []byte, contentType string) (*autoscalingv1.Scale, *metav1.Status) {
	sc := &autoscalingv1.Scale{}
	if isProtobuf(contentType) {
		if _, _, err := subresourceCodec.Decode(body, nil, sc); err != nil {
			return nil, badRequest("decode Scale: %v", err)
		}
	} else if s := decodeStrict(body, sc, "Scale"); s != nil {
		return nil, s
	}
	if sc.Kind != "" && (sc.Kind != "Scale" || sc.APIVersion != "autoscaling/v1") {
		return nil, badRequest("kind: Invalid value: %q: the scale subresource takes autoscaling/v1 Scale, not %s %s", sc.Kind, sc.APIVersion, sc.Kind)
	}
	return sc, nil
}

// writeScale sends the Scale to UpdateScale; the object is the URL's.
func (h *Handler) writeScale(w http.ResponseWriter, r *http.Request, req request, sc *autoscalingv1.Scale) {
	if sc.Name != "" && sc.Name != req.name {
		writeStatus(w, badRequest("metadata.name: Invalid value: %q: does not match the name in the URL (%s)", sc.Name, req.name))
		return
	}
	if sc.Namespace != "" && sc.Namespace != req.namespace {
		writeStatus(w, badRequest("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", sc.Namespace, req.namespace))
		return
	}
	in := &kplanev1.Scale{
		Metadata: &kplanev1.ObjectMeta{Name: req.name, Namespace: req.namespace, Uid: string(sc.UID), ResourceVersion: sc.ResourceVersion},
		Spec:     &kplanev1.ScaleSpec{Replicas: sc.Spec.Replicas},
	}
	resp, err := h.api.UpdateScale(r.Context(), &kplanev1.UpdateScaleRequest{Kind: req.res.Kind, Scale: in})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	writeJSON(w, http.StatusOK, toKubeScale(resp.GetScale()))
}

// toKubeScale renders the service's Scale as autoscaling/v1 Scale.
func toKubeScale(s *kplanev1.Scale) *autoscalingv1.Scale {
	m := s.GetMetadata()
	out := &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), UID: types.UID(m.GetUid()),
			ResourceVersion: m.GetResourceVersion(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: s.GetSpec().GetReplicas()},
		Status: autoscalingv1.ScaleStatus{Replicas: s.GetStatus().GetReplicas(), Selector: s.GetStatus().GetSelector()},
	}
	if ts := m.GetCreationTimestamp(); ts != nil {
		out.CreationTimestamp = metav1.NewTime(ts.AsTime())
	}
	return out
}
