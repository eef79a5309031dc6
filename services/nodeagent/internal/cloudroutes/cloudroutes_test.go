package cloudroutes

import (
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"

	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func instance(id, name, ip string, st cloudsimv1.InstanceState) *cloudsimv1.Instance {
	return &cloudsimv1.Instance{Id: id, Name: name, State: st, Addresses: []*cloudsimv1.Address{{Type: "InternalIP", Address: ip}}}
}

func TestDesired(t *testing.T) {
	run := cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING
	instances := []*cloudsimv1.Instance{
		instance("i-1", "node-1", "10.213.0.11", run),
		instance("i-2", "node-2", "10.213.0.12", run),
		instance("i-3", "node-3", "10.213.0.13", cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED),
		{Id: "i-4", Name: "node-4", State: run}, // no address
	}
	routes := []*cloudsimv1.Route{
		{Name: "k-node-1", DestinationCidr: "10.213.128.0/24", TargetInstanceId: "i-1"},
		{Name: "k-node-2", DestinationCidr: "10.213.129.0/24", TargetInstanceId: "i-2"},
		{Name: "k-node-3", DestinationCidr: "10.213.130.0/24", TargetInstanceId: "i-3"},
		{Name: "k-node-4", DestinationCidr: "10.213.131.0/24", TargetInstanceId: "i-4"},
		{Name: "k-ghost", DestinationCidr: "10.213.132.0/24", TargetInstanceId: "i-9"},
	}
	got := Desired(routes, instances, "node-1")
	want := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.213.129.0/24"): netip.MustParseAddr("10.213.0.12")}
	if !maps.Equal(got, want) {
		t.Fatalf("Desired = %v, want %v (own, terminated, address-less and unknown targets left out)", got, want)
	}
}

// TestApplyInNetns programs routes in a fresh network namespace: added,
// changed, removed, and a route it does not own left alone.
func TestApplyInNetns(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Skipf("read the network namespace: %v", err)
	}
	defer func() { _ = orig.Close() }()
	ns, err := netns.New()
	if err != nil {
		t.Skipf("cannot create a network namespace (needs CAP_SYS_ADMIN): %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Fatalf("restore the network namespace: %v", err)
		}
		_ = ns.Close()
	}()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.213.0.11/16")
	if err := netlink.AddrAdd(lo, addr); err != nil {
		t.Fatal(err)
	}
	// A route somebody else owns (the default protocol): never touched.
	other, _ := netlink.ParseIPNet("10.250.0.0/24")
	if err := netlink.RouteAdd(&netlink.Route{Dst: other, Gw: netip.MustParseAddr("10.213.0.99").AsSlice()}); err != nil {
		t.Fatal(err)
	}
	ours := func() map[string]string {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rs {
			out[r.Dst.String()] = r.Gw.String()
		}
		return out
	}
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	log := hclog.NewNullLogger()
	steps := []struct {
		want map[netip.Prefix]netip.Addr
		got  map[string]string
	}{
		{map[netip.Prefix]netip.Addr{p("10.213.129.0/24"): a("10.213.0.12"), p("10.213.130.0/24"): a("10.213.0.13")},
			map[string]string{"10.213.129.0/24": "10.213.0.12", "10.213.130.0/24": "10.213.0.13"}},
		{map[netip.Prefix]netip.Addr{p("10.213.129.0/24"): a("10.213.0.14")},
			map[string]string{"10.213.129.0/24": "10.213.0.14"}},
		{map[netip.Prefix]netip.Addr{}, map[string]string{}},
	}
	for i, s := range steps {
		if err := Apply(maps.Clone(s.want), log); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := ours(); !maps.Equal(got, s.got) {
			t.Fatalf("step %d: routes %v, want %v", i, got, s.got)
		}
	}
	all, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(all, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == "10.250.0.0/24" }) {
		t.Fatal("a route this package does not own was removed")
	}
}
