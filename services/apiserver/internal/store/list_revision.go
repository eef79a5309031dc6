package store

import (
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/validation"
)

// The resourceVersionMatch values of Kubernetes' list options.
const (
	MatchNotOlderThan = "NotOlderThan"
	MatchExact        = "Exact"
)

// TooLargeResourceVersionCause is the reason of the errdetails.ErrorInfo
// a list naming a revision newer than the store's carries; the REST side
// answers it as Kubernetes does (504 Timeout with this cause, which
// client-go's reflector recognises).
const TooLargeResourceVersionCause = "ResourceVersionTooLarge"

// listRevision reads the revision options of a list: exact is the
// revision to read at (0: the newest), atLeast the revision the newest
// must have reached (0: any). Bad combinations are refused as
// Kubernetes' list option validation refuses them.
func listRevision(opts ListOptions) (exact, atLeast int64, err error) {
	rv, match := opts.ResourceVersion, opts.ResourceVersionMatch
	var errs validation.ErrorList
	var n int64
	if rv != "" {
		n, err = strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			errs.Invalid("resourceVersion", rv, "must be a revision number")
		}
	}
	switch match {
	case "":
	case MatchNotOlderThan, MatchExact:
		switch {
		case rv == "":
			errs.Forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided")
		case opts.Continue != "":
			errs.Forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
		case match == MatchExact && rv == "0":
			errs.Forbidden("resourceVersionMatch", fmt.Sprintf("resourceVersionMatch %q is forbidden for resourceVersion %q", match, rv))
		}
	default:
		errs.NotSupported("resourceVersionMatch", match, []string{MatchExact, MatchNotOlderThan})
	}
	if len(errs) > 0 {
		return 0, 0, invalidObject("ListOptions.meta.k8s.io", "", errs)
	}
	if n > 0 && opts.Continue != "" {
		// The token holds its snapshot's revision.
		return 0, 0, invalid("specifying resource version is not allowed when using continue")
	}
	if match == MatchExact {
		return n, 0, nil
	}
	return 0, n, nil
}

// tooLargeRevision is the error for a list at a revision the store has
// not reached.
func tooLargeRevision(want, current int64) error {
	st := status.Newf(codes.DeadlineExceeded, "Too large resource version: %d, current: %d", want, current)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: TooLargeResourceVersionCause, Domain: "meta.k8s.io",
		Metadata: map[string]string{"message": "Too large resource version"}}); err == nil {
		st = d
	}
	return st.Err()
}

// isFutureRevision reports etcd refusing a read at a revision it has not
// reached.
func isFutureRevision(err error) bool {
	return errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrGRPCFutureRev)
}
