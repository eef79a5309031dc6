package bench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

const (
	// restFanWatchers watch one namespace's Pods while restFanEvents pods
	// are created in it: every watcher receives every event.
	restFanWatchers = 100
	restFanEvents   = 1000
	restFanWriters  = 8
	restFanLimit    = 3 * time.Minute
)

// fanWatch opens one watcher of ns's Pods from rv and returns a function
// that blocks until it has received n ADDED events.
type fanWatch func(ctx context.Context, ns, rv string) (func(n int) error, error)

// watchFanout measures events delivered per second to restFanWatchers
// watchers of one namespace while restFanWriters gRPC writers create
// restFanEvents pods in it: (watchers × events) / (time from the first
// write to the last watcher's last event). The writes are the same for
// both protocols; only the watchers' protocol differs.
func watchFanout(b *testing.B, srv *testserver.Server, ns string, open fanWatch) float64 {
	api := srv.Client()
	ctx, cancel := context.WithTimeout(b.Context(), restFanLimit)
	defer cancel()
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: ns}})}); err != nil {
		b.Fatal(err)
	}
	start, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	waits := make([]func(int) error, restFanWatchers)
	for i := range waits {
		if waits[i], err = open(ctx, ns, start.GetResourceVersion()); err != nil {
			b.Fatalf("watcher %d: %v", i, err)
		}
	}
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, restFanWriters+restFanWatchers)
	for range restFanWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= restFanEvents; i = next.Add(1) {
				o := benchPod(fmt.Sprintf("fan-%d", i))
				o.Meta().Namespace = ns
				if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: o}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, w := range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w(restFanEvents); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(restFanWatchers*restFanEvents) / elapsed.Seconds()
}

// grpcFanWatch watches over gRPC (one stream each on the shared
// connection, as the cluster's own components watch).
func grpcFanWatch(srv *testserver.Server) fanWatch {
	api := srv.Client()
	return func(ctx context.Context, ns, rv string) (func(int) error, error) {
		s, err := api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: ns, ResourceVersion: rv})
		if err != nil {
			return nil, err
		}
		if _, err := s.Header(); err != nil { // the watch is established
			return nil, err
		}
		return func(n int) error {
			for got := 0; got < n; {
				ev, err := s.Recv()
				if err != nil {
					return fmt.Errorf("gRPC watcher after %d events: %w", got, err)
				}
				if ev.GetType() == kplanev1.EventType_EVENT_TYPE_ADDED {
					got++
				}
			}
			return nil
		}, nil
	}
}

// restFanWatch watches over REST (?watch=1, a JSON line per event, each
// watcher its own HTTP/1.1 connection as kubectl's and client-go's
// watches are), decoding each event as a client does.
func restFanWatch(srv *testserver.Server) fanWatch {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: restFanWatchers}}
	return func(ctx context.Context, ns, rv string) (func(int) error, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			"http://"+srv.Addr()+"/api/v1/namespaces/"+ns+"/pods?watch=1&resourceVersion="+rv, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req) // answers once the watch is established
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			return nil, fmt.Errorf("REST watch: %s", resp.Status)
		}
		return func(n int) error {
			defer func() { _ = resp.Body.Close() }() // the watch ends here
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			for got := 0; got < n; {
				if !sc.Scan() {
					return fmt.Errorf("REST watcher after %d events: %v", got, sc.Err())
				}
				var obj map[string]any
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					return err
				}
				if err := json.Unmarshal(ev.Object, &obj); err != nil {
					return err
				}
				if ev.Type == "ADDED" {
					got++
				}
			}
			return nil
		}, nil
	}
}
