// Package e2e runs kplane's real binaries as processes and checks what a
// user or an operator would: objects survive crashes (SIGKILL) and
// restarts, and SIGTERM shuts a binary down cleanly.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binDir holds the binaries under test: $KPLANE_BIN when set (e.g. the
// repository's bin/ after `make build`), else a temporary directory that
// TestMain builds them into.
var binDir string

// binaries maps each binary the tests run to the directory of its main package,
// relative to the repository root.
var binaries = map[string]string{
	"apiserver": "services/apiserver",
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if dir := os.Getenv("KPLANE_BIN"); dir != "" {
		binDir = dir
	} else {
		tmp, err := os.MkdirTemp("", "kplane-e2e-bin-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		defer func() {
			if err := os.RemoveAll(tmp); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: remove %s: %v\n", tmp, err)
			}
		}()
		binDir = tmp
	}
	for name, pkg := range binaries {
		if err := ensureBinary(name, pkg); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
	}
	return m.Run()
}

// ensureBinary builds bin/<name> statically (as `make build` does) unless
// it is already there.
func ensureBinary(name, pkg string) error {
	out := filepath.Join(binDir, name)
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = filepath.Join(root, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s in %s: %w\n%s", name, cmd.Dir, err, b)
	}
	return nil
}

// repoRoot is two directories above this package (test/e2e); go test
// runs a package's tests in the package's directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("locate the repository: %w", err)
	}
	return filepath.Abs(filepath.Join(wd, "..", ".."))
}
