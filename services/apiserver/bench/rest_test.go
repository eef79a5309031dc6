package bench_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apijson"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

const (
	restClients   = 16
	restListPods  = 500
	restGets      = 4000
	restLists     = 100
	restCreates   = 2000
	restPodsRoute = "/api/v1/namespaces/default/pods"
)

// BenchmarkRESTvsGRPC measures the same GET, LIST (of 500 pods) and
// Create over the REST front end (JSON over HTTP/1.1) and over gRPC
// (protobuf), 16 concurrent clients each, against one in-process
// apiserver, and prints each operation's rate and the gRPC/REST ratio.
// The REST side calls the gRPC service in process, so the ratio is the
// cost of Kubernetes' JSON and HTTP/1.1. In the same run, watch fan-out:
// events per second delivered to 100 watchers over each protocol
// (rest_watch_test.go). Run with `make bench-rest`.
func BenchmarkRESTvsGRPC(b *testing.B) {
	srv := testserver.Start(b)
	api := srv.Client()
	ctx := b.Context()
	for i := 0; i < restListPods; i++ {
		if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("list-%d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	base := "http://" + srv.Addr()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: restClients}}
	rest := func(method, path string, body []byte, want int) error {
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close() // fully read; nothing to report
		if err == nil && resp.StatusCode != want {
			err = fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
		}
		return err
	}
	var seq atomic.Int64
	createBody := func() []byte {
		o := benchPod(fmt.Sprintf("rest-%d", seq.Add(1)))
		m, err := apijson.ObjectToMap(o)
		if err != nil {
			b.Fatal(err)
		}
		j, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		return j
	}
	type op struct {
		name  string
		n     int
		grpc  func() error
		restF func() error
	}
	ops := []op{
		{"GET", restGets,
			func() error {
				_, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: "list-7"})
				return err
			},
			func() error { return rest("GET", restPodsRoute+"/list-7", nil, 200) }},
		{"LIST", restLists,
			func() error {
				_, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=bench"})
				return err
			},
			func() error { return rest("GET", restPodsRoute+"?labelSelector=app%3Dbench", nil, 200) }},
		{"Create", restCreates,
			func() error {
				_, err := api.Create(ctx, &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("grpc-%d", seq.Add(1)))})
				return err
			},
			func() error { return rest("POST", restPodsRoute, createBody(), 201) }},
	}
	run := func(n int, f func() error) float64 {
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Value
		start := time.Now()
		for c := 0; c < restClients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					if err := f(); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, ok := failed.Load().(error); ok {
			b.Fatal(err)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	for i := 0; i < b.N; i++ {
		for _, o := range ops {
			g := run(o.n, o.grpc)
			r := run(o.n, o.restF)
			b.ReportMetric(g, o.name+"-grpc-ops/s")
			b.ReportMetric(r, o.name+"-rest-ops/s")
			fmt.Printf("%-6s gRPC %8.0f/s  REST %8.0f/s  gRPC/REST %.2f\n", o.name, g, r, g/r)
		}
		// Watch fan-out: events delivered per second to 100 watchers of
		// 1,000 creates (rest_watch_test.go).
		g := watchFanout(b, srv, fmt.Sprintf("fan-grpc-%d", i), grpcFanWatch(srv))
		r := watchFanout(b, srv, fmt.Sprintf("fan-rest-%d", i), restFanWatch(srv))
		b.ReportMetric(g, "Watch-grpc-events/s")
		b.ReportMetric(r, "Watch-rest-events/s")
		fmt.Printf("%-6s gRPC %8.0f/s  REST %8.0f/s  gRPC/REST %.2f  (events delivered, %d watchers x %d events)\n", "Watch", g, r, g/r, restFanWatchers, restFanEvents)
	}
}
