// Package testutil holds the helpers kplane's tests share across modules.
package testutil

import (
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
