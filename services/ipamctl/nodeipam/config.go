package nodeipam

import (
	"flag"
)

// Defaults of ipamctl's flags. The cluster CIDR lies in 127.0.0.0/8 so
// that, with every pod on one host (make dev, the e2e tests), every pod
// IP is reachable from every other process without privileges.
const (
	defaultClusterCIDR  = "127.64.0.0/10"
	defaultNodeMaskSize = 24
)

// config holds ipamctl's own flags.
type config struct {
	clusterCIDR  string
	nodeMaskSize int
}

func (c *config) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.clusterCIDR, "cluster-cidr", defaultClusterCIDR, "IPv4 range that the nodes' pod CIDRs are cut from")
	fs.IntVar(&c.nodeMaskSize, "node-cidr-mask-size", defaultNodeMaskSize, "prefix length of each node's pod CIDR")
}
