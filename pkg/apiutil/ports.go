package apiutil

import (
	"fmt"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ContainerPort resolves port against one container's ports: a number is
// itself, a name is the number of the container port so named. It fails
// for a name no port of the container has.
func ContainerPort(c *kplanev1.Container, port *kplanev1.IntOrString) (int32, error) {
	if !port.IsString() {
		return port.GetIntVal(), nil
	}
	for _, p := range c.GetPorts() {
		if p.GetName() == port.GetStrVal() {
			return p.GetContainerPort(), nil
		}
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.GetName(), port.GetStrVal())
}

// PodPort resolves a Service's target port against a pod, as Kubernetes'
// endpoints controller does: a number is itself, a name is the first
// container port of that name and protocol in any of the pod's containers.
// ok is false when no container port matches the name.
func PodPort(pod *kplanev1.Pod, port *kplanev1.IntOrString, protocol string) (num int32, ok bool) {
	if !port.IsString() {
		return port.GetIntVal(), true
	}
	if protocol == "" {
		protocol = kplanev1.ProtocolTCP
	}
	for _, c := range pod.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			proto := p.GetProtocol()
			if proto == "" {
				proto = kplanev1.ProtocolTCP
			}
			if p.GetName() == port.GetStrVal() && proto == protocol {
				return p.GetContainerPort(), true
			}
		}
	}
	return 0, false
}
