// Command proxy is kplane's kube-proxy: one per node, it watches Services
// and Endpoints and forwards TCP connections and UDP datagrams sent to a
// Service's clusterIP:port (and, for type NodePort, to the node's
// nodePort) to the Service's ready endpoints, round robin or sticky per
// client IP. It is not leader
// elected: every replica serves its own node. The loop lives in package
// proxier.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/proxy/proxier"
)

func main() { app.Main(proxier.NewService()) }
