package nodelifecycle

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// write is one write that reached the apiserver through a replica's proxy,
// with the leader lease's holder at that moment.
type write struct {
	via, method, kind, name, holder string
}

// writeLog collects the writes of every proxy.
type writeLog struct {
	mu     sync.Mutex
	writes []write
}

func (l *writeLog) all() []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]write(nil), l.writes...)
}

// proxy stands between one replica and the apiserver, so that the test
// knows which identity each write comes from, and records the writes to
// Nodes and Pods.
type proxy struct {
	kplanev1.UnimplementedResourcesServer
	id      string
	backend kplanev1.ResourcesClient
	log     *writeLog
}

func startProxy(t *testing.T, id string, backend kplanev1.ResourcesClient, log *writeLog) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	kplanev1.RegisterResourcesServer(s, &proxy{id: id, backend: backend, log: log})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

func (p *proxy) record(ctx context.Context, method, kind, name string) {
	if kind != "Node" && kind != "Pod" {
		return
	}
	holder := "?"
	if resp, err := p.backend.Get(ctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: "nodectl"}); err == nil {
		holder = resp.GetObject().GetLease().GetSpec().GetHolderIdentity()
	}
	p.log.mu.Lock()
	p.log.writes = append(p.log.writes, write{via: p.id, method: method, kind: kind, name: name, holder: holder})
	p.log.mu.Unlock()
}

func (p *proxy) Get(ctx context.Context, r *kplanev1.GetRequest) (*kplanev1.GetResponse, error) {
	return p.backend.Get(ctx, r)
}

func (p *proxy) List(ctx context.Context, r *kplanev1.ListRequest) (*kplanev1.ListResponse, error) {
	return p.backend.List(ctx, r)
}

func (p *proxy) Create(ctx context.Context, r *kplanev1.CreateRequest) (*kplanev1.CreateResponse, error) {
	p.record(ctx, "Create", r.GetObject().KindName(), r.GetObject().Key())
	return p.backend.Create(ctx, r)
}

func (p *proxy) Update(ctx context.Context, r *kplanev1.UpdateRequest) (*kplanev1.UpdateResponse, error) {
	p.record(ctx, "Update", r.GetObject().KindName(), r.GetObject().Key())
	return p.backend.Update(ctx, r)
}

func (p *proxy) UpdateStatus(ctx context.Context, r *kplanev1.UpdateStatusRequest) (*kplanev1.UpdateStatusResponse, error) {
	p.record(ctx, "UpdateStatus", r.GetObject().KindName(), r.GetObject().Key())
	return p.backend.UpdateStatus(ctx, r)
}

func (p *proxy) Delete(ctx context.Context, r *kplanev1.DeleteRequest) (*kplanev1.DeleteResponse, error) {
	p.record(ctx, "Delete", r.GetKind(), kplanev1.MetaKey(r.GetNamespace(), r.GetName()))
	return p.backend.Delete(ctx, r)
}

func (p *proxy) Watch(r *kplanev1.WatchRequest, stream grpc.ServerStreamingServer[kplanev1.WatchResponse]) error {
	up, err := p.backend.Watch(stream.Context(), r)
	if err != nil {
		return err
	}
	for {
		ev, err := up.Recv()
		if err != nil {
			return err
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
}

// TestOnlyTheLeaderWrites runs two replicas, each through its own proxy:
// n0 goes silent and is marked by the leader; the leader then stops, the
// standby takes over and evicts. Every write to a Node or Pod must come
// from the identity holding the leader lease at that moment.
func TestOnlyTheLeaderWrites(t *testing.T) {
	c := newCluster(t, 3, 2)
	log := &writeLog{}
	election := []string{
		"--pod-eviction-timeout", "4s",
		"--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms",
		"--leader-elect-retry-period", "200ms", "--shutdown-grace-period", "1s",
	}
	replicas := map[string]nodectlProc{}
	for _, id := range []string{"r1", "r2"} {
		addr := startProxy(t, id, c.srv.Client(), log)
		replicas[id] = startNodectl(t, addr, append([]string{"--id", id}, election...)...)
	}

	leader := ""
	c.eventually("a leader is elected", func() bool {
		l, err := c.srv.Client().Get(c.ctx, &kplanev1.GetRequest{Kind: "Lease", Namespace: "kplane-system", Name: "nodectl"})
		leader = l.GetObject().GetLease().GetSpec().GetHolderIdentity()
		return err == nil && leader != ""
	})
	c.setAlive("n0", false)
	c.eventually("n0 is marked", func() bool { return unreachableTainted(c.node("n0")) })
	replicas[leader].stop(t) // releases the lease; the standby takes over
	c.eventually("n0's pods are evicted by the new leader", func() bool { return len(c.podsOf("n0")) == 0 })

	writers := map[string]int{}
	for _, w := range log.all() {
		if w.holder != w.via {
			t.Errorf("%s %s %s written through %s while the lease was held by %q", w.method, w.kind, w.name, w.via, w.holder)
		}
		writers[w.via]++
	}
	if len(writers) != 2 {
		t.Fatalf("writes per identity %v: want both terms to have written (marking, then eviction)", writers)
	}
}
