package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/test/e2e/internal/launcher"
)

// The binaries the replicactl tests run, beyond the apiserver that
// TestMain builds.
var replicactlBinaries = map[string]string{
	"replicactl": "services/replicactl",
	"gcctl":      "services/gcctl",
	"scheduler":  "services/scheduler",
	"nodeagent":  "services/nodeagent",
	"ipamctl":    "services/ipamctl",
}

// Short leader-election timings, so that failovers take seconds.
const (
	rcLease = 4 * time.Second
	rcRetry = 500 * time.Millisecond
)

var rcLeaseFlags = []string{
	"--leader-elect-lease-duration", rcLease.String(), "--leader-elect-renew-deadline", "3s",
	"--leader-elect-retry-period", rcRetry.String(), "--shutdown-grace-period", "2s",
}

func needBinaries(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if err := ensureBinary(n, replicactlBinaries[n]); err != nil {
			tb.Fatalf("%v", err)
		}
	}
}

// cluster is a set of processes sharing one secured apiserver (see
// apiConfig): each controller runs under its own identity, the test's
// client as the admin, and tokenctl makes the default ServiceAccounts
// the apiserver's ServiceAccount admission wants before a pod is created.
type cluster struct {
	tb     testing.TB
	addr   string
	cfg    apiConfig
	api    kplanev1.ResourcesClient
	logDir string
	// apiserver is the apiserver's process (to kill and restart it).
	apiserver *launcher.Process
}

// startCluster runs bin/apiserver (quietly: the benchmark counts its CPU)
// and tokenctl.
func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	if err := ensureBinary("tokenctl", "services/tokenctl"); err != nil {
		tb.Fatal(err)
	}
	a := newAPIConfig(tb)
	c := &cluster{tb: tb, addr: a.addr, cfg: a, logDir: tb.TempDir()}
	p := c.launch(a.config(c.logDir, tb.TempDir(), "--log-level", "warn"))
	c.apiserver = p
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		tb.Fatal(err)
	}
	c.api = a.dial(tb)
	c.startController("tokenctl", "tokenctl", append([]string{"--log-level", "warn"}, a.tokenctlArgs()...)...)
	waitDefaultServiceAccount(tb, c.api)
	return c
}

// launch starts a process and kills it when the test ends, showing its
// log's end when the test failed.
func (c *cluster) launch(cfg launcher.Config) *launcher.Process {
	c.tb.Helper()
	p, err := launcher.Start(cfg)
	if err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Kill(ctx)
		if c.tb.Failed() {
			// The log's directory goes with the test: show its end here.
			c.tb.Logf("%s log (%s), last lines:\n%s", cfg.Name, p.LogPath(), logTail(p.LogPath(), 40))
		}
	})
	return p
}

// startController runs a controller (or node agent) against the
// apiserver, under its identity (identityOf), and waits for its /readyz.
func (c *cluster) startController(name, binary string, args ...string) (*launcher.Process, string) {
	c.tb.Helper()
	health, err := launcher.FreeAddr()
	if err != nil {
		c.tb.Fatal(err)
	}
	args = append(append(c.cfg.connArgs(identityOf(binary, args)), "--health-addr", health, "--log-level", "info"), args...)
	p := c.launch(launcher.Config{Name: name, Binary: filepath.Join(binDir, binary), Args: args, LogDir: c.logDir})
	c.waitReady(p, health)
	return p, health
}

func (c *cluster) waitReady(p *launcher.Process, health string) {
	c.tb.Helper()
	c.eventually(time.Minute, func() string {
		if !p.Running() {
			c.tb.Fatalf("%s exited: %v; see %s", p.Name(), p.ExitErr(), p.LogPath())
		}
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return fmt.Sprintf("%s /readyz: %v", p.Name(), err)
		}
		_ = resp.Body.Close() // only the status is read
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("%s /readyz: %d", p.Name(), resp.StatusCode)
		}
		return ""
	})
}

func (c *cluster) eventually(d time.Duration, what func() string) {
	c.tb.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := what()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("timed out: %s", msg)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func (c *cluster) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	c.tb.Cleanup(cancel)
	return ctx
}

func (c *cluster) leaseHolder(name string) string {
	resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: name})
	if err != nil {
		return ""
	}
	return resp.GetObject().GetLease().GetSpec().GetHolderIdentity()
}

func replicaSet(name string, replicas int32) *kplanev1.Object {
	l := map[string]string{"app": name}
	return kplanev1.MustWrap(&kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.ReplicaSetSpec{
			Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{
				Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25"}}},
			},
		},
	})
}

func (c *cluster) createRS(name string, replicas int32) *kplanev1.Object {
	c.tb.Helper()
	resp, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: replicaSet(name, replicas)})
	if err != nil {
		c.tb.Fatal(err)
	}
	return resp.GetObject()
}

func (c *cluster) scale(name string, replicas int32) {
	c.tb.Helper()
	for attempt := 0; ; attempt++ {
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: name})
		if err != nil {
			c.tb.Fatal(err)
		}
		o := resp.GetObject()
		o.GetReplicaSet().Spec.Replicas = proto.Int32(replicas)
		_, err = c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: o})
		if status.Code(err) == codes.Aborted && attempt < 20 {
			continue
		}
		if err != nil {
			c.tb.Fatal(err)
		}
		return
	}
}

// podTracker follows every pod event in "default" from before the test
// acts: it times milestones, catches a name ADDED twice with no DELETED
// between (a watch repeating itself, or two pods of one name), and
// remembers the most active pods an owner ever had. A name drawn again
// after its pod was deleted is no fault: GenerateName draws 5 characters
// of 27, and two rounds of 500 pods share a name about 1.7% of the time.
type podTracker struct {
	mu        sync.Mutex
	live      map[string]*kplanev1.Pod
	twice     []string
	maxActive map[string]int // owner uid -> most active pods seen at once
	addedAt   []time.Time    // time of each ADDED event
	running   map[string]time.Time
	bound     map[string]time.Time
}

func (c *cluster) trackPods() *podTracker {
	c.tb.Helper()
	pt := &podTracker{live: map[string]*kplanev1.Pod{}, maxActive: map[string]int{},
		running: map[string]time.Time{}, bound: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		c.tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					pt.mu.Lock()
					pt.twice = append(pt.twice, fmt.Sprintf("(pod watch ended: %v)", err))
					pt.mu.Unlock()
				}
				return
			}
			pt.apply(resp)
		}
	}()
	c.tb.Cleanup(func() { cancel(); <-done })
	return pt
}

func active(p *kplanev1.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph != "Succeeded" && ph != "Failed" && p.GetMetadata().GetDeletionTimestamp() == nil
}

func controllerUID(p *kplanev1.Pod) string {
	for _, r := range p.GetMetadata().GetOwnerReferences() {
		if r.GetController() {
			return r.GetUid()
		}
	}
	return ""
}

func (pt *podTracker) apply(resp *kplanev1.WatchResponse) {
	p := resp.GetObject().GetPod()
	if p == nil {
		return
	}
	now := time.Now()
	name := p.GetMetadata().GetName()
	pt.mu.Lock()
	defer pt.mu.Unlock()
	switch resp.GetType() {
	case kplanev1.EventType_EVENT_TYPE_ADDED:
		if _, ok := pt.live[name]; ok {
			pt.twice = append(pt.twice, name)
		}
		pt.addedAt = append(pt.addedAt, now)
		pt.live[name] = p
	case kplanev1.EventType_EVENT_TYPE_MODIFIED:
		pt.live[name] = p
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		delete(pt.live, name)
		delete(pt.running, name)
		delete(pt.bound, name)
		return
	default:
		return
	}
	if _, ok := pt.bound[name]; !ok && p.GetSpec().GetNodeName() != "" {
		pt.bound[name] = now
	}
	if _, ok := pt.running[name]; !ok && p.GetStatus().GetPhase() == "Running" {
		pt.running[name] = now
	}
	if uid := controllerUID(p); uid != "" && active(p) {
		n := 0
		for _, q := range pt.live {
			if controllerUID(q) == uid && active(q) {
				n++
			}
		}
		pt.maxActive[uid] = max(pt.maxActive[uid], n)
	}
}

// counts returns the owner's active pods and how many of them run.
func (pt *podTracker) counts(uid string) (activeN, runningN int) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, p := range pt.live {
		if controllerUID(p) == uid && active(p) {
			activeN++
			if p.GetStatus().GetPhase() == "Running" {
				runningN++
			}
		}
	}
	return activeN, runningN
}

func (pt *podTracker) resetMax(uid string) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	delete(pt.maxActive, uid)
}

func (pt *podTracker) max(uid string) int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.maxActive[uid]
}

func (pt *podTracker) duplicates() []string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return append([]string(nil), pt.twice...)
}

// nthTime returns the n-th earliest time in ts (1-based), or zero.
func nthTime(ts []time.Time, n int) time.Time {
	if n <= 0 || len(ts) < n {
		return time.Time{}
	}
	s := append([]time.Time(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	return s[n-1]
}

func mapTimes(m map[string]time.Time) []time.Time {
	out := make([]time.Time, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	return out
}

// TestReplicactlLeaderFailover runs two replicactl replicas against a
// scheduler and 10 fake nodes, scales a ReplicaSet to 500 and kills the
// leader in the middle: first with SIGKILL (the standby takes over once
// the lease expires), then with SIGTERM (the lease is released once the
// in-flight reconcile finishes, so the standby takes over within about
// one retry period; a reconcile outlasting the grace period is cancelled
// and the lease left to expire instead). Each time the set
// ends at exactly 500 pods, all Running, never more than 500 at once, and
// no pod name is ADDED twice while its pod lives.
func TestReplicactlLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole control plane")
	}
	needBinaries(t, "replicactl", "scheduler", "nodeagent", "gcctl", "ipamctl")
	c := startCluster(t)
	pt := c.trackPods()
	c.startController("scheduler", "scheduler", "--log-level", "warn")
	c.startController("gcctl", "gcctl", "--log-level", "warn")
	c.startController("ipamctl", "ipamctl", "--log-level", "warn")
	c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "10", "--node-name", "e2e", "--root-dir", t.TempDir(), "--log-level", "warn")

	ids := []string{"rc-a", "rc-b"}
	procs := map[string]*launcher.Process{}
	healths := map[string]string{}
	for _, id := range ids {
		procs[id], healths[id] = c.startController("replicactl-"+id, "replicactl", append([]string{"--id", id}, rcLeaseFlags...)...)
	}
	var leader string
	c.eventually(30*time.Second, func() string {
		leader = c.leaseHolder("replicactl")
		if leader == "" {
			return "no replicactl leader"
		}
		return ""
	})

	rs := c.createRS("chaos", 0)
	uid := rs.Meta().GetUid()
	const want = 500

	for _, how := range []string{"SIGKILL", "SIGTERM"} {
		standby := ids[0]
		if leader == ids[0] {
			standby = ids[1]
		}
		pt.resetMax(uid)
		c.scale("chaos", want)
		// Strike in the middle of the scale-up.
		c.eventually(time.Minute, func() string {
			if n, _ := pt.counts(uid); n < want/5 {
				return fmt.Sprintf("%d pods before the %s", n, how)
			}
			return ""
		})
		atKill, _ := pt.counts(uid)
		struck := time.Now()
		var termErr error
		termDone := make(chan struct{})
		go func() {
			defer close(termDone)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if how == "SIGKILL" {
				termErr = procs[leader].Kill(ctx)
			} else {
				termErr = procs[leader].Term(ctx)
			}
		}()
		var takeover, released time.Duration
		c.eventually(time.Minute, func() string {
			h := c.leaseHolder("replicactl")
			if h != leader && released == 0 {
				released = time.Since(struck) // cleared by a SIGTERM, or already taken
			}
			if h != standby {
				return fmt.Sprintf("lease held by %q, want %q", h, standby)
			}
			takeover = time.Since(struck)
			return ""
		})
		<-termDone
		if termErr != nil {
			t.Fatalf("%s of %s: %v", how, leader, termErr)
		}
		c.eventually(2*time.Minute, func() string {
			a, r := pt.counts(uid)
			if a != want || r != want {
				return fmt.Sprintf("%d active, %d running pods, want %d", a, r, want)
			}
			return ""
		})
		t.Logf("%s of leader %s with %d/%d pods created: standby %s took over after %v (lease %v, retry %v); %d pods Running %v after the %s, at most %d at once",
			how, leader, atKill, want, standby, takeover.Round(time.Millisecond), rcLease, rcRetry, want, time.Since(struck).Round(time.Millisecond), how, pt.max(uid))
		fmt.Printf("replicactl failover (%s): standby leads %v after the signal; the lease left the old leader after %v (a SIGTERM first finishes the in-flight reconcile), so the standby took %v\n",
			how, takeover.Round(time.Millisecond), released.Round(time.Millisecond), (takeover - released).Round(time.Millisecond))
		if m := pt.max(uid); m > want {
			t.Fatalf("after the %s the set had %d active pods at once, more than %d", how, m, want)
		}
		if d := pt.duplicates(); len(d) > 0 {
			t.Fatalf("pod names ADDED twice with no DELETED between: %v", d)
		}
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "chaos"})
		if err != nil {
			t.Fatal(err)
		}
		c.eventually(30*time.Second, func() string {
			resp, err = c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "chaos"})
			if err != nil {
				return err.Error()
			}
			if st := resp.GetObject().GetReplicaSet().GetStatus(); st.GetReplicas() != want || st.GetReadyReplicas() != want {
				return fmt.Sprintf("status %v", st)
			}
			return ""
		})

		// The struck replica comes back as the standby; scale down for the
		// next round.
		if err := procs[leader].Restart(); err != nil {
			t.Fatal(err)
		}
		c.waitReady(procs[leader], healths[leader])
		leader = standby
		c.scale("chaos", 0)
		c.eventually(2*time.Minute, func() string {
			if a, _ := pt.counts(uid); a != 0 {
				return fmt.Sprintf("%d pods left after scaling to 0", a)
			}
			return ""
		})
	}
}

// TestReplicactlCascadeAndAdoption: deleting a ReplicaSet with
// propagation Orphan leaves its pods without an owner; a new ReplicaSet
// with the same selector adopts them instead of creating pods; deleting
// that one in the background deletes them (garbage collector).
func TestReplicactlCascadeAndAdoption(t *testing.T) {
	needBinaries(t, "replicactl", "gcctl")
	c := startCluster(t)
	pt := c.trackPods()
	c.startController("gcctl", "gcctl", "--log-level", "warn")
	c.startController("replicactl", "replicactl", "--leader-elect=false")

	podsOf := func(sel string) []*kplanev1.Pod {
		resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		var out []*kplanev1.Pod
		for _, o := range resp.GetItems() {
			out = append(out, o.GetPod())
		}
		return out
	}
	first := c.createRS("keep", 3)
	c.eventually(30*time.Second, func() string {
		if a, _ := pt.counts(first.Meta().GetUid()); a != 3 {
			return fmt.Sprintf("%d pods", a)
		}
		return ""
	})
	names := map[string]bool{}
	for _, p := range podsOf("app=keep") {
		names[p.GetMetadata().GetName()] = true
		if ref := p.GetMetadata().GetOwnerReferences(); len(ref) != 1 || !ref[0].GetBlockOwnerDeletion() || ref[0].GetUid() != first.Meta().GetUid() {
			t.Fatalf("owner references %v", ref)
		}
	}

	if _, err := c.api.Delete(c.ctx(), &kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: "default", Name: "keep", PropagationPolicy: "Orphan"}); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, func() string {
		if _, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "ReplicaSet", Namespace: "default", Name: "keep"}); status.Code(err) != codes.NotFound {
			return fmt.Sprintf("ReplicaSet still there (%v)", err)
		}
		for _, p := range podsOf("app=keep") {
			if len(p.GetMetadata().GetOwnerReferences()) > 0 {
				return "pod " + p.GetMetadata().GetName() + " still has an owner"
			}
		}
		return ""
	})
	if got := podsOf("app=keep"); len(got) != 3 {
		t.Fatalf("%d pods after an orphaning delete, want the 3", len(got))
	}

	second := c.createRS("keep", 3)
	c.eventually(30*time.Second, func() string {
		if a, _ := pt.counts(second.Meta().GetUid()); a != 3 {
			return fmt.Sprintf("%d pods adopted", a)
		}
		return ""
	})
	for _, p := range podsOf("app=keep") {
		if !names[p.GetMetadata().GetName()] {
			t.Fatalf("pod %s was created instead of adopting the orphans", p.GetMetadata().GetName())
		}
	}

	if _, err := c.api.Delete(c.ctx(), &kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: "default", Name: "keep"}); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, func() string {
		if n := len(podsOf("app=keep")); n != 0 {
			return fmt.Sprintf("%d pods left after a background delete", n)
		}
		return ""
	})
	if d := pt.duplicates(); len(d) > 0 {
		t.Fatalf("pod names ADDED twice with no DELETED between: %v", d)
	}
}
