package proxy

import (
	"encoding/json"
	"net/http"
)

// apiStatus is Kubernetes' Status object, the body of every error the
// API answers over HTTP.
type apiStatus struct {
	Kind       string   `json:"kind"`
	APIVersion string   `json:"apiVersion"`
	Metadata   struct{} `json:"metadata"`
	Status     string   `json:"status"`
	Message    string   `json:"message"`
	Reason     string   `json:"reason"`
	Code       int      `json:"code"`
}

// WriteStatus answers with a failure Status.
func WriteStatus(w http.ResponseWriter, code int, reason, message string) {
	body, err := json.Marshal(apiStatus{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: message, Reason: reason, Code: code})
	if err != nil {
		http.Error(w, message, code) // a struct of strings always marshals; keep the answer anyway
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n')) // the client may be gone; nothing to do then
}
