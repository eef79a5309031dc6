package endpoints

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a real apiserver with endpointsctl running against it.
type env struct {
	t   *testing.T
	ctx context.Context
	api *client.Client
	ctl *controllertest.Controller
}

func start(t *testing.T, args ...string) *env {
	t.Helper()
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() }) // closing a test client; nothing to report
	return &env{t: t, ctx: ctx, api: api, ctl: controllertest.Run(t, srv.Addr(), NewService(), args...)}
}

func (e *env) service(s *kplanev1.Service) *kplanev1.Service {
	e.t.Helper()
	out, err := client.Services(e.api).Create(e.ctx, s)
	if err != nil {
		e.t.Fatalf("create service %s: %v", s.GetMetadata().GetName(), err)
	}
	return out
}

// pod creates a pod with the given labels and ports, then gives it an IP
// and a Ready condition, as a node agent would.
func (e *env) pod(name, ip string, ready bool, lbls map[string]string, ports ...*kplanev1.ContainerPort) *kplanev1.Pod {
	e.t.Helper()
	p, err := client.Pods(e.api).Create(e.ctx, &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: lbls},
		Spec:     &kplanev1.PodSpec{NodeName: "node-1", Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Ports: ports}}},
	})
	if err != nil {
		e.t.Fatalf("create pod %s: %v", name, err)
	}
	p.Status.Phase = kplanev1.PodRunning
	p.Status.PodIp = ip
	return e.setReady(p, ready)
}

func (e *env) setReady(p *kplanev1.Pod, ready bool) *kplanev1.Pod {
	e.t.Helper()
	st := kplanev1.ConditionFalse
	if ready {
		st = kplanev1.ConditionTrue
	}
	p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: st, LastTransitionTime: timestamppb.Now()}}
	out, err := client.Pods(e.api).UpdateStatus(e.ctx, p)
	if err != nil {
		e.t.Fatalf("update status of pod %s: %v", p.GetMetadata().GetName(), err)
	}
	return out
}

func (e *env) endpoints(name string) (*kplanev1.Endpoints, bool) {
	ep, err := client.Endpoints(e.api).Get(e.ctx, "default", name)
	if client.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		e.t.Fatalf("get endpoints %s: %v", name, err)
	}
	return ep, true
}

// summary renders Endpoints as "ready=ip,ip notready=ip ports=name:port,..|..."
// per subset, for comparisons and failure messages.
func summary(ep *kplanev1.Endpoints) string {
	var parts []string
	for _, s := range Normalize(ep.GetSubsets()) {
		var ports []string
		for _, p := range s.GetPorts() {
			ports = append(ports, fmt.Sprintf("%s:%d", p.GetName(), p.GetPort()))
		}
		parts = append(parts, fmt.Sprintf("ready=%s notready=%s ports=%s",
			strings.Join(ips(s.GetAddresses()), ","), strings.Join(ips(s.GetNotReadyAddresses()), ","), strings.Join(ports, ",")))
	}
	return strings.Join(parts, "|")
}

func (e *env) waitFor(name, want string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := "<none>"
		if ep, ok := e.endpoints(name); ok {
			got = summary(ep)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for endpoints %s to be %q; last %q", name, want, got)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func (e *env) counter(name string) float64 {
	e.t.Helper()
	mfs, err := e.ctl.Context(e.t).Registry.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if h := mf.GetMetric()[0].GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	e.t.Fatalf("no metric %s", name)
	return 0
}

const (
	createsTotal = "kplane_endpointsctl_endpoints_creates_total"
	updatesTotal = "kplane_endpointsctl_endpoints_updates_total"
	deletesTotal = "kplane_endpointsctl_endpoints_deletes_total"
	latencyHist  = "kplane_endpointsctl_readiness_to_write_seconds"
)

func TestEndpointsFollowPods(t *testing.T) {
	e := start(t)
	s := svc("web", web, port("http", 80, kplanev1.IntOrStringFromInt32(8080)))
	e.service(s)
	e.waitFor("web", "") // created empty: no pods yet
	// Each step below waits for the one change it makes to show, so each
	// is exactly one Endpoints write; the count is checked further down.
	a := e.pod("a", "10.0.0.1", true, web)
	e.waitFor("web", "ready=10.0.0.1 notready= ports=http:8080")
	e.pod("b", "10.0.0.2", false, web)
	e.pod("db", "10.0.0.9", true, map[string]string{"app": "db"})
	e.waitFor("web", "ready=10.0.0.1 notready=10.0.0.2 ports=http:8080")
	ep, _ := e.endpoints("web")
	if ep.GetMetadata().GetLabels()["team"] != "a" {
		t.Errorf("labels %v: want the Service's copied", ep.GetMetadata().GetLabels())
	}
	if ep.GetSubsets()[0].GetPorts()[0].GetPort() != 8080 {
		t.Errorf("port = %v, want targetPort 8080", ep.GetSubsets()[0].GetPorts())
	}
	ref := ep.GetSubsets()[0].GetAddresses()[0].GetTargetRef()
	if ref.GetKind() != "Pod" || ref.GetName() != "a" || ref.GetUid() != a.GetMetadata().GetUid() {
		t.Errorf("targetRef = %v, want pod a", ref)
	}

	// Readiness flips move addresses.
	a = e.setReady(a, false)
	e.waitFor("web", "ready= notready=10.0.0.1,10.0.0.2 ports=http:8080")
	a = e.setReady(a, true)
	e.waitFor("web", "ready=10.0.0.1 notready=10.0.0.2 ports=http:8080")
	testutil.Eventually(t, 10*time.Second, "the latency histogram to count the readiness changes", func() bool {
		return e.counter(latencyHist) >= 2
	})

	// A change the Endpoints do not show is no write.
	a.Metadata.Annotations = map[string]string{"note": "irrelevant"}
	a, err := client.Pods(e.api).Update(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// A later, visible change proves the controller saw the first one.
	e.pod("c", "10.0.0.3", true, web)
	e.waitFor("web", "ready=10.0.0.1,10.0.0.3 notready=10.0.0.2 ports=http:8080")
	// Five visible changes: pods a and b, the two flips, pod c. A counter
	// moves after its write returns, so wait for it to reach the count
	// rather than read it the moment the write shows.
	const visible = 5
	testutil.Eventually(t, 10*time.Second, "the updates to be counted", func() bool { return e.counter(updatesTotal) >= visible })
	if got := e.counter(updatesTotal); got != visible {
		t.Errorf("%v Endpoints updates for %d visible changes and one invisible, want %d", got, visible, visible)
	}

	// A relabelled pod leaves; a deleting pod leaves.
	a.Metadata.Labels = map[string]string{"app": "other"}
	if _, err := client.Pods(e.api).Update(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	e.waitFor("web", "ready=10.0.0.3 notready=10.0.0.2 ports=http:8080")
	if _, err := client.Pods(e.api).Delete(e.ctx, "default", "c", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("web", "ready= notready=10.0.0.2 ports=http:8080")

	// A user's edit of managed Endpoints is undone.
	ep, _ = e.endpoints("web")
	ep.Subsets = nil
	if _, err := client.Endpoints(e.api).Update(e.ctx, ep); err != nil {
		t.Fatal(err)
	}
	e.waitFor("web", "ready= notready=10.0.0.2 ports=http:8080")

	// The selector changes on the fly.
	cur, err := client.Services(e.api).Get(e.ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Selector = map[string]string{"app": "db"}
	if _, err := client.Services(e.api).Update(e.ctx, cur); err != nil {
		t.Fatal(err)
	}
	e.waitFor("web", "ready=10.0.0.9 notready= ports=http:8080")

	// Deleting the Service deletes its Endpoints.
	if _, err := client.Services(e.api).Delete(e.ctx, "default", "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "endpoints web to be deleted", func() bool {
		_, ok := e.endpoints("web")
		return !ok
	})
	testutil.Eventually(t, 10*time.Second, "the delete to be counted", func() bool { return e.counter(deletesTotal) >= 1 })
	if c, d := e.counter(createsTotal), e.counter(deletesTotal); c != 1 || d != 1 {
		t.Errorf("creates %v deletes %v, want 1 each", c, d)
	}
}

func TestNamedAndMultiPortHeadless(t *testing.T) {
	e := start(t)
	s := svc("named", web, port("http", 80, kplanev1.IntOrStringFromString("web")), port("metrics", 9090, kplanev1.IntOrStringFromInt32(9100)))
	s.Spec.ClusterIp = ClusterIPNone
	e.service(s)
	e.pod("a", "10.0.0.1", true, web, &kplanev1.ContainerPort{Name: "web", ContainerPort: 8080})
	e.pod("b", "10.0.0.2", true, web, &kplanev1.ContainerPort{Name: "web", ContainerPort: 8081})
	e.pod("c", "10.0.0.3", true, web)
	e.waitFor("named", "ready=10.0.0.1 notready= ports=http:8080,metrics:9100|ready=10.0.0.2 notready= ports=http:8081,metrics:9100|ready=10.0.0.3 notready= ports=metrics:9100")
	ep, _ := e.endpoints("named")
	if _, ok := ep.GetMetadata().GetLabels()[LabelHeadless]; !ok {
		t.Errorf("labels %v: a headless Service's Endpoints carry %s", ep.GetMetadata().GetLabels(), LabelHeadless)
	}
}

func TestServiceWithoutSelectorLeftAlone(t *testing.T) {
	e := start(t)
	e.service(svc("manual", nil, port("", 80, nil)))
	e.service(svc("web", web, port("", 80, nil)))
	e.pod("a", "10.0.0.1", true, web)
	user := &kplanev1.Endpoints{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "manual"},
		Subsets:  []*kplanev1.EndpointSubset{{Addresses: []*kplanev1.EndpointAddress{{Ip: "192.0.2.1"}}, Ports: []*kplanev1.EndpointPort{{Port: 5432}}}},
	}
	created, err := client.Endpoints(e.api).Create(e.ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	orphan := &kplanev1.Endpoints{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "no-service"}}
	if _, err := client.Endpoints(e.api).Create(e.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	// A later write for another Service shows the controller has been
	// through its queue; then the user's objects must be as written.
	e.waitFor("web", "ready=10.0.0.1 notready= ports=:80")
	e.pod("b", "10.0.0.2", true, web)
	e.waitFor("web", "ready=10.0.0.1,10.0.0.2 notready= ports=:80")
	got, _ := e.endpoints("manual")
	if got.GetMetadata().GetResourceVersion() != created.GetMetadata().GetResourceVersion() {
		t.Errorf("the user's Endpoints were written: %v", got)
	}
	if _, ok := e.endpoints("no-service"); !ok {
		t.Error("a user's Endpoints without a Service were deleted")
	}
	if _, err := client.Services(e.api).Delete(e.ctx, "default", "manual", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Services(e.api).Delete(e.ctx, "default", "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "endpoints web to be deleted", func() bool {
		_, ok := e.endpoints("web")
		return !ok
	})
	if _, ok := e.endpoints("manual"); !ok {
		t.Error("the user's Endpoints of a selector-less Service were deleted with it")
	}
}

func TestBatchPeriodCoalesces(t *testing.T) {
	e := start(t, "--endpoint-updates-batch-period", "3s")
	e.service(svc("web", web, port("", 80, nil)))
	e.waitFor("web", "")
	before := e.counter(updatesTotal)
	var want []string
	for i := range 10 {
		ip := fmt.Sprintf("10.0.0.%d", 10+i)
		e.pod(fmt.Sprintf("p%d", i), ip, true, web)
		want = append(want, ip)
	}
	slices.Sort(want)
	e.waitFor("web", "ready="+strings.Join(want, ",")+" notready= ports=:80")
	testutil.Eventually(t, 10*time.Second, "the update to be counted", func() bool { return e.counter(updatesTotal) > before })
	// Ten pods written within the period (each create plus status is a
	// few milliseconds) make one or, when the writes straddle a period's
	// end, two Endpoints writes, not ten.
	if got := e.counter(updatesTotal) - before; got < 1 || got > 2 {
		t.Errorf("%v Endpoints updates for 10 pods within one batch period, want 1 or 2", got)
	}
}

func TestBadFlag(t *testing.T) {
	srv := testserver.Start(t)
	err := app.Run(context.Background(), NewService(), []string{"--apiserver", srv.Addr(), "--health-addr", "", "--leader-elect=false",
		"--endpoint-updates-batch-period", "-1s"})
	if err == nil || !strings.Contains(err.Error(), "--endpoint-updates-batch-period must not be negative") {
		t.Errorf("err = %v, want the flag named", err)
	}
}

// TestRandomisedFlapping flips seeded random pods ready and not ready and
// relabels some, for a while; after quiescence the Endpoints must list
// exactly what the pods say. Rerun a failure with ENDPOINTSCTL_SEED=<seed>.
func TestRandomisedFlapping(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ENDPOINTSCTL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ENDPOINTSCTL_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with ENDPOINTSCTL_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	e := start(t, "--endpoint-updates-batch-period", "50ms")
	e.service(svc("web", web, port("", 80, nil)))
	pods := map[string]*kplanev1.Pod{}
	for i := range 20 {
		name := fmt.Sprintf("p%d", i)
		pods[name] = e.pod(name, fmt.Sprintf("10.0.1.%d", i), rng.IntN(2) == 0, web)
	}
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	slices.Sort(names)
	for range 200 {
		n := names[rng.IntN(len(names))]
		p := pods[n]
		switch r := rng.IntN(10); {
		case r < 8:
			pods[n] = e.setReady(p, !IsReady(p))
		default:
			if p.Metadata.Labels["app"] == "web" {
				p.Metadata.Labels = map[string]string{"app": "off"}
			} else {
				p.Metadata.Labels = web
			}
			out, err := client.Pods(e.api).Update(e.ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			pods[n] = out
		}
	}
	list, _, err := client.Pods(e.api).List(e.ctx, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.Services(e.api).Get(e.ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	want := summary(&kplanev1.Endpoints{Subsets: Subsets(s, list)})
	e.waitFor("web", want)
	// Independently of Subsets: the ready addresses are the selected
	// ready pods' IPs.
	var ready []string
	for _, p := range list {
		if p.GetMetadata().GetLabels()["app"] == "web" && IsReady(p) {
			ready = append(ready, p.GetStatus().GetPodIp())
		}
	}
	slices.Sort(ready)
	if !strings.HasPrefix(want, "ready="+strings.Join(ready, ",")+" ") {
		t.Errorf("endpoints %q, want ready %v", want, ready)
	}
}

// TestLeftoverEndpointsDeleted: Endpoints endpointsctl wrote (they carry
// the trigger annotation) whose Service is gone are deleted, found by the
// catch-up of a new term; a user's Endpoints without a Service stay.
func TestLeftoverEndpointsDeleted(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = api.Close() }() // closing a test client; nothing to report
	for _, ep := range []*kplanev1.Endpoints{
		{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "leftover", Annotations: map[string]string{AnnotationLastChangeTriggerTime: "2026-01-01T00:00:00Z"}}},
		{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "users"}},
	} {
		if _, err := client.Endpoints(api).Create(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, ctx: ctx, api: api, ctl: controllertest.Run(t, srv.Addr(), NewService())}
	testutil.Eventually(t, 20*time.Second, "the leftover Endpoints to be deleted", func() bool {
		_, ok := e.endpoints("leftover")
		return !ok
	})
	// A write queued after the catch-up shows its keys were worked off.
	e.service(svc("web", web, port("", 80, nil)))
	e.waitFor("web", "")
	if _, ok := e.endpoints("users"); !ok {
		t.Error("a user's Endpoints without a Service were deleted")
	}
	testutil.Eventually(t, 10*time.Second, "the delete to be counted", func() bool { return e.counter(deletesTotal) >= 1 })
	if got := e.counter(deletesTotal); got != 1 {
		t.Errorf("%v deletes, want 1", got)
	}
}

// TestFailover: two replicas, one leads; when the leader stops, the
// standby takes the lease and the Endpoints keep following the pods.
func TestFailover(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = api.Close() }() // closing a test client; nothing to report
	a := controllertest.Run(t, srv.Addr(), NewService(), controllertest.LeaderElection("ep-a")...)
	b := controllertest.Run(t, srv.Addr(), NewService(), controllertest.LeaderElection("ep-b")...)
	e := &env{t: t, ctx: ctx, api: api, ctl: a}
	e.service(svc("web", web, port("", 80, nil)))
	p := e.pod("a", "10.0.0.1", true, web)
	e.waitFor("web", "ready=10.0.0.1 notready= ports=:80")
	leader, standby := a, b
	if !a.Context(t).IsLeader() {
		leader, standby = b, a
	}
	if err := leader.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the standby to lead", func() bool { return standby.Context(t).IsLeader() })
	e.setReady(p, false)
	e.pod("b", "10.0.0.2", true, web)
	e.waitFor("web", "ready=10.0.0.2 notready=10.0.0.1 ports=:80")
}
