package rest

import (
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// serveSelfSubjectAccessReview answers POST
// /apis/authorization.k8s.io/v1/selfsubjectaccessreviews (kubectl auth
// can-i) with the Resources service's CheckAccess for the caller.
func (h *Handler) serveSelfSubjectAccessReview(w http.ResponseWriter, r *http.Request) {
	var review authorizationv1.SelfSubjectAccessReview
	if st := readSubresourceBody(r, &review, "SelfSubjectAccessReview"); st != nil {
		writeStatus(w, st)
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
