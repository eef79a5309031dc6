package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayDoublesUpToCap(t *testing.T) {
	b := Backoff{Duration: 5 * time.Millisecond, Factor: 2, Cap: 40 * time.Millisecond}
	want := []time.Duration{5, 10, 20, 40, 40}
	for i, w := range want {
		if got := b.Delay(i); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := b.Delay(1 << 20); got != b.Cap {
		t.Errorf("a long streak must saturate at the cap, got %v", got)
	}
	if got := (Backoff{Duration: time.Second, Factor: 2}).Delay(1 << 20); got <= 0 {
		t.Errorf("an uncapped long streak overflowed to %v", got)
	}
}

func TestDelayJitterStaysInRange(t *testing.T) {
	b := Backoff{Duration: 100 * time.Millisecond, Factor: 1, Jitter: 0.5}
	for range 100 {
		if d := b.Delay(3); d < 100*time.Millisecond || d > 150*time.Millisecond {
			t.Fatalf("jittered delay %v outside [100ms, 150ms]", d)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0): %v", err)
	}
}
