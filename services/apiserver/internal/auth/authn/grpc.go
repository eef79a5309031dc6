package authn

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// publicPrefix is the gRPC service reachable without credentials: health
// checks, as probes (grpc-health-probe, orchestrators) carry none.
// Reflection is not public: it describes the API to whoever asks, and
// Kubernetes likewise keeps its discovery behind authentication.
const publicPrefix = "/grpc.health.v1.Health/"

// UnaryInterceptor authenticates unary calls and puts the user in ctx.
func (c *Chain) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := c.authGRPC(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authenticates streams and puts the user in their ctx.
func (c *Chain) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := c.authGRPC(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &userStream{ServerStream: ss, ctx: ctx})
	}
}

type userStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *userStream) Context() context.Context { return s.ctx }

func (c *Chain) authGRPC(ctx context.Context, method string) (context.Context, error) {
	cr := Credentials{Public: strings.HasPrefix(method, publicPrefix)}
	// One key read in place: FromIncomingContext would copy every header
	// of every request.
	cr.Authorization = metadata.ValueFromIncomingContext(ctx, "authorization")
	p, _ := peer.FromContext(ctx)
	if p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cr.PeerCerts = ti.State.PeerCertificates
		}
	}
	u, err := c.Authenticate(ctx, cr)
	if err != nil {
		addr := ""
		if p != nil && p.Addr != nil {
			addr = p.Addr.String()
		}
		c.log.Info("request refused", "method", method, "peer", addr, "reason", err.Error())
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return user.With(ctx, u), nil
}
