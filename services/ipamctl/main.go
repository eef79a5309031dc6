// Command ipamctl is the node IPAM controller: it cuts --cluster-cidr
// into per-node ranges of --node-cidr-mask-size and gives every Node one
// as spec.podCIDR when it registers, as kube-controller-manager's node
// IPAM controller does. The Nodes are the only record of what is taken,
// so a deleted Node's range is free again and a restarted ipamctl knows
// everything from its cache. Like every kplane controller it is its own
// leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
)

func main() {
	app.Main(newController().service())
}
