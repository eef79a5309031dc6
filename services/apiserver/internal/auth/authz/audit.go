package authz

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	Time        time.Time `json:"time"`
	User        string    `json:"user"`
	Groups      []string  `json:"groups,omitempty"`
	Verb        string    `json:"verb"`
	APIGroup    string    `json:"apiGroup,omitempty"`
	Resource    string    `json:"resource"`
	Subresource string    `json:"subresource,omitempty"`
	Kind        string    `json:"kind,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	Name        string    `json:"name,omitempty"`
	// Decision is "allow" or "deny".
	Decision string `json:"decision"`
	// Code is the gRPC code the request ended with ("OK",
	// "PermissionDenied", "AlreadyExists", ...).
	Code   string `json:"code"`
	Reason string `json:"reason,omitempty"`
}

// AuditLog writes one JSON line per entry to a file. Each line goes out
// in one write(2) under a mutex, unbuffered, so concurrent requests never
// interleave and a line is on disk once Log returns.
type AuditLog struct {
	mu  sync.Mutex
	f   *os.File
	now func() time.Time
}

// OpenAuditLog opens (appending, creating) the file at path.
func OpenAuditLog(path string) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return &AuditLog{f: f, now: time.Now}, nil
}

// Log appends e, stamping its time when unset.
func (l *AuditLog) Log(e AuditEntry) error {
	if e.Time.IsZero() {
		e.Time = l.now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode audit entry: %w", err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("audit log closed")
	}
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("write audit log: %w", err)
	}
	return nil
}

// Close closes the file; later Logs fail.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
