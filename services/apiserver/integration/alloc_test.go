package integration_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

func newService(name, typ string, ports ...int32) *kplanev1.Object {
	spec := &kplanev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": name}}
	for i, p := range ports {
		sp := &kplanev1.ServicePort{Port: p}
		if len(ports) > 1 {
			sp.Name = "p" + strconv.Itoa(i)
		}
		spec.Ports = append(spec.Ports, sp)
	}
	return kplanev1.MustWrap(&kplanev1.Service{Metadata: meta("default", name, nil), Spec: spec})
}

// allocationKeys reads the allocation records straight from etcd.
func allocationKeys(t *testing.T, srv *testserver.Server) map[string]string {
	t.Helper()
	resp, err := srv.API().Store().Client().Get(testCtx(t), "/registry/allocations/", clientv3.WithPrefix())
	must(t, err, "read allocation keys")
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func ipKey(ip string) string              { return "/registry/allocations/serviceips/" + ip }
func portKey(p int32) string              { return "/registry/allocations/servicenodeports/" + strconv.Itoa(int(p)) }
func clusterIP(o *kplanev1.Object) string { return o.GetService().GetSpec().GetClusterIp() }

func TestServiceClusterIPAllocatedAndReleased(t *testing.T) {
	srv, c := start(t)
	ctx := testCtx(t)

	web := create(t, c, newService("web", "", 80))
	ip := clusterIP(web)
	addr, err := netip.ParseAddr(ip)
	must(t, err, "parse clusterIP "+ip)
	if !strategy.DefaultServiceClusterIPRange.Contains(addr) {
		t.Fatalf("clusterIP %s is outside the default range %s", ip, strategy.DefaultServiceClusterIPRange)
	}
	if got := web.GetService().GetSpec().GetClusterIps(); len(got) != 1 || got[0] != ip {
		t.Fatalf("clusterIPs = %v, want [%s]", got, ip)
	}
	if v := allocationKeys(t, srv)[ipKey(ip)]; v != "Service default/web "+web.Meta().Uid {
		t.Fatalf("allocation record of %s = %q", ip, v)
	}

	np := create(t, c, newService("np", "NodePort", 80, 443))
	for _, p := range np.GetService().GetSpec().GetPorts() {
		if !strategy.DefaultServiceNodePortRange.Contains(int(p.NodePort)) {
			t.Fatalf("nodePort %d outside %v", p.NodePort, strategy.DefaultServiceNodePortRange)
		}
	}
	ports := np.GetService().GetSpec().GetPorts()
	if ports[0].NodePort == ports[1].NodePort {
		t.Fatalf("two ports got one nodePort %d", ports[0].NodePort)
	}

	headless := newService("headless", "", 80)
	headless.GetService().Spec.ClusterIp = "None"
	headless = create(t, c, headless)
	ext := kplanev1.MustWrap(&kplanev1.Service{Metadata: meta("default", "ext", nil),
		Spec: &kplanev1.ServiceSpec{Type: "ExternalName", ExternalName: "db.example.com"}})
	ext = create(t, c, ext)
	if clusterIP(headless) != "None" || clusterIP(ext) != "" {
		t.Fatalf("headless clusterIP %q, ExternalName clusterIP %q", clusterIP(headless), clusterIP(ext))
	}
	// web's IP, np's IP and two node ports: nothing for headless or ExternalName.
	if keys := allocationKeys(t, srv); len(keys) != 4 {
		t.Fatalf("allocation records = %v, want 4", keys)
	}

	// Deleting releases everything the service held, in the same transaction.
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: "default", Name: "np"})
	must(t, err, "delete np")
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: "default", Name: "web"})
	must(t, err, "delete web")
	if keys := allocationKeys(t, srv); len(keys) != 0 {
		t.Fatalf("allocation records after delete = %v", keys)
	}
	// The released IP can be asked for by name again.
	again := newService("again", "", 80)
	again.GetService().Spec.ClusterIp = ip
	if got := clusterIP(create(t, c, again)); got != ip {
		t.Fatalf("clusterIP = %s, want the released %s", got, ip)
	}
}

func TestServiceUserGivenClusterIP(t *testing.T) {
	_, c := start(t, testserver.WithServiceClusterIPRange(netip.MustParsePrefix("10.96.0.0/24")))
	ctx := testCtx(t)
	a := newService("a", "", 80)
	a.GetService().Spec.ClusterIp = "10.96.0.10"
	if got := clusterIP(create(t, c, a)); got != "10.96.0.10" {
		t.Fatalf("clusterIP = %s", got)
	}
	b := newService("b", "", 80)
	b.GetService().Spec.ClusterIp = "10.96.0.10"
	_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: b})
	requireCode(t, err, codes.InvalidArgument, "spec.clusterIPs", "10.96.0.10", "provided IP is already allocated")

	for _, bad := range []string{"10.97.0.1", "10.96.0.0", "10.96.0.255"} {
		b.GetService().Spec.ClusterIp, b.GetService().Spec.ClusterIps = bad, nil
		_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: b})
		requireCode(t, err, codes.InvalidArgument, "spec.clusterIPs", "provided IP is not in the valid range", "10.96.0.0/24")
	}
	_, err = c.Get(ctx, &kplanev1.GetRequest{Kind: "Service", Namespace: "default", Name: "b"})
	requireCode(t, err, codes.NotFound)
	b.GetService().Spec.ClusterIp, b.GetService().Spec.ClusterIps = "10.96.0.11", []string{"10.96.0.11", "10.96.0.12"}
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: b})
	requireCode(t, err, codes.InvalidArgument, "spec.clusterIPs", "single-stack")
}

func TestServiceClusterIPImmutableAndTypeChanges(t *testing.T) {
	srv, c := start(t)
	ctx := testCtx(t)
	web := create(t, c, newService("web", "NodePort", 80))
	ip, port := clusterIP(web), web.GetService().Spec.Ports[0].NodePort

	moved := cloneObj(web)
	moved.GetService().Spec.ClusterIp, moved.GetService().Spec.ClusterIps = "127.16.0.77", nil
	_, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: moved})
	requireCode(t, err, codes.InvalidArgument, "spec.clusterIP", "immutable")

	// A manifest written back without the allocated values keeps them.
	bare := newService("web", "NodePort", 80)
	got := update(t, c, bare)
	if clusterIP(got) != ip || got.GetService().Spec.Ports[0].NodePort != port {
		t.Fatalf("update without clusterIP/nodePort: got %s/%d, want %s/%d", clusterIP(got), got.GetService().Spec.Ports[0].NodePort, ip, port)
	}

	// NodePort -> ClusterIP releases the node port.
	toCIP := cloneObj(got)
	toCIP.GetService().Spec.Type = "ClusterIP"
	got = update(t, c, toCIP)
	if got.GetService().Spec.Ports[0].NodePort != 0 {
		t.Fatalf("nodePort kept after type ClusterIP: %d", got.GetService().Spec.Ports[0].NodePort)
	}
	if _, held := allocationKeys(t, srv)[portKey(port)]; held {
		t.Fatalf("node port %d still recorded after type change", port)
	}
	other := newService("other", "NodePort", 80)
	other.GetService().Spec.Ports[0].NodePort = port
	if p := create(t, c, other).GetService().Spec.Ports[0].NodePort; p != port {
		t.Fatalf("released node port: got %d, want %d", p, port)
	}

	// ClusterIP -> ExternalName releases the IP; back again allocates one.
	toExt := cloneObj(got)
	toExt.GetService().Spec.Type, toExt.GetService().Spec.ExternalName = "ExternalName", "db.example.com"
	got = update(t, c, toExt)
	if clusterIP(got) != "" {
		t.Fatalf("ExternalName kept clusterIP %s", clusterIP(got))
	}
	if _, held := allocationKeys(t, srv)[ipKey(ip)]; held {
		t.Fatalf("IP %s still recorded after ExternalName", ip)
	}
	back := cloneObj(got)
	back.GetService().Spec.Type, back.GetService().Spec.ExternalName = "ClusterIP", ""
	got = update(t, c, back)
	if clusterIP(got) == "" || allocationKeys(t, srv)[ipKey(clusterIP(got))] == "" {
		t.Fatalf("back to ClusterIP: clusterIP %q not allocated", clusterIP(got))
	}

	// A nodePort another service holds is refused on update, naming the field.
	np := create(t, c, newService("np", "NodePort", 80))
	steal := cloneObj(np)
	steal.GetService().Spec.Ports[0].NodePort = port
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: steal})
	requireCode(t, err, codes.InvalidArgument, "spec.ports[0].nodePort", "provided port is already allocated")
	outside := cloneObj(np)
	outside.GetService().Spec.Ports[0].NodePort = 8080
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: outside})
	requireCode(t, err, codes.InvalidArgument, "spec.ports[0].nodePort", "not in the valid range", "30000-32767")
}

func cloneObj(o *kplanev1.Object) *kplanev1.Object { return proto.Clone(o).(*kplanev1.Object) }

// TestServiceAllocationExhaustion fills a /29 (6 usable IPs) and a
// 3-port node port range: the next write is refused, a delete makes room.
func TestServiceAllocationExhaustion(t *testing.T) {
	_, c := start(t,
		testserver.WithServiceClusterIPRange(netip.MustParsePrefix("10.0.0.0/29")),
		testserver.WithServiceNodePortRange(strategy.PortRange{Base: 30000, Size: 3}))
	ctx := testCtx(t)
	seen := map[string]bool{}
	for i := range 6 {
		ip := clusterIP(create(t, c, newService(fmt.Sprintf("s%d", i), "", 80)))
		if seen[ip] || ip == "10.0.0.0" || ip == "10.0.0.7" {
			t.Fatalf("bad or repeated IP %s", ip)
		}
		seen[ip] = true
	}
	_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: newService("full", "", 80)})
	requireCode(t, err, codes.ResourceExhausted, "spec.clusterIPs", "range is full", "10.0.0.0/29")
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: "default", Name: "s3"})
	must(t, err, "delete s3")
	create(t, c, newService("full", "", 80))

	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: "default", Name: "s0"})
	must(t, err, "delete s0")
	create(t, c, newService("np", "NodePort", 80, 81, 82))
	_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: "default", Name: "s1"})
	must(t, err, "delete s1")
	_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: newService("np2", "NodePort", 80)})
	requireCode(t, err, codes.ResourceExhausted, "spec.ports", "range is full", "30000-30002")
}

// TestServiceAllocationConcurrent: many goroutines create services at
// once into a range smaller than their number. Exactly the range's size
// succeed, no two share an IP or a node port, the rest are refused as full.
func TestServiceAllocationConcurrent(t *testing.T) {
	srv, c := start(t,
		testserver.WithServiceClusterIPRange(netip.MustParsePrefix("10.1.0.0/27")), // 30 usable
		testserver.WithServiceNodePortRange(strategy.PortRange{Base: 31000, Size: 40}))
	const writers = 40
	var (
		mu      sync.Mutex
		ips     = map[string]string{}
		ports   = map[int32]string{}
		full    int
		wg      sync.WaitGroup
		failure error
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("svc-%d", i)
			resp, err := c.Create(testCtx(t), &kplanev1.CreateRequest{Object: newService(name, "NodePort", 80)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status.Code(err) == codes.ResourceExhausted:
				full++
			case err != nil:
				failure = fmt.Errorf("%s: %w", name, err)
			default:
				ip, port := clusterIP(resp.Object), resp.Object.GetService().Spec.Ports[0].NodePort
				if prev, dup := ips[ip]; dup {
					failure = fmt.Errorf("%s and %s share IP %s", prev, name, ip)
				}
				if prev, dup := ports[port]; dup {
					failure = fmt.Errorf("%s and %s share node port %d", prev, name, port)
				}
				ips[ip], ports[port] = name, name
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if len(ips) != 30 || full != writers-30 {
		t.Fatalf("%d created, %d refused as full; want 30 and %d", len(ips), full, writers-30)
	}
	// Refused creates left nothing behind: exactly 30 IPs and 30 ports recorded.
	if keys := allocationKeys(t, srv); len(keys) != 60 {
		t.Fatalf("%d allocation records, want 60", len(keys))
	}
}

// TestServiceAllocationRestartAndRepair: allocations survive a restart;
// the repair at start frees a record no service holds and records a
// service's IP whose record is missing.
func TestServiceAllocationRestartAndRepair(t *testing.T) {
	srv, c := start(t)
	web := create(t, c, newService("web", "NodePort", 80))
	ip, port := clusterIP(web), web.GetService().Spec.Ports[0].NodePort

	cli := srv.API().Store().Client()
	ctx := testCtx(t)
	_, err := cli.Put(ctx, ipKey("127.16.9.9"), "Service default/gone 1234")
	must(t, err, "write a stray record")
	_, err = cli.Delete(ctx, ipKey(ip))
	must(t, err, "drop web's record")

	srv.Restart(t)
	keys := allocationKeys(t, srv)
	if _, stray := keys[ipKey("127.16.9.9")]; stray {
		t.Fatalf("stray record survived the repair at start: %v", keys)
	}
	if keys[ipKey(ip)] != "Service default/web "+web.Meta().Uid || keys[portKey(port)] == "" {
		t.Fatalf("web's records after repair: %v", keys)
	}
	// The repaired record is enforced.
	dup := newService("dup", "", 80)
	dup.GetService().Spec.ClusterIp = ip
	_, err = srv.Client().Create(ctx, &kplanev1.CreateRequest{Object: dup})
	requireCode(t, err, codes.InvalidArgument, "provided IP is already allocated")

	// The periodic repair (here: on demand) does the same while running.
	cli = srv.API().Store().Client()
	_, err = cli.Put(ctx, portKey(32000), "Service default/gone 1234")
	must(t, err, "write a stray record")
	must(t, srv.API().RepairAllocations(ctx), "repair")
	if _, stray := allocationKeys(t, srv)[portKey(32000)]; stray {
		t.Fatal("stray node port record survived the repair")
	}
	// And after the restart every service still has distinct values.
	seen := map[string]bool{ip: true}
	for i := range 20 {
		got := clusterIP(create(t, c, newService(fmt.Sprintf("s%d", i), "", 80)))
		if seen[got] {
			t.Fatalf("IP %s handed out twice", got)
		}
		seen[got] = true
	}
}

// TestServiceAllocationPeriodicRepair: with --allocation-repair-interval
// the loop frees a stray record on its own.
func TestServiceAllocationPeriodicRepair(t *testing.T) {
	srv, _ := start(t, testserver.WithAllocationRepairInterval(100*time.Millisecond))
	ctx := testCtx(t)
	_, err := srv.API().Store().Client().Put(ctx, ipKey("127.16.3.3"), "Service default/gone 1")
	must(t, err, "write a stray record")
	waitFor(t, 30*time.Second, "the stray record freed", func() bool {
		_, held := allocationKeys(t, srv)[ipKey("127.16.3.3")]
		return !held
	})
}

// TestServiceAllocationChurn: writers create, retype and delete services
// at random in small ranges, concurrently. Afterwards the records are
// exactly the values the services hold, no value is held twice, and a
// repair finds nothing to do.
func TestServiceAllocationChurn(t *testing.T) {
	srv, c := start(t,
		testserver.WithServiceClusterIPRange(netip.MustParsePrefix("10.2.0.0/28")), // 14 usable
		testserver.WithServiceNodePortRange(strategy.PortRange{Base: 30100, Size: 12}))
	const writers, ops = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for i := range ops {
				name := fmt.Sprintf("s%d", rng.IntN(12)) // writers share names: they race on them
				ctx := testCtx(t)
				var err error
				switch rng.IntN(4) {
				case 0, 1:
					svc := newService(name, []string{"ClusterIP", "NodePort", "LoadBalancer"}[rng.IntN(3)], 80, 81)
					if rng.IntN(4) == 0 {
						svc.GetService().Spec.ClusterIp = fmt.Sprintf("10.2.0.%d", 1+rng.IntN(14))
					}
					if rng.IntN(6) == 0 {
						svc.GetService().Spec.Type, svc.GetService().Spec.ClusterIp = "ClusterIP", "None"
					}
					_, err = c.Create(ctx, &kplanev1.CreateRequest{Object: svc})
				case 2:
					_, err = c.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Service", Namespace: "default", Name: name})
				case 3:
					var resp *kplanev1.GetResponse
					if resp, err = c.Get(ctx, &kplanev1.GetRequest{Kind: "Service", Namespace: "default", Name: name}); err == nil {
						o := resp.Object
						o.GetService().Spec.Type = []string{"ClusterIP", "NodePort", "ExternalName"}[rng.IntN(3)]
						if o.GetService().Spec.Type == "ExternalName" {
							o.GetService().Spec.ExternalName = "x.example.com"
						} else if o.GetService().Spec.ClusterIp != "None" {
							o.GetService().Spec.ExternalName = ""
						}
						_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: o})
					}
				}
				switch status.Code(err) {
				case codes.OK, codes.NotFound, codes.AlreadyExists, codes.ResourceExhausted, codes.Aborted, codes.InvalidArgument:
					// Expected outcomes of racing writers in full ranges.
				default:
					errs <- fmt.Errorf("writer %d op %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	want := map[string]string{}
	for _, o := range list(t, c, &kplanev1.ListRequest{Kind: "Service", Namespace: "default"}).GetItems() {
		s := o.GetService().Spec
		holder := "Service default/" + o.Meta().Name + " " + o.Meta().Uid
		claim := func(key string) {
			if prev, dup := want[key]; dup {
				t.Fatalf("%s held by %s and %s", key, prev, holder)
			}
			want[key] = holder
		}
		if s.Type != "ExternalName" && s.ClusterIp != "None" {
			claim(ipKey(s.ClusterIp))
		}
		if s.Type == "NodePort" || s.Type == "LoadBalancer" {
			for _, p := range s.Ports {
				claim(portKey(p.NodePort))
			}
		}
	}
	got := allocationKeys(t, srv)
	if len(got) != len(want) {
		t.Fatalf("%d records, %d held values:\nrecords %v\nheld %v", len(got), len(want), got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("record %s = %q, want %q", k, got[k], v)
		}
	}
	rep, err := srv.API().Store().RepairAllocations(testCtx(t))
	must(t, err, "repair")
	if len(rep.Freed)+len(rep.Recorded)+len(rep.Conflicts) > 0 {
		t.Fatalf("repair after churn had work: %+v", rep)
	}
	t.Logf("after churn: %d services hold %d values", len(list(t, c, &kplanev1.ListRequest{Kind: "Service", Namespace: "default"}).GetItems()), len(want))
}
