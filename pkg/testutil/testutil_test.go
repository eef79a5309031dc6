package testutil

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder captures Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}

	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				panic(p)
			}
		}()
		Eventually(r, 30*time.Millisecond, "never", func() bool { return false })
	}()
	if !strings.Contains(r.failed, "timed out") {
		t.Fatalf("a condition that never holds did not fail the test: %q", r.failed)
	}
}

func TestGoldenAndSyncBuffer(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_, _ = b.Write([]byte("x"))
		}
	}()
	<-done
	if got := b.String(); len(got) != 100 {
		t.Fatalf("buffer holds %d bytes, want 100", len(got))
	}

	path := t.TempDir() + "/out.golden"
	Golden(t, path, "hello\n", true) // -update writes the file
	Golden(t, path, "hello\n", false)
	r := &errorRecorder{TB: t}
	Golden(r, path, "changed\n", false)
	if !strings.Contains(r.errors, "differs") {
		t.Fatalf("a changed output did not fail the comparison: %q", r.errors)
	}
}

// errorRecorder captures Errorf instead of failing the test.
type errorRecorder struct {
	testing.TB
	errors string
}

func (r *errorRecorder) Helper() {}
func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errors += format
}

func TestForEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	if err := ForEach(1000, 8, func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[i]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if seen[i] != 1 {
			t.Fatalf("ForEach called fn(%d) %d times, want once", i, seen[i])
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("ForEach called fn for %d indices, want 1000", len(seen))
	}

	// The first error comes back and no index is started after it.
	var calls atomic.Int64
	boom := errors.New("boom")
	err := ForEach(1000, 1, func(i int) error {
		calls.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("ForEach returned %v, want %v", err, boom)
	}
	if n := calls.Load(); n != 11 {
		t.Fatalf("with one worker, fn ran %d times after failing at index 10, want 11", n)
	}
	if err := ForEach(0, 0, func(int) error { return boom }); err != nil {
		t.Fatalf("ForEach over nothing returned %v", err)
	}
}
