package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/serviceaccount"
	"github.com/kplane/kplane/pkg/strategy"
)

// TestRangeFlagsRejectBadValues: the allocation flags are checked before
// anything starts, with the flag's name in the error.
func TestRangeFlagsRejectBadValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--service-cluster-ip-range", "10.0.0.1/24"}, "--service-cluster-ip-range: 10.0.0.1/24: must be a network address (10.0.0.0/24)"},
		{[]string{"--service-cluster-ip-range", "banana"}, "--service-cluster-ip-range"},
		{[]string{"--service-cluster-ip-range", "fd00::/108"}, "must be an IPv4 CIDR"},
		{[]string{"--service-cluster-ip-range", "10.0.0.0/31"}, "too small"},
		{[]string{"--service-node-port-range", "32767-30000"}, "--service-node-port-range"},
		{[]string{"--service-node-port-range", "x"}, "must be a port range"},
		{[]string{"--allocation-repair-interval", "soon"}, "allocation-repair-interval"},
	} {
		err := run(append(c.args, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--health-addr", ""))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestRangeFlagsSetTheConfig: the allocation flags reach the apiserver's
// configuration (the integration tests start apiservers with it), and
// their defaults are the documented ones.
func TestRangeFlagsSetTheConfig(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServiceClusterIPRange != netip.MustParsePrefix("127.16.0.0/12") ||
		cfg.ServiceNodePortRange != (strategy.PortRange{Base: 30000, Size: 2768}) || cfg.AllocationRepairInterval != 3*time.Minute {
		t.Fatalf("defaults: %v %v %v", cfg.ServiceClusterIPRange, cfg.ServiceNodePortRange, cfg.AllocationRepairInterval)
	}
	cfg, err = parseFlags([]string{"--service-cluster-ip-range", "10.96.0.0/16", "--service-node-port-range", "31000-31009",
		"--allocation-repair-interval", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServiceClusterIPRange != netip.MustParsePrefix("10.96.0.0/16") ||
		cfg.ServiceNodePortRange != (strategy.PortRange{Base: 31000, Size: 10}) || cfg.AllocationRepairInterval != 0 {
		t.Fatalf("set: %v %v %v", cfg.ServiceClusterIPRange, cfg.ServiceNodePortRange, cfg.AllocationRepairInterval)
	}
}

// TestAuthorizationFlags: --authorization-mode is checked before anything
// starts; --audit-log-path and the modes reach the configuration, and an
// audit log that cannot be opened stops the start with its path named.
func TestAuthorizationFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--authorization-mode", "Webhook"}, `--authorization-mode: authorization mode "Webhook"`},
		{[]string{"--authorization-mode", "RBAC,RBAC"}, "given twice"},
		{[]string{"--authorization-mode", "RBAC", "--audit-log-path", "/nonexistent-dir/audit.log"}, "open audit log"},
	} {
		err := run(append(c.args, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--health-addr", ""))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
	cfg, err := parseFlags([]string{"--authorization-mode", "Node,RBAC", "--audit-log-path", "/tmp/a.log"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.AuthorizationModes, ",") != "Node,RBAC" || cfg.AuditLogPath != "/tmp/a.log" {
		t.Fatalf("config: %v %q", cfg.AuthorizationModes, cfg.AuditLogPath)
	}
	if cfg, _ := parseFlags(nil); cfg.AuthorizationModes != nil {
		t.Fatalf("default modes %v, want none (AlwaysAllow)", cfg.AuthorizationModes)
	}
}

// TestAuthFlags: the TLS and authentication flags reach the
// configuration, and a bad token file stops the start naming the flag,
// the line and the field.
func TestAuthFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--tls-cert-file", "/c", "--tls-key-file", "/k", "--client-ca-file", "/ca",
		"--token-auth-file", "/t", "--anonymous-auth"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLSCertFile != "/c" || cfg.TLSKeyFile != "/k" || cfg.ClientCAFile != "/ca" || cfg.TokenAuthFile != "/t" || !cfg.AnonymousAuth {
		t.Fatalf("flags not applied: %+v", cfg)
	}
	bad := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(bad, []byte("tok,alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"--token-auth-file", bad, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--health-addr", ""})
	if err == nil || !strings.Contains(err.Error(), "--token-auth-file") || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad token file: %v", err)
	}
}

// TestServiceAccountFlags: key files are loaded (errors name the flag
// and the file's fault) and the token flags reach the configuration.
func TestServiceAccountFlags(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := serviceaccount.EncodePrivateKeyPEM(key)
	pub, _ := serviceaccount.EncodePublicKeyPEM(key.Public())
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	privFile, pubFile, junk := write("sa.key", priv), write("sa.pub", pub), write("junk", []byte("junk"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--service-account-key-file", junk}, "--service-account-key-file: service account public keys " + junk + ": no PEM block"},
		{[]string{"--service-account-key-file", filepath.Join(dir, "none")}, "--service-account-key-file: read service account public keys"},
		{[]string{"--service-account-signing-key-file", pubFile}, `--service-account-signing-key-file: service account private key ` + pubFile + `: PEM block is "PUBLIC KEY"`},
		{[]string{"--service-account-max-token-expiration", "5m"}, "--service-account-max-token-expiration: 5m0s is below the minimum 10m"},
		{[]string{"--service-account-issuer", ""}, "--service-account-issuer: must not be empty"},
	} {
		if _, err := parseFlags(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServiceAccountAuthenticationOn() || cfg.ServiceAccountIssuer != "kplane" || cfg.ServiceAccountMaxTokenExpiration != time.Hour {
		t.Fatalf("defaults: on %v issuer %q max %v", cfg.ServiceAccountAuthenticationOn(), cfg.ServiceAccountIssuer, cfg.ServiceAccountMaxTokenExpiration)
	}
	cfg, err = parseFlags([]string{"--service-account-key-file", pubFile + "," + privFile, "--service-account-signing-key-file", privFile,
		"--service-account-issuer", "https://kplane.example", "--service-account-max-token-expiration", "2h"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.ServiceAccountPublicKeys) != 2 || cfg.ServiceAccountSigningKey == nil || cfg.ServiceAccountIssuer != "https://kplane.example" ||
		cfg.ServiceAccountMaxTokenExpiration != 2*time.Hour || !cfg.ServiceAccountAuthenticationOn() {
		t.Fatalf("set: %+v", cfg)
	}
}
