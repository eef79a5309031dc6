package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// fakeHA is a target of three apiservers and a controller whose units
// are entries in maps: the killer's choices are tested without processes
// (the compose-ha run is where real ones are killed).
type fakeHA struct {
	mu          sync.Mutex
	units       []unit
	stopped     map[string]syscall.Signal
	partitioned map[string]bool
	partitions  int
	heals       int
}

func newFakeHA() *fakeHA {
	return &fakeHA{
		units: []unit{
			{Name: "apiserver", Service: "apiserver", ID: "a1"},
			{Name: "apiserver-2", Service: "apiserver", ID: "a2"},
			{Name: "apiserver-3", Service: "apiserver", ID: "a3"},
			{Name: "replicactl", Service: "replicactl", ID: "r1"},
		},
		stopped: map[string]syscall.Signal{}, partitioned: map[string]bool{},
	}
}

func (f *fakeHA) Name() string                                      { return "fake HA" }
func (f *fakeHA) APIAddr() string                                   { return "" }
func (f *fakeHA) ClientOptions() client.Options                     { return client.Options{} }
func (f *fakeHA) Units(context.Context) ([]unit, error)             { return f.units, nil }
func (f *fakeHA) LiveIdentity(context.Context, string, string) bool { return false }
func (f *fakeHA) Controllers() []string                             { return []string{"replicactl"} }
func (f *fakeHA) Close(context.Context) error                       { return nil }

func (f *fakeHA) Stop(_ context.Context, u unit, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped[u.Name] = sig
	return nil
}

func (f *fakeHA) Start(_ context.Context, u unit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	// As Docker: a container in another's network namespace starts only
	// while that one runs.
	if u.Name == "proxy-1" {
		if _, down := f.stopped["nodeagent-1"]; down {
			return fmt.Errorf("cannot join network of a non running container")
		}
	}
	delete(f.stopped, u.Name)
	return nil
}

func (f *fakeHA) Running(_ context.Context, u unit) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, stopped := f.stopped[u.Name]
	return !stopped
}

func (f *fakeHA) WaitReady(ctx context.Context, u unit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, stopped := f.stopped[u.Name]; stopped || f.partitioned[u.Name] {
		return fmt.Errorf("%s is down", u.Name)
	}
	return nil
}

func (f *fakeHA) Partition(_ context.Context, u unit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partitioned[u.Name] = true
	f.partitions++
	return nil
}

func (f *fakeHA) Heal(_ context.Context, u unit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.partitioned, u.Name)
	f.heals++
	return nil
}

// down counts the apiservers stopped or partitioned right now.
func (f *fakeHA) apiserversDown() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, u := range f.units {
		if _, stopped := f.stopped[u.Name]; u.Service == "apiserver" && (stopped || f.partitioned[u.Name]) {
			n++
		}
	}
	return n
}

// On a target that can partition, with a quorum to keep, the killer
// partitions apiservers as well as killing them (with both signals), and
// never takes a second apiserver down while one is down, partitioned or
// not yet ready again; every partition is healed by the end.
func TestKillerPartitionsApiserversAndKeepsQuorum(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 1796467223019612186} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFakeHA()
			k := newKiller(f, nil, seed, func(string, ...any) {})
			k.units, k.quorum = f.units, true
			k.only = map[string]bool{"apiserver": true}
			for i := 0; i < 40; i++ {
				k.killOne()
				if n := f.apiserversDown(); n > 1 {
					t.Fatalf("pick %d: %d apiservers down at once", i, n)
				}
				if i%2 == 1 { // every other pick, the downtime is over
					k.startDue(time.Now().Add(time.Hour))
				}
			}
			k.startDue(time.Now().Add(time.Hour))
			if len(k.errors) > 0 {
				t.Fatalf("killer errors: %v", k.errors)
			}
			kills := k.kills["apiserver"]
			if f.partitions == 0 || kills[partitionSignal] != f.partitions {
				t.Errorf("partitions: %d made, %d counted; want some, counted alike", f.partitions, kills[partitionSignal])
			}
			if kills[syscall.SIGKILL] == 0 || kills[syscall.SIGTERM] == 0 {
				t.Errorf("apiserver kills %v: want SIGKILL and SIGTERM both", kills)
			}
			if f.heals != f.partitions || len(f.partitioned) > 0 {
				t.Errorf("%d partitions, %d heals, still cut: %v", f.partitions, f.heals, f.partitioned)
			}
		})
	}
}

// Controllers are partitioned too (their leases run out while they run);
// without a quorum to keep (one apiserver: nothing to partition from)
// nothing is.
func TestKillerPartitionsControllers(t *testing.T) {
	api := testserver.Start(t).Client() // where the killer reads who holds a lease
	f := newFakeHA()
	k := newKiller(f, api, 7, func(string, ...any) {})
	k.units, k.quorum = f.units, true
	k.only = map[string]bool{"replicactl": true}
	for i := 0; i < 20; i++ {
		k.killOne()
		k.startDue(time.Now().Add(time.Hour))
	}
	if got := k.kills["replicactl"][partitionSignal]; got == 0 || f.heals != got {
		t.Errorf("replicactl: %d partitions, %d heals in 20 picks (kills %v)", got, f.heals, k.kills["replicactl"])
	}

	f = newFakeHA()
	k = newKiller(f, api, 7, func(string, ...any) {})
	k.units = f.units
	for i := 0; i < 20; i++ {
		k.killOne()
		k.startDue(time.Now().Add(time.Hour))
	}
	if f.partitions > 0 {
		t.Errorf("%d partitions without a quorum to keep", f.partitions)
	}
}

// A node's proxy shares its agent's network namespace: when both are due
// back at once (the agent killed, the proxy exited with it), the proxy is
// started only after the agent, whatever order the pass takes them in.
func TestProxyStartsAfterItsNodeAgent(t *testing.T) {
	for i := 0; i < 20; i++ { // map order varies from pass to pass
		f := newFakeHA()
		f.units = append(f.units, unit{Name: "nodeagent-1", Service: "nodeagent"}, unit{Name: "proxy-1", Service: "proxy"})
		k := newKiller(f, nil, 1, func(string, ...any) {})
		k.units = f.units
		ctx := context.Background()
		for _, n := range []string{"nodeagent-1", "proxy-1"} {
			if err := f.Stop(ctx, k.unit(n), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			k.down[n] = time.Now()
		}
		for pass := 0; pass < 2 && len(k.down) > 0; pass++ {
			k.startDue(time.Now())
		}
		if len(k.errors) > 0 || len(k.down) > 0 || !f.Running(ctx, k.unit("proxy-1")) {
			t.Fatalf("errors %v, still down %v, proxy running %v", k.errors, k.down, f.Running(ctx, k.unit("proxy-1")))
		}
	}
}
