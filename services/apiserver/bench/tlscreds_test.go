package bench_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/kplane/kplane/pkg/pki"
)

// adminTLS reads what pki wrote to dir: the cluster CA as a root pool and
// the admin's client key pair. The benchmarks dial with bare gRPC (no
// pkg/client interceptors), so the figures are the apiserver's own.
func adminTLS(tb testing.TB, dir string) (*x509.CertPool, tls.Certificate) {
	tb.Helper()
	caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		tb.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		tb.Fatalf("%s holds no PEM certificate", filepath.Join(dir, pki.CACert))
	}
	admin, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.AdminCert), filepath.Join(dir, pki.AdminKey))
	if err != nil {
		tb.Fatal(err)
	}
	return roots, admin
}
