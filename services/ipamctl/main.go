// Command ipamctl is the node IPAM controller: it cuts --cluster-cidr
// into per-node ranges of --node-cidr-mask-size and gives every Node one
// as spec.podCIDR when it registers, as kube-controller-manager's node
// IPAM controller does. Like every kplane controller it is its own
// leader-elected process; the loop lives in package nodeipam.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/ipamctl/nodeipam"
)

func main() { app.Main(nodeipam.NewService()) }
