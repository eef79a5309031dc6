package backend

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A port taken between being picked and being bound (another process got
// it) makes embedded etcd start again on new ports rather than fail.
func TestEmbeddedRetriesWhenPickedPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }() // test teardown
	var picks atomic.Int32
	pickURL = func() (*url.URL, error) {
		if picks.Add(1) == 1 {
			return url.Parse("http://" + taken.Addr().String())
		}
		return freeLoopbackURL()
	}
	defer func() { pickURL = freeLoopbackURL }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Open(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatalf("embedded etcd did not start after its first port was taken: %v", err)
	}
	defer func() { _ = b.Close() }() // test teardown
	if picks.Load() < 4 {
		t.Fatalf("ports picked %d times, want a second pair after the first bind failed", picks.Load())
	}
	if _, err := b.Client.Put(ctx, "k", "v", clientv3.WithPrevKV()); err != nil {
		t.Fatalf("put after the retried start: %v", err)
	}
}

// Any other start error is returned at once, naming the data dir.
func TestEmbeddedStartErrorIsNotRetried(t *testing.T) {
	var picks atomic.Int32
	pickURL = func() (*url.URL, error) {
		picks.Add(1)
		return url.Parse("http://203.0.113.1:2379") // not an address of this host
	}
	defer func() { pickURL = freeLoopbackURL }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Open(ctx, Config{DataDir: t.TempDir(), Logger: hclog.NewNullLogger()})
	if err == nil || !strings.Contains(err.Error(), "start embedded etcd in") {
		t.Fatalf("err = %v, want the start error", err)
	}
	if picks.Load() != 2 {
		t.Fatalf("ports picked %d times, want 2 (no retry for other errors)", picks.Load())
	}
}
