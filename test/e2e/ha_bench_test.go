package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	haBenchWorkers = 32
	haBenchCreates = 3000
)

// createPhase creates n Secrets from haBenchWorkers goroutines and
// returns the rate and the 99th percentile latency.
func createPhase(b *testing.B, c *client.Client, prefix string, n int) (float64, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range haBenchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
					Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%05d", prefix, i)},
					Data:     map[string][]byte{"k": make([]byte, 256)}})})
				if err != nil {
					b.Errorf("create: %v", err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	return float64(n) / elapsed.Seconds(), lat[n*99/100]
}

// BenchmarkHACreate compares Create through one apiserver process with
// its single embedded etcd member against three apiserver processes
// whose members form one cluster (the client spreads over all three),
// fsync on, in the same run, interleaved twice; it prints throughput,
// p99 latency and the 3/1 ratios (docs/benchmarks.md).
func BenchmarkHACreate(b *testing.B) {
	for range b.N {
		one := startHAApiservers(b, 1)
		three := startHAApiservers(b, 3)
		c1, c3 := one.dial(b), three.dial(b)
		var r1, r3 []float64
		var p1, p3 []time.Duration
		for round := range 2 {
			r, p := createPhase(b, c1, fmt.Sprintf("one-%d", round), haBenchCreates)
			r1, p1 = append(r1, r), append(p1, p)
			r, p = createPhase(b, c3, fmt.Sprintf("three-%d", round), haBenchCreates)
			r3, p3 = append(r3, r), append(p3, p)
		}
		for i := range r1 {
			fmt.Printf("HA create round %d: 1 member %.0f/s p99 %s; 3 members %.0f/s p99 %s; throughput ratio 3/1 %.2f, p99 ratio 3/1 %.2f\n",
				i+1, r1[i], p1[i].Round(time.Microsecond*100), r3[i], p3[i].Round(time.Microsecond*100), r3[i]/r1[i], float64(p3[i])/float64(p1[i]))
		}
		b.ReportMetric((r3[0]+r3[1])/(r1[0]+r1[1]), "throughput-ratio-3/1")
	}
}

// BenchmarkHALeaderLoss SIGKILLs the apiserver whose etcd member leads
// the Raft group, ten times, under a steady writer through a client on
// all three, and prints how long writes were unavailable each time: from
// the kill to the first write acknowledged after it.
func BenchmarkHALeaderLoss(b *testing.B) {
	for range b.N {
		h := startHAApiservers(b, 3)
		c := h.dial(b)
		var gaps []time.Duration
		for kill := range 10 {
			leader := haLeader(b, h)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if err := haWrite(ctx, c, fmt.Sprintf("before-%d", kill)); err != nil {
				b.Fatalf("write before the kill: %v", err)
			}
			t0 := time.Now()
			if err := h.procs[leader].Kill(ctx); err != nil {
				b.Fatal(err)
			}
			// A write is invoked every 20 ms, each on its own: one stuck
			// on the dead leader does not hold up the next. The gap ends
			// when the first write acknowledged after the kill returns.
			acked := make(chan time.Time, 1)
			var wg sync.WaitGroup
			tick := time.NewTicker(20 * time.Millisecond)
		wait:
			for i := 0; ; i++ {
				select {
				case at := <-acked:
					gaps = append(gaps, at.Sub(t0))
					break wait
				case <-ctx.Done():
					b.Fatalf("no write within 2 minutes of killing the leader")
				case <-tick.C:
					wg.Add(1)
					go func() {
						defer wg.Done()
						if haWrite(ctx, c, fmt.Sprintf("after-%d-%d", kill, i)) == nil {
							select {
							case acked <- time.Now():
							default:
							}
						}
					}()
				}
			}
			tick.Stop()
			cancel() // ends the writes still in flight
			wg.Wait()
			if err := h.procs[leader].Restart(); err != nil {
				b.Fatal(err)
			}
			waitHealthy(b, h.procs[leader])
		}
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		fmt.Printf("HA leader loss, writes unavailable after SIGKILL of the leader's apiserver (10 kills): min %s median %s max %s; all %v\n",
			sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), roundAll(gaps))
		b.ReportMetric(float64(sorted[len(sorted)/2].Milliseconds()), "median-unavailable-ms")
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

func haWrite(ctx context.Context, c *client.Client, name string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := c.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name}})})
	return err
}

// haLeader is the index of the apiserver whose member leads etcd.
func haLeader(b *testing.B, h *haApiservers) int {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		for _, addr := range h.addrs {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := client.Dial(ctx, client.Options{Address: addr})
			if err != nil {
				cancel()
				continue
			}
			resp, err := kplanev1.NewAdminClient(c.Conn()).EtcdMemberList(ctx, &kplanev1.EtcdMemberListRequest{})
			_ = c.Close()
			cancel()
			if err != nil {
				continue
			}
			for _, m := range resp.GetMembers() {
				if m.GetIsLeader() {
					var i int
					if _, err := fmt.Sscanf(m.GetName(), "a%d", &i); err == nil {
						return i
					}
				}
			}
		}
	}
	b.Fatal("no etcd leader within a minute")
	return -1
}
