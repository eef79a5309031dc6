package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func TestNewRejectsBadRanges(t *testing.T) {
	for _, cidr := range []string{"", "nonsense", "::1/64", "127.0.0.1/31", "127.0.0.1/32"} {
		if _, err := New(cidr); err == nil {
			t.Errorf("New(%q) succeeded, want an error", cidr)
		}
	}
}

func TestAllocate(t *testing.T) {
	tests := []struct {
		name   string
		cidr   string
		owners []string
		want   []string
		err    error
	}{
		{name: "first addresses skip the network address", cidr: "127.1.0.0/16", owners: []string{"a", "b"}, want: []string{"127.1.0.1", "127.1.0.2"}},
		{name: "same owner gets the same address", cidr: "127.1.0.0/16", owners: []string{"a", "a"}, want: []string{"127.1.0.1", "127.1.0.1"}},
		{name: "unmasked prefix is masked", cidr: "127.2.3.9/24", owners: []string{"a"}, want: []string{"127.2.3.1"}},
		{name: "a /30 has two usable addresses", cidr: "10.0.0.0/30", owners: []string{"a", "b", "c"}, want: []string{"10.0.0.1", "10.0.0.2", ""}, err: ErrExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.cidr)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range tc.owners {
				ip, err := a.Allocate(o)
				if tc.want[i] == "" {
					if !errors.Is(err, tc.err) {
						t.Fatalf("Allocate(%s) = %v, %v; want error %v", o, ip, err, tc.err)
					}
					continue
				}
				if err != nil || ip.String() != tc.want[i] {
					t.Fatalf("Allocate(%s) = %v, %v; want %s", o, ip, err, tc.want[i])
				}
			}
		})
	}
}

func TestReleaseAndNextFit(t *testing.T) {
	a, _ := New("10.0.0.0/29") // 6 usable
	for _, o := range []string{"a", "b", "c"} {
		if _, err := a.Allocate(o); err != nil {
			t.Fatal(err)
		}
	}
	a.Release("a")
	if _, ok := a.Lookup("a"); ok {
		t.Fatal("released owner still has an address")
	}
	ip, _ := a.Allocate("d")
	if ip.String() != "10.0.0.4" {
		t.Fatalf("next-fit: got %s, want 10.0.0.4 (not the just released .1)", ip)
	}
	if a.InUse() != 3 {
		t.Fatalf("InUse = %d, want 3", a.InUse())
	}
}

func TestReserve(t *testing.T) {
	a, _ := New("127.1.0.0/16")
	ip := netip.MustParseAddr("127.1.0.7")
	if err := a.Reserve("x", ip); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve("y", ip); err == nil {
		t.Fatal("reserving a held address for another owner succeeded")
	}
	for _, bad := range []string{"127.2.0.1", "127.1.0.0", "127.1.255.255"} {
		if err := a.Reserve("z", netip.MustParseAddr(bad)); err == nil {
			t.Errorf("Reserve(%s) succeeded, want an error", bad)
		}
	}
	// Allocation never hands out a reserved address.
	for i := 0; i < 10; i++ {
		got, err := a.Allocate(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		if got == ip {
			t.Fatalf("Allocate handed out the reserved %s", ip)
		}
	}
}
