package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// statusFor turns an error of the Resources service (a gRPC status) into
// Kubernetes' Status with the reason and HTTP code Kubernetes uses for the
// same failure, so kubectl prints "Error from server (NotFound): ...".
func statusFor(err error, req request) *metav1.Status {
	st, _ := status.FromError(err)
	msg := st.Message()
	s := &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
	}
	details := &metav1.StatusDetails{Name: req.name}
	if req.res != nil {
		details.Group = req.res.Group
		details.Kind = req.res.Plural
	}
	switch st.Code() {
	case codes.NotFound:
		s.Reason, s.Code = metav1.StatusReasonNotFound, http.StatusNotFound
		s.Message, details = kubeMessage(notFoundRE, msg, "not found", details)
	case codes.AlreadyExists:
		s.Reason, s.Code = metav1.StatusReasonAlreadyExists, http.StatusConflict
		s.Message, details = kubeMessage(existsRE, msg, "already exists", details)
	case codes.Aborted:
		s.Reason, s.Code = metav1.StatusReasonConflict, http.StatusConflict
	case codes.FailedPrecondition:
		s.Reason, s.Code = metav1.StatusReasonConflict, http.StatusConflict
	case codes.InvalidArgument:
		if causes := fieldCauses(st); len(causes) > 0 {
			s.Reason, s.Code = metav1.StatusReasonInvalid, http.StatusUnprocessableEntity
			details.Causes = causes
		} else {
			s.Reason, s.Code = metav1.StatusReasonBadRequest, http.StatusBadRequest
		}
	case codes.OutOfRange:
		s.Reason, s.Code = metav1.StatusReasonExpired, http.StatusGone
	case codes.PermissionDenied:
		s.Reason, s.Code = metav1.StatusReasonForbidden, http.StatusForbidden
	case codes.Unauthenticated:
		s.Reason, s.Code = metav1.StatusReasonUnauthorized, http.StatusUnauthorized
	case codes.ResourceExhausted:
		s.Reason, s.Code = metav1.StatusReasonTooManyRequests, http.StatusTooManyRequests
		details.Causes = infoCauses(st)
	case codes.Unavailable:
		s.Reason, s.Code = metav1.StatusReasonServiceUnavailable, http.StatusServiceUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		// A list at a revision the store has not reached carries the
		// ResourceVersionTooLarge cause client-go looks for.
		s.Reason, s.Code = metav1.StatusReasonTimeout, http.StatusGatewayTimeout
		details.Causes = infoCauses(st)
	case codes.Unimplemented:
		s.Reason, s.Code = metav1.StatusReasonMethodNotAllowed, http.StatusMethodNotAllowed
	default:
		s.Reason, s.Code = metav1.StatusReasonInternalError, http.StatusInternalServerError
	}
	if details.Name != "" || details.Kind != "" || len(details.Causes) > 0 {
		s.Details = details
	}
	return s
}

var (
	notFoundRE = regexp.MustCompile(`^(\w+) "(?:[^"/]*/)?([^"/]*)" not found`)
	existsRE   = regexp.MustCompile(`^(\w+) "(?:[^"/]*/)?([^"/]*)" already exists`)
)

// kubeMessage rewrites the store's `Kind "name" not found ...` as
// Kubernetes writes it, `pods "name" not found`, naming the object the
// error is about (which, for a create in a missing namespace, is the
// Namespace rather than the requested object).
func kubeMessage(re *regexp.Regexp, msg, what string, d *metav1.StatusDetails) (string, *metav1.StatusDetails) {
	m := re.FindStringSubmatch(msg)
	if m == nil {
		return msg, d
	}
	var r *kplanev1.Resource
	for _, k := range kplanev1.KindNames() {
		if strings.EqualFold(k, m[1]) {
			r = kplanev1.ResourceOf(k)
		}
	}
	if r == nil {
		return msg, d
	}
	return fmt.Sprintf("%s %q %s", r.GroupResource(), m[2], what),
		&metav1.StatusDetails{Name: m[2], Group: r.Group, Kind: r.Plural}
}

// fieldCauses lists the field violations the store attached to an
// InvalidArgument (errdetails.BadRequest), one cause per field.
func fieldCauses(st *status.Status) []metav1.StatusCause {
	var out []metav1.StatusCause
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			out = append(out, metav1.StatusCause{Type: metav1.CauseType(v.GetReason()), Message: v.GetDescription(), Field: v.GetField()})
		}
	}
	return out
}

// infoCauses lists the causes the service attached as ErrorInfo (an
// eviction refused for a DisruptionBudget): the reason is the cause's
// type, metadata["message"] its message.
func infoCauses(st *status.Status) []metav1.StatusCause {
	var out []metav1.StatusCause
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			out = append(out, metav1.StatusCause{Type: metav1.CauseType(ei.GetReason()), Message: ei.GetMetadata()["message"]})
		}
	}
	return out
}

// newStatus is a failure Status made by the REST layer itself.
func newStatus(code int, reason metav1.StatusReason, format string, args ...any) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  fmt.Sprintf(format, args...),
		Reason:   reason,
		Code:     int32(code),
	}
}

func badRequest(format string, args ...any) *metav1.Status {
	return newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, format, args...)
}

func methodNotAllowed(r *http.Request) *metav1.Status {
	return newStatus(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
		"the server does not allow this method on the requested resource: %s %s", r.Method, r.URL.Path)
}

func writeNotFoundPath(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound,
		"the server could not find the requested resource: %s", r.URL.Path))
}

// writeStatus answers with a Status, its code as the HTTP status.
func writeStatus(w http.ResponseWriter, s *metav1.Status) {
	writeJSON(w, int(s.Code), s)
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		body = []byte(fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"reason":"InternalError","code":500}`, err.Error()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n')) // a gone client is not an error of ours
}
