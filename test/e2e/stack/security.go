package stack

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/pki"
)

// PKI is a certificate directory written by pkg/pki and what a process or
// a test needs to use it: the apiserver's security flags, each process's
// identity flags, and the admin's gRPC, HTTP and kubeconfig credentials.
// The stack and the other end-to-end harnesses share it, so every
// harness runs secured the same way. The zero PKI (Dir "") is insecure:
// no flags, plaintext clients.
type PKI struct {
	// Dir holds the files pkg/pki names (ca.crt, admin.crt, <identity>.crt,
	// sa.key, admin.kubeconfig, ...); "" means insecure.
	Dir string
}

// NewPKI writes a CA, the apiserver's certificate, the admin's, one per
// controller binary and one per node in nodes, the ServiceAccount key
// pair and the admin's kubeconfig for https://apiAddr into dir (keeping
// files that exist).
func NewPKI(dir, apiAddr string, nodes []string) (PKI, error) {
	if _, err := pki.Generate(dir, pki.Options{Nodes: nodes}); err != nil {
		return PKI{}, fmt.Errorf("certificates: %w", err)
	}
	if _, err := pki.WriteAdminKubeconfig(dir, "https://"+apiAddr); err != nil {
		return PKI{}, fmt.Errorf("admin kubeconfig: %w", err)
	}
	return PKI{Dir: dir}, nil
}

// Insecure reports whether there are no certificates.
func (p PKI) Insecure() bool { return p.Dir == "" }

// File is the path of one of the directory's files.
func (p PKI) File(name string) string { return filepath.Join(p.Dir, name) }

// APIServerArgs turn on TLS, client certificate and ServiceAccount token
// authentication, and RBAC with the Node authorizer (the default once an
// authenticator is configured).
func (p PKI) APIServerArgs() []string {
	if p.Insecure() {
		return nil
	}
	return []string{
		"--tls-cert-file", p.File(pki.APIServerCert), "--tls-key-file", p.File(pki.APIServerKey),
		"--client-ca-file", p.File(pki.CACert),
		"--service-account-key-file", p.File(pki.SAPub),
		"--service-account-signing-key-file", p.File(pki.SAKey),
	}
}

// IdentityArgs are the connection flags of a process running as identity
// (a controller binary's name or a node name): the CA to verify the
// apiserver with and its own client certificate. None when insecure.
func (p PKI) IdentityArgs(identity string) []string {
	if p.Insecure() {
		return nil
	}
	if alias, ok := identityAliases[identity]; ok {
		identity = alias
	}
	return []string{"--tls-ca", p.File(pki.CACert),
		"--client-cert-file", p.File(identity + ".crt"), "--client-key-file", p.File(identity + ".key")}
}

// identityAliases: binaries that run as another's identity. The example
// plugin scheduler is a scheduler (examples/scheduler-plugin) and needs
// exactly the scheduler's role.
var identityAliases = map[string]string{"scheduler-plugin": "scheduler"}

// AdminArgs are IdentityArgs of the admin.
func (p PKI) AdminArgs() []string {
	if p.Insecure() {
		return nil
	}
	return []string{"--tls-ca", p.File(pki.CACert),
		"--client-cert-file", p.File(pki.AdminCert), "--client-key-file", p.File(pki.AdminKey)}
}

// TokenctlArgs give tokenctl the key it signs ServiceAccount tokens with
// and the CA it publishes.
func (p PKI) TokenctlArgs() []string {
	if p.Insecure() {
		return nil
	}
	return []string{"--service-account-private-key-file", p.File(pki.SAKey), "--root-ca-file", p.File(pki.CACert)}
}

// ClientOptions connect to the apiserver at addr as the admin.
func (p PKI) ClientOptions(addr string) client.Options {
	if p.Insecure() {
		return client.Options{Address: addr}
	}
	return client.Options{Address: addr, TLSCA: p.File(pki.CACert),
		ClientCertFile: p.File(pki.AdminCert), ClientKeyFile: p.File(pki.AdminKey)}
}

// DialOption is the admin's gRPC transport credentials, for grpc.NewClient.
func (p PKI) DialOption() (grpc.DialOption, error) {
	if p.Insecure() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg, err := client.TLSConfig(p.ClientOptions(""))
	if err != nil {
		return nil, fmt.Errorf("admin credentials: %w", err)
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// Kubeconfig is the admin's kubeconfig for kubectl and kpctl ("" when
// insecure: then --server http://<addr> needs none).
func (p PKI) Kubeconfig() string {
	if p.Insecure() {
		return ""
	}
	return p.File(pki.AdminKubeconfig)
}

// URL is the base URL of the REST side of the apiserver at addr.
func (p PKI) URL(addr string) string {
	if p.Insecure() {
		return "http://" + addr
	}
	return "https://" + addr
}

// HTTPClient reaches the REST side (and the service proxy) as the admin,
// over HTTP/1.1 (the REST side shares the listener with gRPC's HTTP/2).
func (p PKI) HTTPClient() (*http.Client, error) {
	if p.Insecure() {
		return &http.Client{}, nil
	}
	cfg, err := client.TLSConfig(p.ClientOptions(""))
	if err != nil {
		return nil, fmt.Errorf("admin credentials: %w", err)
	}
	cfg.MinVersion = tls.VersionTLS12
	cfg.NextProtos = []string{"http/1.1"}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// CertsDir is where a secure stack's CA, certificates and keys live:
// DataDir/certs. They are kept across restarts of the stack.
func (o Options) CertsDir() string { return filepath.Join(o.DataDir, "certs") }

// nodeNames are the exec agents' node names (the fake agent runs as the
// admin and needs none).
func (o Options) nodeNames() []string {
	if o.Runtime == RuntimeFake {
		return nil
	}
	names := make([]string, o.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i+1)
	}
	return names
}

// makeCerts writes the stack's PKI (kept when it exists).
func (o Options) makeCerts() error {
	if _, err := NewPKI(o.CertsDir(), o.APIAddr, o.nodeNames()); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	return nil
}

// PKI is the stack's certificate directory (the zero PKI when insecure).
func (o Options) PKI() PKI {
	if o.Insecure {
		return PKI{}
	}
	return PKI{Dir: o.CertsDir()}
}

func (o Options) apiserverSecurityArgs() []string { return o.PKI().APIServerArgs() }

func (o Options) identityArgs(identity string) []string { return o.PKI().IdentityArgs(identity) }

func (o Options) adminArgs() []string { return o.PKI().AdminArgs() }

func (o Options) tokenctlArgs() []string { return o.PKI().TokenctlArgs() }

// ClientOptions connect to the stack's apiserver as the admin.
func (s *Stack) ClientOptions() client.Options { return s.opts.PKI().ClientOptions(s.opts.APIAddr) }

// Kubeconfig is the admin's kubeconfig for kubectl and kpctl ("" when
// insecure: then --server http://APIAddr needs none).
func (s *Stack) Kubeconfig() string { return s.opts.PKI().Kubeconfig() }

// APIURL is the base URL of the apiserver's REST side.
func (s *Stack) APIURL() string { return s.opts.PKI().URL(s.opts.APIAddr) }

// HTTPClient reaches the REST side (and the service proxy) as the admin.
func (s *Stack) HTTPClient() (*http.Client, error) { return s.opts.PKI().HTTPClient() }
