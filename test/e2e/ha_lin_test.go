package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/lincheck"
)

// TestHALinearizableUnderSIGKILL: clients on each of three apiserver
// processes (and one on all three) read and write a few registers
// (Secrets' data) while apiservers, with their etcd members, are
// SIGKILLed and restarted one at a time. The history, checked with
// porcupine, must be linearizable; if not it is saved with its
// visualisation (under $KPLANE_LIN_DIR, else the test's temp dir).
func TestHALinearizableUnderSIGKILL(t *testing.T) {
	h := startHAApiservers(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const registers = 4
	setup := h.dial(t)
	for k := 0; k < registers; k++ {
		_, err := setup.Create(ctx, &kplanev1.CreateRequest{Object: register(k, "")})
		if err != nil {
			t.Fatal(err)
		}
	}
	var clients []*client.Client
	for _, addr := range h.addrs {
		c, err := client.Dial(ctx, client.Options{Address: addr, CallTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		clients = append(clients, c, c)
	}
	clients = append(clients, setup)

	rec := lincheck.NewRecorder()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for id, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), 7))
			for seq := 0; runCtx.Err() == nil; seq++ {
				k := rng.IntN(registers)
				key := fmt.Sprintf("reg-%d", k)
				call := rec.Now()
				if rng.IntN(2) == 0 {
					v := fmt.Sprintf("c%d-%d", id, seq)
					_, err := c.Update(runCtx, &kplanev1.UpdateRequest{Object: register(k, v)})
					// Every write sent is recorded: one cut by the test's
					// end may have taken effect, and a read may have seen
					// it, so it is indeterminate, not forgotten.
					rec.Write(id, key, v, call, err)
					if runCtx.Err() != nil {
						return
					}
					if err != nil {
						pause(runCtx) // each failed write may take effect any time: keep them few
					}
				} else {
					resp, err := c.Get(runCtx, &kplanev1.GetRequest{Kind: "Secret", Namespace: "default", Name: key})
					rec.Read(id, key, call, string(resp.GetObject().GetSecret().GetData()["v"]), err)
					if runCtx.Err() != nil {
						return
					}
					if err != nil {
						pause(runCtx)
					}
				}
			}
		}()
	}
	// SIGKILL one apiserver at a time and bring it back, a few times.
	rng := rand.New(rand.NewPCG(42, 1))
	for round := 0; round < 4; round++ {
		time.Sleep(2 * time.Second) // load between kills (the workload, not synchronisation)
		victim := h.procs[rng.IntN(len(h.procs))]
		if err := victim.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the cluster runs on two members for a while
		if err := victim.Restart(); err != nil {
			t.Fatal(err)
		}
		waitHealthy(t, victim)
	}
	stop()
	wg.Wait()
	ops := rec.Ops()
	t.Logf("history: %s", rec.Stats())
	if len(ops) < 100 {
		t.Fatalf("only %d operations recorded", len(ops))
	}
	dir := os.Getenv("KPLANE_LIN_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	res, err := lincheck.Check(ops, filepath.Join(dir, "TestHALinearizableUnderSIGKILL"), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("porcupine: %s, %d failed writes bounded by their first read and %d never read left out", res.Outcome, res.Bounded, res.Dropped)
	if res.Outcome != porcupine.Ok {
		t.Fatalf("porcupine: %s (the search timed out: the history is neither proven linearizable nor not)", res.Outcome)
	}
}

// pause is a client's backoff after a failed call: the workload's pace,
// not synchronisation.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(250 * time.Millisecond):
	}
}

// register is Secret reg-K holding value v under data["v"].
func register(k int, v string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("reg-%d", k)},
		Data:     map[string][]byte{"v": []byte(v)},
	})
}
