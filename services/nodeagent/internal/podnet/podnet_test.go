package podnet

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// inNewNetns runs fn on a locked thread inside a fresh network namespace
// (skipping the test without the privilege to make one), so that the
// host's interfaces are never touched.
func inNewNetns(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Skipf("read the network namespace: %v", err)
	}
	defer func() { _ = orig.Close() }() // a handle on the namespace, never written
	ns, err := netns.New()              // also switches this thread into it
	if err != nil {
		t.Skipf("cannot create a network namespace (needs CAP_SYS_ADMIN): %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Fatalf("restore the network namespace: %v", err)
		}
		if err := ns.Close(); err != nil {
			t.Errorf("close the test network namespace: %v", err)
		}
	}()
	fn()
}

func addrsOf(t *testing.T, l netlink.Link) []string {
	t.Helper()
	as, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out
}

func TestProgrammerAddRemoveSweep(t *testing.T) {
	inNewNetns(t, func() {
		// The new namespace's own lo plays the node's interface (dummy
		// links need a kernel module that may be missing).
		link, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		nodeAddr, _ := netlink.ParseAddr("10.213.0.11/16")
		if err := netlink.AddrAdd(link, nodeAddr); err != nil {
			t.Fatal(err)
		}
		cidr := netip.MustParsePrefix("10.213.128.0/24")

		// Loopback ranges and "none" program nothing.
		for _, c := range []struct {
			mode string
			cidr netip.Prefix
		}{{ModeAuto, netip.MustParsePrefix("127.64.0.0/24")}, {ModeNone, cidr}} {
			p, err := New(c.mode, netip.MustParseAddr("10.213.0.11"), c.cidr)
			if err != nil || p.Active() {
				t.Fatalf("New(%s, %s) = active %v, %v; want an inactive programmer", c.mode, c.cidr, p.Active(), err)
			}
		}
		if _, err := New(ModeAuto, netip.MustParseAddr("10.9.9.9"), cidr); err == nil {
			t.Fatal("New found an interface for an address no interface has")
		}

		p, err := New(ModeAuto, netip.MustParseAddr("10.213.0.11"), cidr)
		if err != nil {
			t.Fatal(err)
		}
		if p.Interface() != "lo" {
			t.Fatalf("interface %q, want lo (the one with the node IP)", p.Interface())
		}
		a, b := netip.MustParseAddr("10.213.128.1"), netip.MustParseAddr("10.213.128.2")
		for _, ip := range []netip.Addr{a, b, a} { // adding twice is fine
			if err := p.Add(ip); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"10.213.0.11/16", "10.213.128.1/32", "10.213.128.2/32", "127.0.0.1/8"}
		if got := addrsOf(t, link); !slices.Equal(got, want) {
			t.Fatalf("addresses %v, want %v", got, want)
		}
		for _, ip := range []netip.Addr{b, b} { // removing twice too
			if err := p.Remove(ip); err != nil {
				t.Fatal(err)
			}
		}
		want = slices.Delete(want, 2, 3)
		if got := addrsOf(t, link); !slices.Equal(got, want) {
			t.Fatalf("after removing %s: %v, want %v", b, got, want)
		}

		// A new agent (another Programmer) sweeps what no pod holds, and
		// never the node's own address.
		stale := netip.MustParseAddr("10.213.128.7")
		if err := p.Add(stale); err != nil {
			t.Fatal(err)
		}
		q, err := New(ModeAuto, netip.MustParseAddr("10.213.0.11"), cidr)
		if err != nil {
			t.Fatal(err)
		}
		removed, err := q.Sweep(cidr, func(ip netip.Addr) bool { return ip == a })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(removed, []netip.Addr{stale}) {
			t.Fatalf("swept %v, want [%s]", removed, stale)
		}
		if got := addrsOf(t, link); !slices.Equal(got, want) {
			t.Fatalf("after the sweep: %v, want %v", got, want)
		}
	})
}
