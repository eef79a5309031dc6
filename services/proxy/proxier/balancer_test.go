package proxier

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clientA = netip.MustParseAddr("127.0.0.2")
	clientB = netip.MustParseAddr("127.0.0.3")
)

func pick(t *testing.T, b *Balancer, client netip.Addr, now time.Time, exclude ...string) string {
	t.Helper()
	ep, ok := b.Next(client, now, exclude)
	if !ok {
		t.Fatalf("Next(%v): no endpoint", client)
	}
	return ep
}

func TestBalancerRoundRobin(t *testing.T) {
	b := NewBalancer()
	if ep, ok := b.Next(clientA, t0, nil); ok {
		t.Fatalf("Next without endpoints = %q, want none", ep)
	}
	b.Update([]string{"a", "b", "c"}, 0)
	var got []string
	for range 6 {
		got = append(got, pick(t, b, clientA, t0))
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
	// An excluded endpoint (a failed dial) is skipped.
	if ep := pick(t, b, clientA, t0, "a"); ep != "b" {
		t.Fatalf("pick excluding a = %s, want b", ep)
	}
	if ep, ok := b.Next(clientA, t0, []string{"a", "b", "c"}); ok {
		t.Fatalf("pick excluding every endpoint = %s, want none", ep)
	}
}

func TestBalancerUpdateKeepsGoing(t *testing.T) {
	b := NewBalancer()
	b.Update([]string{"a", "b", "c"}, 0)
	pick(t, b, clientA, t0) // a
	pick(t, b, clientA, t0) // b
	b.Update([]string{"a", "c"}, 0)
	seen := map[string]int{}
	for range 4 {
		seen[pick(t, b, clientA, t0)]++
	}
	if seen["a"] != 2 || seen["c"] != 2 || len(seen) != 2 {
		t.Fatalf("after removing b: picks %v, want a and c twice each", seen)
	}
	b.Update(nil, 0)
	if ep, ok := b.Next(clientA, t0, nil); ok {
		t.Fatalf("Next after every endpoint left = %q, want none", ep)
	}
	b.Update([]string{"d"}, 0)
	if ep := pick(t, b, clientA, t0); ep != "d" {
		t.Fatalf("pick = %s, want d", ep)
	}
}

func TestBalancerAffinity(t *testing.T) {
	const timeout = 10800 * time.Second
	b := NewBalancer()
	b.Update([]string{"a", "b", "c"}, timeout)
	first := pick(t, b, clientA, t0)
	other := pick(t, b, clientB, t0)
	if first == other {
		t.Fatalf("two new clients got the same endpoint %s; round robin should spread them", first)
	}
	for i := range 10 {
		if ep := pick(t, b, clientA, t0.Add(time.Duration(i)*time.Hour)); ep != first {
			t.Fatalf("pick %d of client A = %s, want its endpoint %s", i, ep, first)
		}
	}
	// Idle longer than the timeout: picked afresh (round robin goes on).
	idle := t0.Add(9*time.Hour + timeout + time.Second)
	if ep := pick(t, b, clientA, idle); ep == first {
		t.Fatalf("after %v idle, client A still on %s", timeout, ep)
	}
	// A failed dial moves the client for good.
	now := idle.Add(time.Second)
	cur := pick(t, b, clientA, now)
	moved := pick(t, b, clientA, now, cur)
	if moved == cur {
		t.Fatalf("excluding %s still picked it", cur)
	}
	if ep := pick(t, b, clientA, now); ep != moved {
		t.Fatalf("after the failover client A is on %s, want %s", ep, moved)
	}
	// Its endpoint removed: the client moves, and stays.
	b.Update(without([]string{"a", "b", "c"}, moved), timeout)
	next := pick(t, b, clientA, now)
	if next == moved {
		t.Fatalf("client A still on removed endpoint %s", moved)
	}
	if ep := pick(t, b, clientA, now); ep != next {
		t.Fatalf("client A on %s, then %s: not sticky", next, ep)
	}
	// Turning affinity off forgets every client.
	b.Update([]string{"a", "b", "c"}, 0)
	if n := b.stickyClients(); n != 0 {
		t.Fatalf("%d sticky clients without affinity", n)
	}
}

func TestBalancerSweepsExpiredClients(t *testing.T) {
	b := NewBalancer()
	b.Update([]string{"a"}, time.Minute)
	for i := range 100 {
		pick(t, b, netip.AddrFrom4([4]byte{127, 1, 0, byte(i)}), t0)
	}
	if n := b.stickyClients(); n != 100 {
		t.Fatalf("%d sticky clients, want 100", n)
	}
	pick(t, b, clientA, t0.Add(2*time.Minute))
	if n := b.stickyClients(); n != 1 {
		t.Fatalf("after the timeout %d sticky clients remain, want only the new one", n)
	}
}

func without(s []string, x string) []string {
	var out []string
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}
