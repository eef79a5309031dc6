// Package testutil holds the helpers kplane's tests share across modules.
package testutil

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// PollInterval is how often Eventually checks its condition.
const PollInterval = 10 * time.Millisecond

// Eventually polls cond until it holds, failing the test with what when d
// passes first. Tests wait on conditions with a deadline, never on sleeps.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(PollInterval) // the polling interval, not synchronisation
	}
}

// SyncBuffer is a bytes.Buffer that is safe to read while another
// goroutine writes to it (a logger, a command streaming a watch).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Golden compares got with the golden file at path, or rewrites the file
// when update is set (each test package owns its own -update flag).
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (go test -update creates it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// EnvInt reads a positive integer from the environment variable name
// (a benchmark's size knob), def when it is unset; anything else fails tb.
func EnvInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// ForEach calls fn(i) for every i in [0, n) on workers goroutines (at
// least one) and returns the first error fn returned; after an error no
// further i is started. For benchmarks that fill a store with many
// objects at once.
func ForEach(n, workers int, fn func(i int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error
		wg     sync.WaitGroup
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
