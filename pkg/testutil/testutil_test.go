package testutil

import (
	"strings"
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
