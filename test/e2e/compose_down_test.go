package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestComposeDownClearsAnEndpointLeftOnTheNetwork runs
// deploy/compose/down.sh, which make down and every compose test take a
// stack down with, against a real Docker engine. A network of the project
// with a container still attached fails its first removal ("has active
// endpoints", as a stale endpoint once failed make down in CI); the
// script disconnects the container by force and the second try removes
// the network. A failing command with no network of the project left
// keeps its status, and a call without a command is a usage error.
func TestComposeDownClearsAnEndpointLeftOnTheNetwork(t *testing.T) {
	c := newComposeStack(t, composeConfig{name: "down", images: []string{"nodeagent"}})
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	down := filepath.Join(root, "deploy", "compose", "down.sh")

	network := c.project + "_left"
	dockerOut(t, "network", "create", "--label", "com.docker.compose.project="+c.project, network)
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	container := dockerOut(t, "run", "-d", "--network", network, "--name", c.project+"_left",
		"--entrypoint", "/bin/sleep", "kplane/nodeagent:"+c.tag, "600")
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", container).Run() })
	if err := exec.Command("docker", "network", "rm", network).Run(); err == nil {
		t.Fatal("docker network rm removed a network with a running container attached; the test no longer sets up a failing first try")
	}

	out, err := c.runCommand(time.Minute, down, c.project, "docker", "network", "rm", network)
	if err != nil {
		t.Fatalf("down.sh did not remove the network: %v", err)
	}
	if !strings.Contains(out, "disconnecting "+c.project+"_left from network "+network) {
		t.Errorf("down.sh does not say which container it disconnected:\n%s", out)
	}
	if err := exec.Command("docker", "network", "inspect", network).Run(); err == nil {
		t.Errorf("network %s still exists after down.sh", network)
	}

	// No network of the project is left: the command's own status.
	_, err = c.runCommand(time.Minute, down, c.project, "sh", "-c", "exit 3")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("down.sh with a command that exits 3 and nothing to clear: %v, want exit status 3", err)
	}
	_, err = c.runCommand(time.Minute, down, c.project)
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("down.sh without a command: %v, want the usage error's exit status 2", err)
	}
}
