package authz

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestAuditLogConcurrent: lines written from many goroutines are each
// whole JSON objects, none lost, and on disk when Log returns.
func TestAuditLogConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := l.Log(AuditEntry{User: fmt.Sprintf("u%d", w), Verb: "create", Resource: "pods", Name: fmt.Sprintf("p%d", i), Decision: "allow", Code: "OK"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Read before Close: nothing is buffered in the process.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("torn line %q: %v", sc.Text(), err)
		}
		if e.Time.IsZero() {
			t.Fatal("entry without time")
		}
		seen[e.User+"/"+e.Name] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct lines, want %d", len(seen), writers*each)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Log(AuditEntry{}); err == nil {
		t.Fatal("Log after Close succeeded")
	}
}

func TestAuditLogOpenFails(t *testing.T) {
	if _, err := OpenAuditLog(filepath.Join(t.TempDir(), "missing-dir", "audit.log")); err == nil {
		t.Fatal("opening a log in a missing directory succeeded")
	}
}
