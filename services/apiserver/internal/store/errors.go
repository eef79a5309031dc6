package store

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/validation"
)

// The store speaks the API's error vocabulary directly: every error it
// returns is a gRPC status with the code DESIGN.md assigns.

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func invalidObject(kind, name string, errs validation.ErrorList) error {
	return status.Errorf(codes.InvalidArgument, "%s %q is invalid: %s", kind, name, errs.Error())
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
