// Package pki creates the certificates and keys a kplane cluster runs
// with (`kpctl certs`, `make certs`): a CA, the apiserver's serving
// certificate, one client certificate per identity (the admin, each
// controller binary, each node agent) and the ServiceAccount token
// signing key pair. Only crypto/x509 is used, no openssl.
//
// Generation is idempotent: a file that exists is kept, so running it
// again adds what is missing (a new node) and never rotates the CA.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Identity names.
const (
	// AdminUser and AdminGroup are the admin client certificate's subject.
	AdminUser  = "kplane-admin"
	AdminGroup = "system:masters"
	// ControllerUserPrefix prefixes a controller binary's user name.
	ControllerUserPrefix = "system:kplane:"
	// NodeUserPrefix and NodesGroup name a node agent.
	NodeUserPrefix = "system:node:"
	NodesGroup     = "system:nodes"
)

// Controllers are the binaries under services/ that get a client
// identity system:kplane:<binary> (the apiserver serves, the node agents
// get a node identity instead).
var Controllers = []string{
	"cloudctl", "cronjobctl", "daemonsetctl", "deploymentctl", "disruptionctl", "endpointsctl", "gcctl", "ipamctl", "jobctl",
	"kcm", "nodectl", "proxy", "pvctl", "replicactl", "scheduler", "statefulsetctl", "tokenctl",
}

// DefaultHosts are always in the apiserver certificate's SANs.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1", "apiserver"}

// Validity of what is generated.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 2 * 365 * 24 * time.Hour
)

// Options say what Generate writes besides the CA, apiserver and admin files.
type Options struct {
	// Hosts are extra DNS names or IPs of the apiserver certificate.
	Hosts []string
	// Nodes get system:node:<n> client certificates, in <n>.crt/.key.
	Nodes []string
	// Controllers get system:kplane:<c> client certificates, in <c>.crt/.key
	// (nil: Controllers).
	Controllers []string
}

// File names in the directory.
const (
	CACert, CAKey               = "ca.crt", "ca.key"
	APIServerCert, APIServerKey = "apiserver.crt", "apiserver.key"
	AdminCert, AdminKey         = "admin.crt", "admin.key"
	SAKey, SAPub                = "sa.key", "sa.pub"
	AdminKubeconfig             = "admin.kubeconfig"
)

// Result lists the files Generate wrote and those it kept.
type Result struct {
	Written, Kept []string
}

// Generate writes the cluster's certificates into dir (created if
// missing), keeping every file that already exists.
func Generate(dir string, o Options) (*Result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("certs dir: %w", err)
	}
	for _, n := range o.Nodes {
		if err := checkName("node", n); err != nil {
			return nil, err
		}
	}
	ctrls := o.Controllers
	if ctrls == nil {
		ctrls = Controllers
	}
	for _, c := range ctrls {
		if err := checkName("identity", c); err != nil {
			return nil, err
		}
	}
	for _, h := range o.Hosts {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " /,") {
			return nil, fmt.Errorf("--hosts: %q is not a host name or IP", h)
		}
	}
	g := &gen{dir: dir, res: &Result{}}
	ca, caKey, err := g.ca()
	if err != nil {
		return nil, err
	}
	hosts := append(append([]string{}, DefaultHosts...), o.Hosts...)
	if err := g.leaf("apiserver", APIServerCert, APIServerKey, ca, caKey, pkix.Name{CommonName: "kplane-apiserver"}, hosts, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if err := g.leaf("admin", AdminCert, AdminKey, ca, caKey, pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}}, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	for _, c := range ctrls {
		if err := g.leaf(c, c+".crt", c+".key", ca, caKey, pkix.Name{CommonName: ControllerUserPrefix + c}, nil, x509.ExtKeyUsageClientAuth); err != nil {
			return nil, err
		}
	}
	for _, n := range o.Nodes {
		if err := g.leaf(n, n+".crt", n+".key", ca, caKey, pkix.Name{CommonName: NodeUserPrefix + n, Organization: []string{NodesGroup}}, nil, x509.ExtKeyUsageClientAuth); err != nil {
			return nil, err
		}
	}
	if err := g.saKeys(); err != nil {
		return nil, err
	}
	return g.res, nil
}

// checkName: names become file names, so they must be plain.
func checkName(what, n string) error {
	if n == "" || strings.ContainsAny(n, "/\\ ,:") || n == "." || n == ".." {
		return fmt.Errorf("%s %q: must be a non-empty name without '/', ',', ':' or spaces", what, n)
	}
	switch n {
	case "ca", "apiserver", "admin", "sa":
		return fmt.Errorf("%s %q: reserved file name", what, n)
	}
	return nil
}

type gen struct {
	dir string
	res *Result
}

func (g *gen) path(name string) string { return filepath.Join(g.dir, name) }

// exists reports whether both files of a pair exist; one without the
// other is an error rather than a silent rotation.
func (g *gen) exists(a, b string) (bool, error) {
	_, errA := os.Stat(g.path(a))
	_, errB := os.Stat(g.path(b))
	switch {
	case errA == nil && errB == nil:
		g.res.Kept = append(g.res.Kept, a, b)
		return true, nil
	case errors.Is(errA, fs.ErrNotExist) && errors.Is(errB, fs.ErrNotExist):
		return false, nil
	case errA == nil:
		return false, fmt.Errorf("%s exists but %s does not: remove %s to regenerate both", g.path(a), b, a)
	case errB == nil:
		return false, fmt.Errorf("%s exists but %s does not: remove %s to regenerate both", g.path(b), a, b)
	}
	return false, fmt.Errorf("stat %s: %w", g.path(a), errors.Join(errA, errB))
}

func (g *gen) ca() (*x509.Certificate, crypto.Signer, error) {
	ok, err := g.exists(CACert, CAKey)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		return LoadCA(g.path(CACert), g.path(CAKey))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl, err := template(pkix.Name{CommonName: "kplane-ca"}, CAValidity)
	if err != nil {
		return nil, nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := g.writePair(CACert, CAKey, der, key); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	return cert, key, nil
}

func (g *gen) leaf(what, certName, keyName string, ca *x509.Certificate, caKey crypto.Signer, subj pkix.Name, hosts []string, usage x509.ExtKeyUsage) error {
	ok, err := g.exists(certName, keyName)
	if err != nil || ok {
		return err
	}
	der, key, err := Issue(ca, caKey, subj, hosts, usage, CertValidity)
	if err != nil {
		return fmt.Errorf("%s certificate: %w", what, err)
	}
	return g.writePair(certName, keyName, der, key)
}

// Issue signs a new ECDSA P-256 certificate for subj with the CA. hosts
// become the SANs (IPs as IP SANs).
func Issue(ca *x509.Certificate, caKey crypto.Signer, subj pkix.Name, hosts []string, usage x509.ExtKeyUsage, validity time.Duration) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	tmpl, err := template(subj, validity)
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign: %w", err)
	}
	return der, key, nil
}

func template(subj pkix.Name, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subj,
		// A little slack for clocks that are slightly behind.
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(validity),
	}, nil
}

func (g *gen) saKeys() error {
	ok, err := g.exists(SAKey, SAPub)
	if err != nil || ok {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("ServiceAccount key: %w", err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("ServiceAccount key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("ServiceAccount public key: %w", err)
	}
	if err := g.write(SAKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return g.write(SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func (g *gen) writePair(certName, keyName string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := EncodeKey(key)
	if err != nil {
		return err
	}
	if err := g.write(keyName, kb, 0o600); err != nil {
		return err
	}
	return g.write(certName, EncodeCert(der), 0o644)
}

// write creates name exclusively: a file that appeared meanwhile is kept.
func (g *gen) write(name string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(g.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close() // the write error is the one to report
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	g.res.Written = append(g.res.Written, name)
	return nil
}

// EncodeCert is a certificate's PEM.
func EncodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// EncodeKey is a private key's PEM (PKCS#8).
func EncodeKey(key crypto.Signer) ([]byte, error) {
	b, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b}), nil
}

// LoadCA reads a CA certificate and its PKCS#8 key.
func LoadCA(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("read CA: %w", err)
	}
	blk, _ := pem.Decode(cb)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certFile, err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("read CA key: %w", err)
	}
	kblk, _ := pem.Decode(kb)
	if kblk == nil {
		return nil, nil, fmt.Errorf("%s: no PEM key", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	return cert, signer, nil
}

// Kubeconfig is a kubeconfig (kubectl's and kpctl's format) for one
// user with client certificate and key, the data embedded so the file
// stands alone. server is a URL, e.g. https://127.0.0.1:6443.
func Kubeconfig(server string, caPEM, certPEM, keyPEM []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster:
    server: %q
    certificate-authority-data: %s
users:
- name: kplane-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kplane
  context:
    cluster: kplane
    user: kplane-admin
current-context: kplane
`, server, b64(caPEM), b64(certPEM), b64(keyPEM))
}

// WriteAdminKubeconfig writes admin.kubeconfig into dir from the admin
// files Generate wrote, unless it exists.
func WriteAdminKubeconfig(dir, server string) (written bool, err error) {
	p := filepath.Join(dir, AdminKubeconfig)
	if _, err := os.Stat(p); err == nil {
		return false, nil
	}
	var files [3][]byte
	for i, n := range []string{CACert, AdminCert, AdminKey} {
		if files[i], err = os.ReadFile(filepath.Join(dir, n)); err != nil {
			return false, fmt.Errorf("admin kubeconfig: %w", err)
		}
	}
	g := &gen{dir: dir, res: &Result{}}
	if err := g.write(AdminKubeconfig, Kubeconfig(server, files[0], files[1], files[2]), 0o600); err != nil {
		return false, err
	}
	return true, nil
}
