package stack

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/pki"
)

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
	if _, err := pki.Generate(o.CertsDir(), pki.Options{Nodes: o.nodeNames()}); err != nil {
		return fmt.Errorf("stack: certificates: %w", err)
	}
	if _, err := pki.WriteAdminKubeconfig(o.CertsDir(), "https://"+o.APIAddr); err != nil {
		return fmt.Errorf("stack: admin kubeconfig: %w", err)
	}
	return nil
}

func (o Options) cert(name string) string { return filepath.Join(o.CertsDir(), name) }

// apiserverSecurityArgs turn on TLS, client certificate and
// ServiceAccount token authentication, and RBAC with the Node authorizer
// (the default once an authenticator is configured).
func (o Options) apiserverSecurityArgs() []string {
	return []string{
		"--tls-cert-file", o.cert(pki.APIServerCert), "--tls-key-file", o.cert(pki.APIServerKey),
		"--client-ca-file", o.cert(pki.CACert),
		"--service-account-key-file", o.cert(pki.SAPub),
		"--service-account-signing-key-file", o.cert(pki.SAKey),
	}
}

// identityArgs are the connection flags of a process running as identity
// (a controller binary's name or a node name): the CA to verify the
// apiserver with and its own client certificate. None when insecure.
func (o Options) identityArgs(identity string) []string {
	if o.Insecure {
		return nil
	}
	if alias, ok := identityAliases[identity]; ok {
		identity = alias
	}
	return []string{"--tls-ca", o.cert(pki.CACert),
		"--client-cert-file", o.cert(identity + ".crt"), "--client-key-file", o.cert(identity + ".key")}
}

// identityAliases: binaries that run as another's identity. The example
// plugin scheduler is a scheduler (examples/scheduler-plugin) and needs
// exactly the scheduler's role.
var identityAliases = map[string]string{"scheduler-plugin": "scheduler"}

// adminArgs are identityArgs of the admin.
func (o Options) adminArgs() []string {
	if o.Insecure {
		return nil
	}
	return []string{"--tls-ca", o.cert(pki.CACert),
		"--client-cert-file", o.cert(pki.AdminCert), "--client-key-file", o.cert(pki.AdminKey)}
}

// tokenctlArgs give tokenctl the key it signs ServiceAccount tokens with.
func (o Options) tokenctlArgs() []string {
	if o.Insecure {
		return nil
	}
	return []string{"--service-account-private-key-file", o.cert(pki.SAKey), "--root-ca-file", o.cert(pki.CACert)}
}

// ClientOptions connect to the stack's apiserver as the admin.
func (s *Stack) ClientOptions() client.Options {
	o := s.opts
	if o.Insecure {
		return client.Options{Address: o.APIAddr}
	}
	return client.Options{Address: o.APIAddr, TLSCA: o.cert(pki.CACert),
		ClientCertFile: o.cert(pki.AdminCert), ClientKeyFile: o.cert(pki.AdminKey)}
}

// Kubeconfig is the admin's kubeconfig for kubectl and kpctl ("" when
// insecure: then --server http://APIAddr needs none).
func (s *Stack) Kubeconfig() string {
	if s.opts.Insecure {
		return ""
	}
	return s.opts.cert(pki.AdminKubeconfig)
}

// APIURL is the base URL of the apiserver's REST side.
func (s *Stack) APIURL() string {
	if s.opts.Insecure {
		return "http://" + s.opts.APIAddr
	}
	return "https://" + s.opts.APIAddr
}

// HTTPClient reaches the REST side (and the service proxy) as the admin.
func (s *Stack) HTTPClient() (*http.Client, error) {
	o := s.opts
	if o.Insecure {
		return &http.Client{}, nil
	}
	ca, err := os.ReadFile(o.cert(pki.CACert))
	if err != nil {
		return nil, fmt.Errorf("stack: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("stack: %s holds no certificate", o.cert(pki.CACert))
	}
	kp, err := tls.LoadX509KeyPair(o.cert(pki.AdminCert), o.cert(pki.AdminKey))
	if err != nil {
		return nil, fmt.Errorf("stack: admin certificate: %w", err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}}}, nil
}
