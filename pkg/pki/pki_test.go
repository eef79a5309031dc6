package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGenerateIsCompleteAndIdempotent: every promised file is written with
// the right subject and usage, chains to the CA, and a second run keeps
// them all (the CA is not rotated) while adding a new node.
func TestGenerateIsCompleteAndIdempotent(t *testing.T) {
	dir := t.TempDir()
	res, err := Generate(dir, Options{Hosts: []string{"kplane.example", "10.1.2.3"}, Nodes: []string{"node-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kept) != 0 {
		t.Fatalf("kept %v in an empty dir", res.Kept)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	load := func(name string) *x509.Certificate {
		t.Helper()
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return kp.Leaf
	}
	srv := load("apiserver")
	for _, h := range []string{"localhost", "127.0.0.1", "::1", "apiserver", "kplane.example", "10.1.2.3"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
			t.Errorf("apiserver cert for %s: %v", h, err)
		}
	}
	client := func(name, cn string, orgs []string) {
		t.Helper()
		c := load(name)
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if c.Subject.CommonName != cn || !slices.Equal(c.Subject.Organization, orgs) {
			t.Errorf("%s: subject %v, want CN=%s O=%v", name, c.Subject, cn, orgs)
		}
	}
	client("admin", "kplane-admin", []string{"system:masters"})
	client("node-1", "system:node:node-1", []string{"system:nodes"})
	for _, c := range Controllers {
		client(c, "system:kplane:"+c, nil)
	}
	for _, f := range []string{SAKey, SAPub} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, CAKey)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode: %v %v", fi, err)
	}

	res, err = Generate(dir, Options{Nodes: []string{"node-1", "node-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Written, []string{"node-2.key", "node-2.crt"}) {
		t.Errorf("second run wrote %v, want only node-2's files", res.Written)
	}
	again, _ := os.ReadFile(filepath.Join(dir, CACert))
	if !bytes.Equal(again, caPEM) {
		t.Error("the CA changed on a second run")
	}
	client("node-2", "system:node:node-2", []string{"system:nodes"})

	if ok, err := WriteAdminKubeconfig(dir, "https://127.0.0.1:6443"); !ok || err != nil {
		t.Fatalf("kubeconfig: %v %v", ok, err)
	}
	if ok, err := WriteAdminKubeconfig(dir, "https://127.0.0.1:6443"); ok || err != nil {
		t.Fatalf("kubeconfig rewritten: %v %v", ok, err)
	}
}

// TestGenerateRefusesBadInput: bad names and half pairs are errors and
// write nothing more.
func TestGenerateRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Nodes: []string{"a/b"}}, `node "a/b"`},
		{Options{Nodes: []string{""}}, `node ""`},
		{Options{Nodes: []string{"admin"}}, "reserved"},
		{Options{Controllers: []string{"x:y"}}, `identity "x:y"`},
		{Options{Hosts: []string{"a b"}}, "--hosts"},
	} {
		dir := t.TempDir()
		_, err := Generate(dir, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.o, err, c.want)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%+v: wrote %d files", c.o, len(ents))
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CACert), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(dir, Options{}); err == nil || !strings.Contains(err.Error(), "ca.key") {
		t.Errorf("half CA pair: %v", err)
	}
}
