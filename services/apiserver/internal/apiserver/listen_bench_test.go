package apiserver

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// BenchmarkListenerSplit measures what the protocol split of the main
// listener costs gRPC: one grpc.Server serves a plain listener (Serve on
// the TCP listener, as before the split) and a split one (cmux, as the
// apiserver runs now); 32 clients over 4 connections call a unary RPC for
// a fixed time on each, alternating, five rounds. It prints calls/s of
// both and their ratio (split/plain); it asserts nothing.
func BenchmarkListenerSplit(b *testing.B) {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	plainLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rawLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	split := newSplitListener(rawLis)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _ = srv.Serve(plainLis) }()
	go func() { defer wg.Done(); _ = srv.Serve(split.grpc) }()
	go func() { defer wg.Done(); _ = split.serve() }()
	defer func() {
		srv.Stop()
		split.close()
		wg.Wait()
	}()

	const (
		conns   = 4
		clients = 32
		period  = 2 * time.Second
		rounds  = 5
	)
	run := func(addr string) float64 {
		var ccs []*grpc.ClientConn
		for range conns {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			ccs = append(ccs, cc)
		}
		defer func() {
			for _, cc := range ccs {
				_ = cc.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), period)
		defer cancel()
		var calls atomic.Int64
		var cwg sync.WaitGroup
		start := time.Now()
		for i := range clients {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				c := healthpb.NewHealthClient(ccs[i%conns])
				for ctx.Err() == nil {
					if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
						if ctx.Err() == nil && status.Code(err) != codes.DeadlineExceeded {
							b.Error(err)
						}
						return
					}
					calls.Add(1)
				}
			}()
		}
		cwg.Wait()
		return float64(calls.Load()) / time.Since(start).Seconds()
	}
	for range b.N {
		var plain, splitRate float64
		for r := range rounds {
			p := run(plainLis.Addr().String())
			s := run(rawLis.Addr().String())
			fmt.Printf("listener split round %d: plain grpc.Serve %.0f calls/s, cmux split %.0f calls/s, ratio %.3f\n", r+1, p, s, s/p)
			plain += p
			splitRate += s
		}
		fmt.Printf("listener split (%d clients, %d connections, %d rounds of %v each): plain %.0f calls/s, split %.0f calls/s, ratio split/plain %.3f\n",
			clients, conns, rounds, period, plain/rounds, splitRate/rounds, splitRate/plain)
		b.ReportMetric(plain/rounds, "plain-calls/s")
		b.ReportMetric(splitRate/rounds, "split-calls/s")
		b.ReportMetric(splitRate/plain, "ratio")
		b.ReportMetric(0, "ns/op")
	}
}
