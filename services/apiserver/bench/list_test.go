package bench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// BenchmarkList20000 lists 20,000 pods, in one call and in pages of 500:
// over gRPC, served from the watch cache (what clients get), and in
// process from etcd through the store (what every List cost before Lists
// were served from the cache: the etcd read and the decode, without
// gRPC's marshalling). It prints the times; it asserts nothing.
func BenchmarkList20000(b *testing.B) {
	const n = 20000
	srv := testserver.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	api := srv.Client()
	if err := testutil.ForEach(n, clients, func(i int) error {
		_, err := api.Create(ctx, &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("list-%05d", i))})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	st := srv.API().Store()
	time1 := func(f func() int) (time.Duration, int) {
		start := time.Now()
		got := f()
		return time.Since(start), got
	}
	for range b.N {
		fullCache, c1 := time1(func() int {
			resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod"}, grpc.MaxCallRecvMsgSize(1<<30))
			if err != nil {
				b.Fatal(err)
			}
			return len(resp.GetItems())
		})
		pagedCache, c2 := time1(func() int {
			got, tok := 0, ""
			for {
				resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Limit: 500, Continue: tok})
				if err != nil {
					b.Fatal(err)
				}
				got += len(resp.GetItems())
				if tok = resp.GetContinue(); tok == "" {
					return got
				}
			}
		})
		fullEtcd, c3 := time1(func() int {
			res, err := st.List(ctx, "Pod", store.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return len(res.Items)
		})
		pagedEtcd, c4 := time1(func() int {
			got, tok := 0, ""
			for {
				res, err := st.List(ctx, "Pod", store.ListOptions{Limit: 500, Continue: tok})
				if err != nil {
					b.Fatal(err)
				}
				got += len(res.Items)
				if tok = res.Continue; tok == "" {
					return got
				}
			}
		})
		for _, c := range []int{c1, c2, c3, c4} {
			if c != n {
				b.Fatalf("a list returned %d pods, want %d", c, n)
			}
		}
		b.ReportMetric(fullCache.Seconds(), "s-full-cache-grpc")
		b.ReportMetric(pagedCache.Seconds(), "s-paged-cache-grpc")
		b.ReportMetric(fullEtcd.Seconds(), "s-full-etcd-store")
		b.ReportMetric(pagedEtcd.Seconds(), "s-paged-etcd-store")
		fmt.Printf("list %d pods: watch cache over gRPC: one call %v, pages of 500 %v; etcd through the store in process (no gRPC): one call %v, pages of 500 %v\n",
			n, fullCache.Round(time.Millisecond), pagedCache.Round(time.Millisecond), fullEtcd.Round(time.Millisecond), pagedEtcd.Round(time.Millisecond))
	}
}
