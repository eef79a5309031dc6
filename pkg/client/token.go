package client

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tokenCredentials is a grpc PerRPCCredentials sending a bearer token. For a
// token file, every call stats the file and re-reads it when its size or
// modification time changed: a stat is cheap next to a network round trip,
// and rotation is then visible on the very next call without a watcher
// goroutine to manage.
type tokenCredentials struct {
	secure bool
	path   string // empty for a static token
	log    hclog.Logger

	mu      sync.Mutex
	token   string
	modTime time.Time
	size    int64
}

func newStaticToken(token string, secure bool) *tokenCredentials {
	return &tokenCredentials{secure: secure, token: strings.TrimSpace(token)}
}

func newFileToken(path string, secure bool, log hclog.Logger) (*tokenCredentials, error) {
	t := &tokenCredentials{secure: secure, path: path, log: log}
	if err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// reload re-reads the token file when it changed. Callers hold t.mu or own t.
func (t *tokenCredentials) reload() error {
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("client: token file: %w", err)
	}
	if t.token != "" && fi.ModTime().Equal(t.modTime) && fi.Size() == t.size {
		return nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("client: token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("client: token file %s is empty", t.path)
	}
	if t.token != "" && t.token != tok {
		t.log.Info("bearer token reloaded", "file", t.path)
	}
	t.token, t.modTime, t.size = tok, fi.ModTime(), fi.Size()
	return nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *tokenCredentials) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path != "" {
		if err := t.reload(); err != nil {
			// A token that was valid a moment ago is a better bet than failing
			// every call while a rotation is half done.
			if t.token == "" {
				return nil, status.Error(codes.Unauthenticated, err.Error())
			}
			t.log.Warn("cannot re-read token file; using the previous token", "error", err)
		}
	}
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials. Dial
// has already decided whether plaintext is acceptable, so this only insists
// on TLS when TLS was configured.
func (t *tokenCredentials) RequireTransportSecurity() bool { return t.secure }
