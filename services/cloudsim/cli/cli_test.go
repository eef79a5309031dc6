package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/pkg/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// TestServeAndAdminCommands runs `cloudsim serve` with instances from a
// file and a flag, then the admin commands against it over gRPC.
func TestServeAndAdminCommands(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "instances.yaml")
	if err := os.WriteFile(file, []byte("instances:\n- name: node-1\n  zone: zone-a\n  addresses:\n  - {type: InternalIP, address: 127.0.0.11}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, health := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var errOut testutil.SyncBuffer
	go func() {
		done <- Run(ctx, []string{"serve", "--listen", addr, "--health-addr", health, "--state-file", filepath.Join(dir, "state.json"),
			"--instances", file, "--instance", "name=node-2,zone=zone-b,type=sim.large,internal-ip=127.0.0.12",
			"--lb-ip-range", fmt.Sprintf("127.247.%d.0/28", rand.IntN(256))}, &bytes.Buffer{}, &errOut)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, errOut.String())
		}
	}()
	testutil.Eventually(t, 20*time.Second, "/readyz answers 200", func() bool {
		r, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false
		}
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	admin := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := Run(context.Background(), append(args, "--cloud", addr), &out, &bytes.Buffer{})
		return out.String(), err
	}
	out, err := admin("instance", "list")
	if err != nil || !strings.Contains(out, "node-1") || !strings.Contains(out, "zone-b") || !strings.Contains(out, "running") {
		t.Fatalf("instance list: %v\n%s", err, out)
	}
	if out, err = admin("instance", "create", "node-3", "--zone", "zone-c", "--internal-ip", "127.0.0.13"); err != nil || !strings.Contains(out, `"providerID": "kplane-sim://i-`) {
		t.Fatalf("instance create: %v\n%s", err, out)
	}
	for _, step := range [][2]string{{"shutdown", "SHUTDOWN"}, {"start", "RUNNING"}, {"terminate", "TERMINATED"}} {
		if out, err = admin("instance", step[0], "node-3"); err != nil || !strings.Contains(out, "INSTANCE_STATE_"+step[1]) {
			t.Fatalf("instance %s: %v\n%s", step[0], err, out)
		}
	}
	if out, err = admin("instance", "get", "node-3"); err != nil || !strings.Contains(out, "INSTANCE_STATE_TERMINATED") {
		t.Fatalf("instance get: %v\n%s", err, out)
	}
	if out, err = admin("route", "list"); err != nil || !strings.Contains(out, "DESTINATION") {
		t.Fatalf("route list: %v\n%s", err, out)
	}
	if out, err = admin("lb", "list", "-o", "json"); err != nil {
		t.Fatalf("lb list: %v\n%s", err, out)
	}
	if _, err = admin("lb", "get", "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("lb get of a missing one: %v", err)
	}
	if _, err = admin("instance", "create", "Bad_Name"); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("instance create with a bad name: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		nil,
		{"nope"},
		{"instance"},
		{"instance", "explode", "x"},
		{"instance", "get"},
		{"instance", "list", "-o", "yaml"},
		{"serve", "--lb-ip-range", "nope", "--state-file", filepath.Join(dir, "s")},
		{"serve", "--lb-port-range", "9-x", "--lb-advertise-ip", "127.0.0.1"},
		{"serve", "--lb-port-range", "30000-30001"},
		{"serve", "--lb-advertise-ip", "127.0.0.1"},
		{"serve", "--health-check-interval", "0s"},
		{"serve", "--instance", "zone=a"},
		{"serve", "--instance", "name=x,colour=red"},
		{"serve", "extra"},
	} {
		err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
