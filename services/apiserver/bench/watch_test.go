package bench_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

const (
	fanoutWatchers = 1000
	// fanoutConns spreads the watch streams over several HTTP/2
	// connections, as many client processes would.
	fanoutConns   = 16
	fanoutPods    = 10000
	fanoutWriters = 8
	fanoutLimit   = 4 * time.Minute
)

// pacedRate is the write rate of the paced run: about half of what the
// fan-out to 1000 watchers sustains on two cores, so latency is measured
// below saturation rather than as a queue's length.
const pacedRate = 150

// BenchmarkWatchFanout runs 1000 watchers of Pods, each its own gRPC
// stream, while 8 writers create 10,000 pods, and reports events
// delivered per second and the delivery latency from a write's
// acknowledgement to each watcher's receipt of its event. Target: p99 <
// 100ms. The unpaced run writes as fast as the apiserver acknowledges
// (the fan-out then takes the CPU and throttles the writers: the
// throughput figure); the paced run writes pacedRate pods per second (the
// latency figure at a sustainable load).
func BenchmarkWatchFanout(b *testing.B) {
	for _, rate := range []int{0, pacedRate} {
		name := "writes=unpaced"
		if rate > 0 {
			name = fmt.Sprintf("writes=%d/s", rate)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				runWatchFanout(b, name, rate)
			}
		})
	}
}

// received is one event as a watcher saw it: its revision and when.
type received struct {
	rev int64
	at  int64 // UnixNano
}

func runWatchFanout(b *testing.B, name string, rate int) {
	srv := testserver.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), fanoutLimit)
	defer cancel()

	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatalf("dial: %v", err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	watchClients := make([]kplanev1.ResourcesClient, fanoutConns)
	for i := range watchClients {
		watchClients[i] = kplanev1.NewResourcesClient(dial())
	}
	writeClients := []kplanev1.ResourcesClient{kplanev1.NewResourcesClient(dial()), kplanev1.NewResourcesClient(dial())}

	list, err := writeClients[0].List(ctx, &kplanev1.ListRequest{Kind: "Pod"})
	if err != nil {
		b.Fatalf("list: %v", err)
	}
	from := list.GetResourceVersion()

	// Watchers. Each records (revision, arrival) per event; decoding is
	// limited to those two fields (see eventCodec) so the in-process
	// clients leave the two cores to the server being measured.
	const want = fanoutPods + 1 // the warm-up pod, then the measured ones
	logs := make([][]received, fanoutWatchers)
	var warm, finished atomic.Int64
	var cutMu sync.Mutex
	var cut []error
	var wg sync.WaitGroup
	wctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	for w := range fanoutWatchers {
		logs[w] = make([]received, 0, want)
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, err := watchClients[w%fanoutConns].Watch(wctx,
				&kplanev1.WatchRequest{Kind: "Pod", Namespace: "default", ResourceVersion: from},
				grpc.ForceCodecV2(eventCodec{}))
			if err != nil {
				cutMu.Lock()
				cut = append(cut, err)
				cutMu.Unlock()
				return
			}
			var ev rawEvent
			for len(logs[w]) < want {
				if err := stream.RecvMsg(&ev); err != nil {
					if wctx.Err() == nil {
						cutMu.Lock()
						cut = append(cut, err)
						cutMu.Unlock()
					}
					return
				}
				logs[w] = append(logs[w], received{rev: ev.rev, at: time.Now().UnixNano()})
				if len(logs[w]) == 1 {
					warm.Add(1)
				}
			}
			finished.Add(1)
		}()
	}

	// Warm-up: one pod every watcher must receive, so every stream is
	// established on the server before the clock starts.
	if _, err := writeClients[0].Create(ctx, &kplanev1.CreateRequest{Object: benchPod("warmup")}); err != nil {
		b.Fatalf("warm-up create: %v", err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for warm.Load() < fanoutWatchers {
		select {
		case <-ctx.Done():
			b.Fatalf("only %d of %d watchers received the warm-up event", warm.Load(), fanoutWatchers)
		case <-tick.C:
		}
	}

	reqs := make([]*kplanev1.CreateRequest, fanoutPods)
	for i := range reqs {
		reqs[i] = &kplanev1.CreateRequest{Object: benchPod(fmt.Sprintf("fan-%05d", i))}
	}
	// Pacing: a writer takes a token per write; tokens arrive at rate per
	// second (unbuffered, so no burst builds up while writers are busy).
	var tokens chan struct{}
	if rate > 0 {
		tokens = make(chan struct{})
		pace := time.NewTicker(time.Second / time.Duration(rate))
		defer pace.Stop()
		go func() {
			for {
				select {
				case <-wctx.Done():
					return
				case <-pace.C:
					select {
					case tokens <- struct{}{}:
					case <-wctx.Done():
						return
					default: // every writer is busy: skip rather than burst
					}
				}
			}
		}()
	}
	acks := make([][]received, fanoutWriters)
	var next atomic.Int64
	var wwg sync.WaitGroup
	var writeErr error
	var writeErrOnce sync.Once
	begin := time.Now()
	for w := range fanoutWriters {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for {
				if tokens != nil {
					select {
					case <-tokens:
					case <-ctx.Done():
						return
					}
				}
				i := next.Add(1) - 1
				if i >= fanoutPods {
					return
				}
				resp, err := writeClients[w%len(writeClients)].Create(ctx, reqs[i])
				at := time.Now().UnixNano()
				if err != nil {
					writeErrOnce.Do(func() { writeErr = err })
					return
				}
				r, _ := strconv.ParseInt(resp.GetObject().Meta().GetResourceVersion(), 10, 64)
				acks[w] = append(acks[w], received{rev: r, at: at})
			}
		}()
	}
	wwg.Wait()
	writesDone := time.Since(begin)
	if writeErr != nil {
		b.Fatalf("write: %v", writeErr)
	}
	// Wait for the watchers to finish (or be cut off, or time out).
	watchersDone := make(chan struct{})
	go func() { wg.Wait(); close(watchersDone) }()
	select {
	case <-watchersDone:
	case <-ctx.Done():
		stopWatchers()
		<-watchersDone
	}

	ackAt := make(map[int64]int64, fanoutPods)
	for _, a := range acks {
		for _, r := range a {
			ackAt[r.rev] = r.at
		}
	}
	var lat []int64
	var delivered, early int64
	var last int64
	for _, log := range logs {
		for _, r := range log {
			a, ok := ackAt[r.rev]
			if !ok {
				continue // the warm-up event
			}
			delivered++
			last = max(last, r.at)
			d := r.at - a
			if d < 0 {
				// The event overtook the write's response: zero latency.
				early++
				d = 0
			}
			lat = append(lat, d)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return time.Duration(lat[min(len(lat)-1, int(p*float64(len(lat))))])
	}
	span := time.Duration(last - begin.UnixNano())
	evRate := float64(delivered) / span.Seconds()
	b.ReportMetric(evRate, "events/s")
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(fanoutPods)/writesDone.Seconds(), "writes/s")
	b.ReportMetric(0, "ns/op")
	fmt.Printf("watch fan-out (%s): %d watchers on %d connections, %d pods by %d writers in %v (%.0f writes/s)\n",
		name, fanoutWatchers, fanoutConns, fanoutPods, fanoutWriters, writesDone.Round(time.Millisecond), float64(fanoutPods)/writesDone.Seconds())
	fmt.Printf("watch fan-out (%s): %d of %d events delivered in %v: %.0f events/s; latency write-ack -> event p50 %v p99 %v max %v (target p99 < 100ms); %d events arrived before their ack; %d/%d watchers finished, %d cut off\n",
		name, delivered, int64(fanoutPods)*fanoutWatchers, span.Round(time.Millisecond), evRate,
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond),
		early, finished.Load(), fanoutWatchers, len(cut))
	if len(cut) > 0 {
		fmt.Printf("watch fan-out (%s): first watcher error: %v\n", name, cut[0])
	}
}

// rawEvent is a watch event reduced to what the benchmark needs.
type rawEvent struct {
	typ int
	rev int64
}

// eventCodec decodes WatchResponses into rawEvent by reading only the
// type (field 1) and resource_version (field 3) from the wire, skipping
// the object; requests are marshalled by the standard protobuf codec.
type eventCodec struct{}

func (eventCodec) Name() string { return "proto" }

func (eventCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (eventCodec) Unmarshal(data mem.BufferSlice, v any) error {
	ev, ok := v.(*rawEvent)
	if !ok {
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	*ev = rawEvent{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("watch event: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return fmt.Errorf("watch event type: %w", protowire.ParseError(m))
			}
			ev.typ, n = int(x), m
		case num == 3 && typ == protowire.BytesType:
			s, m := protowire.ConsumeString(b)
			if m < 0 {
				return fmt.Errorf("watch event resourceVersion: %w", protowire.ParseError(m))
			}
			r, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("watch event resourceVersion %q: %w", s, err)
			}
			ev.rev, n = r, m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("watch event field %d: %w", num, protowire.ParseError(n))
			}
		}
		b = b[n:]
	}
	return nil
}
