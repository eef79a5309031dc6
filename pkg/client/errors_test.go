package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/client"
)

func TestMayHaveWritten(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, true},
		{status.Error(codes.InvalidArgument, "spec.replicas: must be >= 0"), false},
		{status.Error(codes.Aborted, "conflict"), false},
		{status.Error(codes.NotFound, "gone"), false},
		{fmt.Errorf("update node n1: %w", status.Error(codes.AlreadyExists, "exists")), false},
		{status.Error(codes.Unavailable, "etcd down"), true},
		{status.Error(codes.DeadlineExceeded, "timeout"), true},
		{fmt.Errorf("update node n1: %w", status.Error(codes.Internal, "boom")), true},
		{context.Canceled, true},
		{errors.New("connection reset"), true},
	} {
		if got := client.MayHaveWritten(tc.err); got != tc.want {
			t.Errorf("MayHaveWritten(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
