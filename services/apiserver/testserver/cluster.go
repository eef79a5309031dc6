package testserver

import (
	"go.uber.org/goleak"

	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/kplane/kplane/services/apiserver/internal/apiserver"
	"github.com/kplane/kplane/services/apiserver/internal/backend"
)

// Member is one apiserver of a cluster started by StartCluster, with its
// embedded etcd member's name and peer URL.
type Member struct {
	*Server
	Name    string
	PeerURL string
}

// WithEtcdMember makes the embedded etcd member name of the cluster
// initialCluster (name=peerURL,...), joining it with state "new" or
// "existing".
func WithEtcdMember(name, initialCluster, state string) Option {
	return func(c *apiserver.Config) {
		c.EtcdCluster = backend.Cluster{Name: name, InitialCluster: initialCluster, State: state}
	}
}

// WithEtcdRestoreFrom restores the embedded etcd from a snapshot file
// before it starts.
func WithEtcdRestoreFrom(file string) Option {
	return func(c *apiserver.Config) { c.EtcdRestoreFrom = file }
}

// FreePeerURL picks a free loopback port for an etcd member's peer URL.
func FreePeerURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: pick a peer port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return "http://" + l.Addr().String()
}

// StartCluster starts n apiservers whose embedded etcd members form one
// cluster (stacked etcd), all at once since each waits for a quorum.
// They stop when the test ends.
func StartCluster(t testing.TB, n int, opts ...Option) []*Member {
	t.Helper()
	members := make([]*Member, n)
	var parts []string
	for i := range members {
		members[i] = &Member{Name: fmt.Sprintf("m%d", i), PeerURL: FreePeerURL(t)}
		parts = append(parts, members[i].Name+"="+members[i].PeerURL)
	}
	initial := strings.Join(parts, ",")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range members {
		m.Server = prepare(t, append(append([]Option(nil), opts...), WithEtcdMember(m.Name, initial, backend.StateNew))...)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testserver: listen: %v", err)
		}
		m.addr = lis.Addr().String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.startErr(lis)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("testserver: start cluster member %s: %v", members[i].Name, err)
		}
	}
	return members
}

// InitialCluster is the members' name=peerURL list.
func InitialCluster(ms []*Member) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

// PeerLeakOptions are goleak options for packages that start clusters:
// etcd's peer transport leaves HTTP connections between members to wind
// down after the members closed (its own tests allow for them too).
func PeerLeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).abortPendingRead"),
		goleak.IgnoreAnyFunction("github.com/soheilhy/cmux.(*bufferedReader).Read"),
	}
}
