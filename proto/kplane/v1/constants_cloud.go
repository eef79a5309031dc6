package kplanev1

// Names of the cloud controller manager (cloudctl) and of nodes run with
// an external cloud provider, spelled as Kubernetes spells them.
const (
	// CloudProviderExternal is the node agent's --cloud-provider value
	// that leaves the Node to the cloud controller manager.
	CloudProviderExternal = "external"

	// TaintNodeUninitialized keeps pods off a Node registered with an
	// external cloud provider until cloudctl has initialised it.
	TaintNodeUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	// TaintNodeShutdown marks a Node whose instance is shut down.
	TaintNodeShutdown = "node.cloudprovider.kubernetes.io/shutdown"

	// LabelTopologyZone and LabelTopologyRegion place a Node; cloudctl
	// sets them from its instance.
	LabelTopologyZone   = "topology.kubernetes.io/zone"
	LabelTopologyRegion = "topology.kubernetes.io/region"
	// LabelInstanceType is the Node's instance type.
	LabelInstanceType = "node.kubernetes.io/instance-type"
	// LabelExcludeFromExternalLoadBalancers keeps a Node out of every
	// load balancer's backends.
	LabelExcludeFromExternalLoadBalancers = "node.kubernetes.io/exclude-from-external-load-balancers"

	// FinalizerLoadBalancerCleanup holds a LoadBalancer Service until its
	// cloud load balancer is deleted.
	FinalizerLoadBalancerCleanup = "service.kubernetes.io/load-balancer-cleanup"

	// Node address types.
	NodeInternalIP = "InternalIP"
	NodeExternalIP = "ExternalIP"
	NodeHostName   = "Hostname"

	// LoadBalancerIPModeProxy: the load balancer opens its own
	// connections to the nodes (cloudsim's do).
	LoadBalancerIPModeProxy = "Proxy"
)
