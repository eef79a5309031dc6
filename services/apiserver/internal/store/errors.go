package store

import (
	"context"
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/validation"
)

// The store speaks the API's error vocabulary directly: every error it
// returns is a gRPC status with the code DESIGN.md assigns.

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// invalidObject also carries each invalid field as an
// errdetails.BadRequest violation, whose reason is Kubernetes' cause type
// (FieldValueRequired, ...), so the REST side answers 422 Invalid with
// details.causes as Kubernetes does.
func invalidObject(kind, name string, errs validation.ErrorList) error {
	st := status.Newf(codes.InvalidArgument, "%s %q is invalid: %s", kind, name, errs.Error())
	br := &errdetails.BadRequest{}
	for _, e := range errs {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: e.Path, Description: e.Detail, Reason: causeType(e.Detail)})
	}
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}

// causeTypes maps the wording validation.ErrorList gives each kind of
// problem to Kubernetes' cause type.
var causeTypes = []struct{ prefix, cause string }{
	{"Required value", "FieldValueRequired"},
	{"Invalid value", "FieldValueInvalid"},
	{"Unsupported value", "FieldValueNotSupported"},
	{"Duplicate value", "FieldValueDuplicate"},
	{"Forbidden", "FieldValueForbidden"},
	{"Too long", "FieldValueTooLong"},
	{"Not found", "FieldValueNotFound"},
}

func causeType(detail string) string {
	for _, c := range causeTypes {
		if strings.HasPrefix(detail, c.prefix) {
			return c.cause
		}
	}
	return "FieldValueInvalid"
}

func notFound(kind, namespace, name string) error {
	if namespace == "" {
		return status.Errorf(codes.NotFound, "%s %q not found", kind, name)
	}
	return status.Errorf(codes.NotFound, "%s %q not found in namespace %q", kind, name, namespace)
}

func conflict(kind, name, why string) error {
	return status.Errorf(codes.Aborted,
		"operation cannot be fulfilled on %s %q: %s; reread the object and try again", kind, name, why)
}

// backendError maps a failed etcd call to a status: the caller's
// own cancellation or deadline keeps its code, anything else from etcd is
// Unavailable (retryable), as DESIGN.md promises.
func backendError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted) {
		return status.Errorf(codes.OutOfRange, "%s: resource version too old (compacted): %v", op, err)
	}
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return status.Errorf(codes.InvalidArgument, "%s: object too large for storage: %v", op, err)
	}
	return status.Errorf(codes.Unavailable, "%s: storage unavailable: %v", op, err)
}
