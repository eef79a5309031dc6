package rest

import (
	"encoding/json"
	"io"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// maxReviewBytes bounds a SelfSubjectAccessReview body.
const maxReviewBytes = 64 << 10

// serveSelfSubjectAccessReview answers POST
// /apis/authorization.k8s.io/v1/selfsubjectaccessreviews (kubectl auth
// can-i) with the Resources service's CheckAccess for the caller.
func (h *Handler) serveSelfSubjectAccessReview(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		writeStatus(w, badRequest("read the request body: %v", err))
		return
	}
	if len(body) > maxReviewBytes {
		writeStatus(w, newStatus(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "request body larger than %d bytes", maxReviewBytes))
		return
	}
	var review authorizationv1.SelfSubjectAccessReview
	if err := json.Unmarshal(body, &review); err != nil {
		writeStatus(w, badRequest("decode SelfSubjectAccessReview: %v", err))
		return
	}
	ra := review.Spec.ResourceAttributes
	if ra == nil {
		// Non-resource URLs are not served by kplane's authorizers.
		writeStatus(w, newStatus(http.StatusUnprocessableEntity, "Invalid", "spec.resourceAttributes: Required value: kplane answers resource access reviews only"))
		return
	}
	resp, err := h.api.CheckAccess(r.Context(), &kplanev1.CheckAccessRequest{
		Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource, Namespace: ra.Namespace, Name: ra.Name,
	})
	if err != nil {
		writeStatus(w, statusFor(err, request{}))
		return
	}
	review.TypeMeta.Kind, review.TypeMeta.APIVersion = "SelfSubjectAccessReview", "authorization.k8s.io/v1"
	review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: resp.GetAllowed(), Denied: !resp.GetAllowed(), Reason: resp.GetReason()}
	writeJSON(w, http.StatusCreated, &review)
}
