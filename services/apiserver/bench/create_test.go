// Package bench_test measures the apiserver against its own storage: how
// close Create throughput comes to raw etcd Puts on the same embedded
// etcd, and how fast one write fans out to a thousand watchers. The
// benchmarks print their figures (b.ReportMetric and a summary line) and
// assert nothing; run them with `make bench-apiserver`.
package bench_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

const (
	// clients is the number of concurrent writers in every phase.
	clients = 64
	// createsPerPhase is how many objects each kind of phase writes, in
	// `rounds` parts; phaseLimit caps one part's time on a slow disk (the
	// rate is computed from what completed).
	createsPerPhase = 20000
	rounds          = 4
	phaseLimit      = 60 * time.Second
)

// benchPod is the object both phases write: a small but realistic pod.
func benchPod(name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{"app": "bench", "tier": "web"}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{
			Name: "app", Image: "registry.example/bench/app:1.0",
			Args:  []string{"--port", "8080"},
			Ports: []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Resources: &kplanev1.ResourceRequirements{
				Requests: map[string]string{"cpu": "100m", "memory": "64Mi"},
				Limits:   map[string]string{"cpu": "500m", "memory": "128Mi"},
			},
		}}},
	})
}

// BenchmarkCreateThroughput compares 64 concurrent gRPC clients creating
// pods through the apiserver with 64 goroutines putting the same encoded
// pods straight into the same embedded etcd, with fsync on (the
// headline: what a real deployment pays) and off (the apiserver's own CPU
// overhead). Target: apiserver/raw >= 0.7.
func BenchmarkCreateThroughput(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		name := "fsync=on"
		opts := []testserver.Option{testserver.WithFsync()}
		if !fsync {
			name, opts = "fsync=off", nil
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				runCreateThroughput(b, name, opts)
			}
		})
	}
}

func runCreateThroughput(b *testing.B, name string, opts []testserver.Option) {
	srv := testserver.Start(b, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	conns := make([]kplanev1.ResourcesClient, clients)
	for i := range conns {
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatalf("dial: %v", err)
		}
		b.Cleanup(func() {
			if err := conn.Close(); err != nil {
				b.Errorf("close client connection: %v", err)
			}
		})
		conns[i] = kplanev1.NewResourcesClient(conn)
	}

	// The raw phase puts exactly what the store would write for the same
	// pods: defaulted, with server fields, protobuf-encoded. Encoding is
	// done before the clock starts so the raw phase is pure etcd.
	raw := make([][]byte, createsPerPhase)
	for i := range raw {
		o := benchPod(fmt.Sprintf("raw-%06d", i))
		m := o.Meta()
		m.Uid, m.Generation, m.CreationTimestamp = uuid.NewString(), 1, timestamppb.Now()
		v, err := store.Encode(o)
		if err != nil {
			b.Fatalf("encode: %v", err)
		}
		raw[i] = v
	}
	etcd := srv.API().Store().Client()

	// Warm both paths (connections, etcd's first allocations).
	for i, c := range conns {
		if _, err := c.Create(ctx, &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("warm-%02d", i))}); err != nil {
			b.Fatalf("warm-up create: %v", err)
		}
		if _, err := etcd.Put(ctx, fmt.Sprintf("/bench/warm/%02d", i), string(raw[0])); err != nil {
			b.Fatalf("warm-up put: %v", err)
		}
	}

	// A second baseline splits the gap: the same Puts from 64 etcd
	// clients over gRPC on loopback, i.e. raw etcd with the network hop
	// the apiserver's clients also pay.
	members, err := etcd.MemberList(ctx)
	if err != nil || len(members.Members) == 0 || len(members.Members[0].ClientURLs) == 0 {
		b.Fatalf("find the embedded etcd's client URL: %v", err)
	}
	etcdClients := make([]*clientv3.Client, clients)
	for i := range etcdClients {
		cli, err := clientv3.New(clientv3.Config{Endpoints: members.Members[0].ClientURLs, DialTimeout: 10 * time.Second,
			Logger: zap.NewNop()})
		if err != nil {
			b.Fatalf("etcd client: %v", err)
		}
		b.Cleanup(func() {
			if err := cli.Close(); err != nil {
				b.Errorf("close etcd client: %v", err)
			}
		})
		if _, err := cli.Put(ctx, fmt.Sprintf("/bench/warm-grpc/%02d", i), string(raw[0])); err != nil {
			b.Fatalf("warm-up put over gRPC: %v", err)
		}
		etcdClients[i] = cli
	}

	// Requests are built before the clock starts too, as the raw values are.
	reqs := make([]*kplanev1.CreateRequest, createsPerPhase)
	for i := range reqs {
		reqs[i] = &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("api-%06d", i))}
	}
	ops := []struct {
		name string
		op   func(ctx context.Context, worker, i int) error
	}{
		{"apiserver", func(ctx context.Context, worker, i int) error {
			_, err := conns[worker].Create(ctx, reqs[i])
			return err
		}},
		// Raw keys live outside /registry/, so the apiserver's watch
		// cache does not decode them: the baseline is etcd alone.
		{"raw etcd", func(ctx context.Context, _, i int) error {
			_, err := etcd.Put(ctx, fmt.Sprintf("/bench/raw/pod/default/raw-%06d", i), string(raw[i]))
			return err
		}},
		{"raw etcd over gRPC", func(ctx context.Context, worker, i int) error {
			_, err := etcdClients[worker].Put(ctx, fmt.Sprintf("/bench/raw-grpc/pod/default/raw-%06d", i), string(raw[i]))
			return err
		}},
	}
	// The phases alternate over several rounds, so load that comes and
	// goes on a shared machine (and the growing database) weighs on all
	// of them alike.
	res := make([]phaseResult, len(ops))
	per := createsPerPhase / rounds
	for r := range rounds {
		for i, o := range ops {
			pr := phase(ctx, r*per, per, o.op)
			if pr.err != nil {
				b.Fatalf("%s phase: %v", o.name, pr.err)
			}
			res[i].done += pr.done
			res[i].elapsed += pr.elapsed
		}
	}
	api, rawRes, rawGRPC := res[0], res[1], res[2]
	ratio := api.rate() / rawRes.rate()
	b.ReportMetric(api.rate(), "apiserver-creates/s")
	b.ReportMetric(rawRes.rate(), "raw-etcd-puts/s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(rawGRPC.rate(), "raw-etcd-grpc-puts/s")
	b.ReportMetric(0, "ns/op") // the per-op time of a 1x run says nothing
	fmt.Printf("create throughput (%s, %d clients): apiserver %.0f objects/s (%d in %v), raw etcd %.0f objects/s (%d in %v), ratio apiserver/raw %.2f (target >= 0.70)\n",
		name, clients, api.rate(), api.done, api.elapsed.Round(time.Millisecond),
		rawRes.rate(), rawRes.done, rawRes.elapsed.Round(time.Millisecond), ratio)
	fmt.Printf("create throughput (%s): raw etcd over gRPC loopback (%d etcd clients) %.0f objects/s, ratio apiserver/raw-over-gRPC %.2f\n",
		name, clients, rawGRPC.rate(), api.rate()/rawGRPC.rate())
}

type phaseResult struct {
	done    int64
	elapsed time.Duration
	err     error
}

func (r phaseResult) rate() float64 { return float64(r.done) / r.elapsed.Seconds() }

// phase runs op for indexes [from, from+n) over `clients` goroutines, or
// until phaseLimit, and reports how many completed in how long.
func phase(ctx context.Context, from, n int, op func(ctx context.Context, worker, i int) error) phaseResult {
	ctx, cancel := context.WithTimeout(ctx, phaseLimit)
	defer cancel()
	var next, done atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	begin := time.Now()
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				if err := op(ctx, w, from+int(i)); err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return phaseResult{done: done.Load(), elapsed: time.Since(begin), err: firstErr}
}
