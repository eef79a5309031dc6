package rest

import (
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func isServiceAccount(k *kplanev1.KindInfo) bool { return k.Name == "ServiceAccount" }

// serveToken serves POST serviceaccounts/<name>/token
// (authentication.k8s.io/v1 TokenRequest), what `kubectl create token`
// sends, through the service's CreateToken.
func (h *Handler) serveToken(w http.ResponseWriter, r *http.Request, req request) {
	tr := &authenticationv1.TokenRequest{}
	if !readPosted(w, r, req, tr, "token", "authentication.k8s.io/v1", "TokenRequest") {
		return
	}
	cr := &kplanev1.CreateTokenRequest{Namespace: req.namespace, ServiceAccountName: req.name, Audiences: tr.Spec.Audiences}
	if tr.Spec.ExpirationSeconds != nil {
		cr.ExpirationSeconds = *tr.Spec.ExpirationSeconds
	}
	if b := tr.Spec.BoundObjectRef; b != nil {
		cr.BoundObject = &kplanev1.BoundObjectReference{Kind: b.Kind, Name: b.Name, Uid: string(b.UID)}
	}
	resp, err := h.api.CreateToken(r.Context(), cr)
	if err != nil {
		writeStatus(w, statusFor(err, req))
		return
	}
	out := tr.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{Kind: "TokenRequest", APIVersion: "authentication.k8s.io/v1"}
	out.Name, out.Namespace = req.name, req.namespace
	if len(out.Spec.Audiences) == 0 {
		out.Spec.Audiences = nil
	}
	exp := resp.GetExpirationTimestamp().AsTime()
	out.Status = authenticationv1.TokenRequestStatus{Token: resp.GetToken(), ExpirationTimestamp: metav1.NewTime(exp)}
	writeJSON(w, http.StatusCreated, out)
}
