// Package kcm is kplane's kube-controller-manager shape: every controller
// loop under services/ that is also a binary of its own, hosted in one
// process by pkg/app's Host (one apiserver connection, one informer
// factory, one health server, one Lease per loop). Which loops run is
// --controllers, as kube-controller-manager's flag.
package kcm

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/cronjobctl/cronjob"
	"github.com/kplane/kplane/services/daemonsetctl/daemonset"
	"github.com/kplane/kplane/services/deploymentctl/deployment"
	"github.com/kplane/kplane/services/disruptionctl/disruption"
	"github.com/kplane/kplane/services/endpointsctl/endpoints"
	"github.com/kplane/kplane/services/gcctl/garbagecollector"
	"github.com/kplane/kplane/services/ipamctl/nodeipam"
	"github.com/kplane/kplane/services/jobctl/job"
	"github.com/kplane/kplane/services/nodectl/nodelifecycle"
	"github.com/kplane/kplane/services/pvctl/pv"
	"github.com/kplane/kplane/services/replicactl/replicaset"
	"github.com/kplane/kplane/services/statefulsetctl/statefulset"
	"github.com/kplane/kplane/services/tokenctl/tokens"
)

// Name is the binary's name (its client identity is system:kplane:kcm).
const Name = "kcm"

// HealthAddr is the default of --health-addr.
const HealthAddr = ":10258"

// Services are the loops kcm can host, in start order (tokenctl first:
// pods wait for their namespace's default ServiceAccount), each built
// fresh: a Service holds its controller's state.
func Services() []app.Service {
	return []app.Service{
		tokens.NewService(),
		replicaset.NewService(),
		nodelifecycle.NewService(),
		nodeipam.NewService(),
		garbagecollector.NewService(),
		endpoints.NewService(),
		job.NewService(),
		cronjob.NewService(),
		pv.NewService(),
		deployment.NewService(),
		statefulset.NewService(),
		daemonset.NewService(),
		disruption.NewService(),
	}
}

// Names are the names of Services, in the same order.
func Names() []string {
	svcs := Services()
	out := make([]string, len(svcs))
	for i, s := range svcs {
		out[i] = s.Name
	}
	return out
}

// NewHost returns kcm's Host: Services plus extra (test binaries add a
// loop of their own this way).
func NewHost(extra ...app.Service) app.Host {
	return app.Host{Name: Name, HealthAddr: HealthAddr, Services: append(Services(), extra...)}
}
