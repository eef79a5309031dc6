package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/dockernet"
	"github.com/kplane/kplane/test/e2e/lincheck"
)

// partitioner is a target that can cut a unit off its network and heal
// it (compose-ha: docker network disconnect/connect).
type partitioner interface {
	Partition(ctx context.Context, u unit) error
	Heal(ctx context.Context, u unit) error
}

// Partition implements partitioner: the container leaves the project's
// network (its etcd member loses its peers, its clients lose it).
func (t *composeTarget) Partition(ctx context.Context, u unit) error {
	ep, err := dockernet.Disconnect(ctx, t.network, u.ID)
	if err != nil {
		return err
	}
	t.mu.Lock()
	if t.cut == nil {
		t.cut = map[string]dockernet.Endpoint{}
	}
	t.cut[u.ID] = ep
	t.mu.Unlock()
	return nil
}

// Heal implements partitioner: the container joins the network again
// with the aliases compose gave it (its peers reach it by service name)
// and its address.
func (t *composeTarget) Heal(ctx context.Context, u unit) error {
	t.mu.Lock()
	ep, ok := t.cut[u.ID]
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("heal %s: it was not partitioned", u.Name)
	}
	if err := ep.Connect(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	delete(t.cut, u.ID)
	t.mu.Unlock()
	return nil
}

// registers is the linearizability workload: workers read and write a
// few registers (Secrets' data.v) and a lincheck recorder keeps the
// history, checked with porcupine after the chaos.
type registers struct {
	api     kplanev1.ResourcesClient
	ns      string
	keys    int
	workers int
	rec     *lincheck.Recorder
	wg      sync.WaitGroup
}

func newRegisters(api kplanev1.ResourcesClient, ns string) *registers {
	return &registers{api: api, ns: ns, keys: 4, workers: 6, rec: lincheck.NewRecorder()}
}

func (r *registers) secret(k int, v string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: r.ns, Name: fmt.Sprintf("register-%d", k)},
		Data:     map[string][]byte{"v": []byte(v)}})
}

// Setup creates the registers empty.
func (r *registers) Setup(ctx context.Context) error {
	for k := 0; k < r.keys; k++ {
		if _, err := r.api.Create(ctx, &kplanev1.CreateRequest{Object: r.secret(k, "")}); err != nil {
			return fmt.Errorf("create register %d: %w", k, err)
		}
	}
	return nil
}

// Start runs the workers until ctx ends.
func (r *registers) Start(ctx context.Context, seed uint64) {
	for w := 0; w < r.workers; w++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for seq := 0; ctx.Err() == nil; seq++ {
				k := rng.IntN(r.keys)
				key := fmt.Sprintf("register-%d", k)
				call := r.rec.Now()
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var err error
				if rng.IntN(2) == 0 {
					v := fmt.Sprintf("w%d-%d", w, seq)
					_, err = r.api.Update(cctx, &kplanev1.UpdateRequest{Object: r.secret(k, v)})
					// Recorded even when cut by the run's end: it may have
					// taken effect, and a read may have seen it.
					r.rec.Write(w, key, v, call, err)
				} else {
					var resp *kplanev1.GetResponse
					resp, err = r.api.Get(cctx, &kplanev1.GetRequest{Kind: "Secret", Namespace: r.ns, Name: key})
					r.rec.Read(w, key, call, string(resp.GetObject().GetSecret().GetData()["v"]), err)
				}
				cancel()
				if err != nil {
					// The workload's pace after a failure: each failed
					// write may take effect later, so keep them few.
					select {
					case <-ctx.Done():
					case <-time.After(250 * time.Millisecond):
					}
				}
			}
		}()
	}
}

// Check waits for the workers and checks the history; a violation is
// returned as text naming the saved history and visualisation.
func (r *registers) Check(seed uint64) []string {
	r.wg.Wait()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("kplane-chaos-linearizability-%d", seed))
	res, err := lincheck.Check(r.rec.Ops(), dir, 5*time.Minute)
	fmt.Printf("linearizability: %s; porcupine: %s (%d indeterminate writes bounded by a read, %d never read left out)\n", r.rec.Stats(), res.Outcome, res.Bounded, res.Dropped)
	if err != nil {
		return []string{err.Error()}
	}
	return nil
}
