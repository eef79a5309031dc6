package proxier

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/testutil"
)

// addrList is a network namespace's address list that the test changes.
type addrList struct {
	mu    sync.Mutex
	addrs []net.Addr
	err   error
	calls int
}

func (l *addrList) list() ([]net.Addr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	return l.addrs, l.err
}

func (l *addrList) set(addrs []net.Addr, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs, l.err = addrs, err
}

func (l *addrList) called() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

func ipNet(s string) net.Addr {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func TestWatchNodeIPExitsWhenTheAddressGoes(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.12")
	l := &addrList{addrs: []net.Addr{ipNet("127.0.0.1/8"), ipNet("10.213.0.12/16")}}
	done := make(chan error, 1)
	go func() {
		done <- watchNodeIP(context.Background(), hclog.NewNullLogger(), node, time.Millisecond, l.list)
	}()
	waitCalls(t, l, 3)
	select {
	case err := <-done:
		t.Fatalf("exited while the node IP is present: %v", err)
	default:
	}
	// A failed listing is not a lost address.
	l.set(nil, errors.New("netlink: busy"))
	waitCalls(t, l, l.called()+3)
	select {
	case err := <-done:
		t.Fatalf("exited on a listing error: %v", err)
	default:
	}
	l.set([]net.Addr{ipNet("127.0.0.1/8")}, nil) // the node's container restarted
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "10.213.0.12 is no longer an address") {
			t.Fatalf("error %v, want one naming the lost node IP", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after the node IP left")
	}
}

func TestWatchNodeIPNeverArmedWithoutTheAddress(t *testing.T) {
	l := &addrList{addrs: []net.Addr{ipNet("127.0.0.1/8")}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watchNodeIP(ctx, hclog.NewNullLogger(), netip.MustParseAddr("10.213.0.12"), time.Millisecond, l.list)
	}()
	waitCalls(t, l, 5)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a node IP that was never there made the proxy exit: %v", err)
	}
}

func waitCalls(t *testing.T, l *addrList, n int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "address list read", func() bool { return l.called() >= n })
}
