package client

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	// Registers the client side of grpc.health.v1, which the service
	// config below turns on: an apiserver reporting NOT_SERVING (its etcd
	// member has no leader) gets no new calls.
	_ "google.golang.org/grpc/health"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Addresses splits an --apiserver value: one gRPC target, or a
// comma-separated list of host:port (an HA control plane).
func Addresses(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// balancedServiceConfig spreads calls over every apiserver that is
// connected and reports SERVING (round_robin with health checks). A
// broken watch fails with Unavailable and its informer watches again
// from its last resourceVersion: the new stream goes to a healthy one.
var balancedServiceConfig = fmt.Sprintf(`{
  "loadBalancingConfig": [{"round_robin": {}}],
  "healthCheckConfig": {"serviceName": %q}
}`, kplanev1.Resources_ServiceDesc.ServiceName)

// schemeSeq makes each client's resolver scheme unique, as gRPC keeps
// resolvers per ClientConn but names them by scheme.
var schemeSeq atomic.Uint64

// balancedTarget returns the target and dial options for several
// apiservers: a fixed resolver over the list and round_robin with health
// checks. Each address carries its host name for TLS verification, so
// every apiserver's certificate must name its own address.
func balancedTarget(addrs []string) (string, []grpc.DialOption, error) {
	var state resolver.State
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return "", nil, fmt.Errorf("client: --apiserver item %d %q: want host:port in a comma-separated list", i+1, a)
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	scheme := fmt.Sprintf("kplane-apiservers-%d", schemeSeq.Add(1))
	r := manual.NewBuilderWithScheme(scheme)
	r.InitialState(state)
	return scheme + ":///apiservers", []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(balancedServiceConfig),
	}, nil
}
