package rest

import (
	"io"

	"google.golang.org/protobuf/proto"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// readSubresourceBody reads a POSTed subresource object (JSON or
// Kubernetes' protobuf) into v.
func readSubresourceBody(r *http.Request, v runtime.Object, what string) *metav1.Status {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		return badRequest("read the request body: %v", err)
	}
	if isProtobuf(r.Header.Get("Content-Type")) {
		if _, _, err := subresourceCodec.Decode(body, nil, v); err != nil {
			return badRequest("decode %s: %v", what, err)
		}
		return nil
	}
	return decodeStrict(body, v, what)
}

// postedObject is an object POSTed to a subresource (Eviction, Binding,
// TokenRequest).
type postedObject interface {
	runtime.Object
	metav1.Object
}

// readPosted serves what every POST to a subresource starts with: the
// method, the write parameters, the body (JSON or protobuf) read into
// obj, and obj's kind, name and namespace checked against the URL's (each
// may be left out). sub names the subresource and takes the type it
// accepts ("policy/v1 Eviction") in the errors. false: an error Status
// was written.
func readPosted(w http.ResponseWriter, r *http.Request, req request, obj postedObject, sub, apiVersion, kind string) bool {
	if r.Method != http.MethodPost {
		writeStatus(w, methodNotAllowed(r))
		return false
	}
	if s := checkWriteParams(r, false); s != nil {
		writeStatus(w, s)
		return false
	}
	if s := readSubresourceBody(r, obj, kind); s != nil {
		writeStatus(w, s)
		return false
	}
	var s *metav1.Status
	switch k := obj.GetObjectKind().GroupVersionKind().Kind; {
	case k != "" && k != kind:
		s = badRequest("kind: Invalid value: %q: the %s subresource takes %s %s", k, sub, apiVersion, kind)
	case obj.GetName() != "" && obj.GetName() != req.name:
		s = badRequest("metadata.name: Invalid value: %q: name in URL does not match name in %s object", obj.GetName(), kind)
	case obj.GetNamespace() != "" && obj.GetNamespace() != req.namespace:
		s = badRequest("metadata.namespace: Invalid value: %q: namespace in URL does not match namespace in %s object", obj.GetNamespace(), kind)
	}
	if s != nil {
		writeStatus(w, s)
		return false
	}
	return true
}

// serveEviction serves POST pods/<name>/eviction (policy/v1 Eviction)
// through the service's Evict, where the PodDisruptionBudget rules live
// (one semantics for every client): the pod is deleted with the
// eviction's DeleteOptions, gracefully as by a DELETE, unless a budget
// forbids it (429 TooManyRequests with a DisruptionBudget cause, which
// kubectl drain retries).
func (h *Handler) serveEviction(w http.ResponseWriter, r *http.Request, req request) {
	ev := &policyv1.Eviction{}
	if !readPosted(w, r, req, ev, "eviction", "policy/v1", "Eviction") {
		return
	}
	er := &kplanev1.EvictRequest{Namespace: req.namespace, Name: req.name}
	if o := ev.DeleteOptions; o != nil {
		if len(o.DryRun) > 0 {
			writeStatus(w, badRequest("deleteOptions.dryRun: Unsupported value: kplane does not support dry runs"))
			return
		}
		er.GracePeriodSeconds = o.GracePeriodSeconds
		if o.PropagationPolicy != nil {
			er.PropagationPolicy = string(*o.PropagationPolicy)
		}
		if p := o.Preconditions; p != nil {
			er.Preconditions = &kplanev1.Preconditions{}
			if p.UID != nil {
				er.Preconditions.Uid = string(*p.UID)
			}
			if p.ResourceVersion != nil {
				er.Preconditions.ResourceVersion = *p.ResourceVersion
			}
		}
	}
	if _, err := h.api.Evict(r.Context(), er); err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	h.log.Info("pod evicted", "pod", req.namespace+"/"+req.name)
	writeJSON(w, http.StatusCreated, successStatus(http.StatusCreated))
}

// serveBinding serves POST pods/<name>/binding (v1 Binding): it sets
// spec.nodeName of an unbound pod through the service's Update with the
// pod's resourceVersion, as the scheduler binds, so a pod is bound once.
func (h *Handler) serveBinding(w http.ResponseWriter, r *http.Request, req request) {
	b := &corev1.Binding{}
	if !readPosted(w, r, req, b, "binding", "v1", "Binding") {
		return
	}
	switch {
	case b.Target.Kind != "" && b.Target.Kind != "Node":
		writeStatus(w, newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "Binding %q is invalid: target.kind: Unsupported value: %q: supported values: \"Node\"", req.name, b.Target.Kind))
		return
	case b.Target.Name == "":
		writeStatus(w, newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "Binding %q is invalid: target.name: Required value", req.name))
		return
	}
	cur, err := h.api.Get(r.Context(), &kplanev1.GetRequest{Kind: "Pod", Namespace: req.namespace, Name: req.name})
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	obj := proto.Clone(cur.GetObject()).(*kplanev1.Object)
	pod := obj.GetPod()
	switch {
	case b.UID != "" && string(b.UID) != pod.GetMetadata().GetUid():
		writeStatus(w, newStatus(http.StatusConflict, metav1.StatusReasonConflict, "Operation cannot be fulfilled on pods/binding %q: the UID in the Binding (%s) does not match the pod's (%s)", req.name, b.UID, pod.GetMetadata().GetUid()))
		return
	case pod.GetMetadata().GetDeletionTimestamp() != nil:
		writeStatus(w, newStatus(http.StatusConflict, metav1.StatusReasonConflict, "Operation cannot be fulfilled on pods/binding %q: pod %s is being deleted, cannot be assigned to a host", req.name, req.name))
		return
	case pod.GetSpec().GetNodeName() != "":
		writeStatus(w, newStatus(http.StatusConflict, metav1.StatusReasonConflict, "Operation cannot be fulfilled on pods/binding %q: pod %s is already assigned to node %q", req.name, req.name, pod.GetSpec().GetNodeName()))
		return
	}
	if pod.Spec == nil {
		pod.Spec = &kplanev1.PodSpec{}
	}
	pod.Spec.NodeName = b.Target.Name
	if _, err := h.api.Update(r.Context(), &kplanev1.UpdateRequest{Object: obj}); err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	writeJSON(w, http.StatusCreated, successStatus(http.StatusCreated))
}

// successStatus is the Status Kubernetes answers a subresource POST with.
func successStatus(code int) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: int32(code)}
}
