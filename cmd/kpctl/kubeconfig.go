package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// connSettings is where and how to reach the apiserver once the flags,
// the environment and the kubeconfig are combined.
type connSettings struct {
	server           string // host:port
	secure           bool
	token, tokenFile string
	tlsCA            string
	caData           []byte
	cert, key        string
	certData         []byte
	keyData          []byte
}

// settings combines the global flags with the kubeconfig's current
// context. Flags (and KPLANE_SERVER/KPLANE_TOKEN) win field by field for
// the server and the CA; credentials come from the flags when any is
// given, else all from the kubeconfig, so a --token is never sent beside
// the kubeconfig's certificate (which the server would prefer).
func (g *globals) settings() (connSettings, error) {
	s := connSettings{server: g.server, token: g.token, tokenFile: g.tokenFile, tlsCA: g.tlsCA, cert: g.clientCert, key: g.clientKey}
	if g.tokenFile != "" && s.token == g.envToken {
		s.token = "" // an explicit --token-file beats the environment
	}
	kc, err := g.loadKubeconfig()
	if err != nil {
		return s, err
	}
	if kc != nil {
		if kc.Insecure {
			return s, errors.New("kubeconfig: insecure-skip-tls-verify is not supported; give the cluster's certificate-authority")
		}
		if !g.serverSet && kc.Host != "" {
			host, secure, err := hostPort(kc.Host)
			if err != nil {
				return s, err
			}
			s.server, s.secure = host, secure
		}
		if s.tlsCA == "" {
			s.tlsCA, s.caData = kc.CAFile, kc.CAData
		}
		if s.token == "" && s.tokenFile == "" && s.cert == "" && s.key == "" {
			s.cert, s.certData, s.key, s.keyData = kc.CertFile, kc.CertData, kc.KeyFile, kc.KeyData
			if kc.BearerTokenFile != "" {
				s.tokenFile = kc.BearerTokenFile
			} else {
				s.token = kc.BearerToken
			}
		}
	}
	if s.tlsCA != "" || len(s.caData) > 0 {
		s.secure = true
	}
	if s.secure && s.tlsCA == "" && len(s.caData) == 0 {
		return s, fmt.Errorf("apiserver %s is https but no CA is given (--tls-ca or the kubeconfig's certificate-authority)", s.server)
	}
	return s, nil
}

// hostPort turns a kubeconfig server URL into host:port.
func hostPort(server string) (string, bool, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "", false, fmt.Errorf("kubeconfig: server %q: want a URL such as https://127.0.0.1:6443", server)
	}
	secure := u.Scheme == "https"
	if !secure && u.Scheme != "http" {
		return "", false, fmt.Errorf("kubeconfig: server %q: scheme must be https or http", server)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if secure {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	return host, secure, nil
}

// loadKubeconfig reads the kubeconfig --kubeconfig, $KUBECONFIG (a path
// list, merged as kubectl merges it) or $HOME/.kube/config names and
// returns its current context's settings, or nil when there is none.
func (g *globals) loadKubeconfig() (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: g.kubeconfig}
	if g.kubeconfig == "" {
		if env := g.getenv("KUBECONFIG"); env != "" {
			rules.Precedence = filepath.SplitList(env)
		} else if home := g.getenv("HOME"); home != "" {
			rules.Precedence = []string{filepath.Join(home, ".kube", "config")}
		}
	}
	if rules.ExplicitPath == "" && len(rules.Precedence) == 0 {
		return nil, nil
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if raw.CurrentContext == "" {
		if g.kubeconfig != "" {
			return nil, fmt.Errorf("kubeconfig %s: no current-context", g.kubeconfig)
		}
		return nil, nil
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*raw, "", &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// readTokenFile reads a bearer token file (for the REST side, which
// reads it once).
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
