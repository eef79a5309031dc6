package client

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code returns the gRPC status code of err (wrapped errors included),
// codes.OK for nil and codes.Unknown for non-gRPC errors.
func Code(err error) codes.Code { return status.Code(err) }

// IsNotFound reports whether err is a gRPC NotFound error.
func IsNotFound(err error) bool { return err != nil && Code(err) == codes.NotFound }

// IsAlreadyExists reports whether err is a gRPC AlreadyExists error.
func IsAlreadyExists(err error) bool { return err != nil && Code(err) == codes.AlreadyExists }

// IsConflict reports whether err is an optimistic-concurrency conflict
// (gRPC Aborted): the object changed since it was read; reread and retry.
func IsConflict(err error) bool { return err != nil && Code(err) == codes.Aborted }

// IsOutOfRange reports whether err is gRPC OutOfRange, which Watch returns
// for a compacted resourceVersion ("too old resource version").
func IsOutOfRange(err error) bool { return err != nil && Code(err) == codes.OutOfRange }

// IsUnavailable reports whether err is gRPC Unavailable (apiserver or etcd
// unreachable; retryable).
func IsUnavailable(err error) bool { return err != nil && Code(err) == codes.Unavailable }

// IsInvalid reports whether err is gRPC InvalidArgument (the object was rejected).
func IsInvalid(err error) bool { return err != nil && Code(err) == codes.InvalidArgument }

// MayHaveWritten reports whether a failed write may still have been
// applied: the apiserver rejected it outright for codes that are decided
// before anything is written (bad input, missing or existing object,
// conflict, refused), while a timeout, a cancelled call, a dropped
// connection or an internal error leave the outcome unknown. A caller
// that reserved something for the write keeps it until it sees the truth.
func MayHaveWritten(err error) bool {
	if err == nil {
		return true
	}
	switch Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.Aborted,
		codes.FailedPrecondition, codes.OutOfRange, codes.PermissionDenied,
		codes.Unauthenticated, codes.ResourceExhausted, codes.Unimplemented:
		return false
	}
	return true
}
