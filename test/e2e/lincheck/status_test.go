package lincheck

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func statusErr(code string) error {
	switch code {
	case "Aborted":
		return status.Error(codes.Aborted, "conflict")
	default:
		return status.Error(codes.Unavailable, "no leader")
	}
}
