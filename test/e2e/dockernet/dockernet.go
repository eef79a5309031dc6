// Package dockernet partitions a container from a Docker network and
// heals it as compose had connected it. `docker network disconnect`
// forgets the endpoint, and a bare `docker network connect` gives back
// neither the compose service name as DNS alias nor the address: peers
// that reach the container by service name (etcd's peer URLs
// http://apiserver-2:2380, the controllers' --apiserver list) would never
// find it again. The compose-HA end-to-end test and the chaos harness
// both partition apiservers through this package.
package dockernet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// Endpoint is how a container was attached to a network: what Connect
// restores.
type Endpoint struct {
	Network   string
	Container string
	// Aliases are the container's DNS names on the network (compose: the
	// service name and the short container id).
	Aliases []string
	// IPv4 is its address on the network.
	IPv4 string
}

// Inspect reads how container is attached to network.
func Inspect(ctx context.Context, network, container string) (Endpoint, error) {
	out, err := Docker(ctx, "inspect", "--format", "{{json .NetworkSettings.Networks}}", container)
	if err != nil {
		return Endpoint{}, err
	}
	var nets map[string]struct {
		Aliases   []string
		IPAddress string
	}
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		return Endpoint{}, fmt.Errorf("docker inspect %s: networks: %w", container, err)
	}
	n, ok := nets[network]
	if !ok {
		return Endpoint{}, fmt.Errorf("container %s is not on network %s", container, network)
	}
	return Endpoint{Network: network, Container: container, Aliases: n.Aliases, IPv4: n.IPAddress}, nil
}

// Disconnect cuts container off network (its peers lose it, it loses
// them, and a port published through that network no longer answers)
// and returns the endpoint to restore with Connect.
func Disconnect(ctx context.Context, network, container string) (Endpoint, error) {
	ep, err := Inspect(ctx, network, container)
	if err != nil {
		return Endpoint{}, err
	}
	if _, err := Docker(ctx, "network", "disconnect", "--force", network, container); err != nil {
		return Endpoint{}, err
	}
	return ep, nil
}

// Connect attaches the container again with its aliases and, when still
// free, its address. A container started on the network meanwhile may
// have been given that address; then Docker picks another one, which
// nobody depends on: peers and clients use the aliases.
func (e Endpoint) Connect(ctx context.Context) error {
	args := []string{"network", "connect"}
	for _, a := range e.Aliases {
		args = append(args, "--alias", a)
	}
	if e.IPv4 != "" {
		_, err := Docker(ctx, append(args, "--ip", e.IPv4, e.Network, e.Container)...)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !strings.Contains(err.Error(), "in use") {
			return err
		}
	}
	_, err := Docker(ctx, append(args, e.Network, e.Container)...)
	return err
}

// Docker runs the docker CLI with args and returns its trimmed standard
// output; a failure's error carries the command and its standard error.
func Docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
