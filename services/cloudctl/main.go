// Command cloudctl is kplane's cloud controller manager, against the
// simulated cloud (cloudsim): its node loop initialises Nodes from their
// instances and deletes those whose instance is gone, its route loop
// routes every node's pod CIDR to its instance, and its service loop gives
// type LoadBalancer Services a load balancer. Each loop holds a Lease of
// its own; --controllers picks the loops a process runs.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/cloudctl/cloudcontroller"
)

func main() { app.Main(cloudcontroller.NewService()) }
