package replicaset

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// DecideCounted answers exactly when the tally can tell (no minReadySeconds,
// nothing to release, no orphan to adopt, nothing to delete), and then it
// creates and counts as the walk (Decide, then ComputeStatus) does over
// the same cached pods: random owners and pods, every way to fall back
// seen.
func TestDecideCountedAgreesWithTheWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	now := t0.Add(time.Hour)
	seen := map[string]int{}
	for round := range 3000 {
		owner := testRS(int32(rng.IntN(30)), func(rs *kplanev1.ReplicaSet) {
			if rng.IntN(4) == 0 {
				rs.Spec.MinReadySeconds = 600
			}
			if rng.IntN(10) == 0 {
				rs.Metadata.DeletionTimestamp = timestamppb.New(t0)
			}
		})
		whole := randomPods(rng, rng.IntN(40))
		if rng.IntN(3) > 0 {
			// Mostly a set's own matching pods, as while it grows.
			whole = slices.DeleteFunc(whole, func(p *kplanev1.Pod) bool {
				return controller.ControllerRef(p.GetMetadata()) == nil || !owner.Selector.Matches(p.GetMetadata().GetLabels())
			})
		}
		pods := make([]*kplanev1.Pod, len(whole))
		objs := make([]*kplanev1.Object, len(whole))
		for i, p := range whole {
			objs[i] = trimPod(kplanev1.MustWrap(proto.Clone(p).(*kplanev1.Pod)))
			pods[i] = objs[i].GetPod()
		}
		store := informer.NewStoreOf(nil, objs...)
		if err := store.AddTally(tallyActivePods, tallyActive); err != nil {
			t.Fatal(err)
		}
		manage := rng.IntN(4) > 0

		walk := Decide(owner, pods, manage, 5)
		wantSt, wantRecheck := ComputeStatus(owner, walk.Owned, nil, "", now)
		orphan := false
		for _, p := range pods {
			if controller.ControllerRef(p.GetMetadata()) == nil && owner.Selector.Matches(p.GetMetadata().GetLabels()) {
				orphan = true
			}
		}
		reasons := map[string]bool{
			"minReadySeconds": owner.MinReadySeconds > 0,
			"release":         len(walk.Release) > 0,
			"orphan":          orphan && !owner.Deleting(),
			"delete":          len(walk.Delete) > 0,
		}
		fallBack := false
		for r, ok := range reasons {
			if ok {
				seen[r]++
				fallBack = true
			}
		}

		plan, counts, ok := DecideCounted(store, owner, manage, 5)
		if ok == fallBack {
			t.Fatalf("round %d: DecideCounted answered %v; reasons to walk: %v", round, ok, reasons)
		}
		if !ok {
			continue
		}
		seen["answered"]++
		if walk.Create > 0 {
			seen["answered with creates"]++
		}
		if plan.Create != walk.Create || len(plan.Adopt)+len(plan.Release)+len(plan.Delete) != 0 {
			t.Fatalf("round %d: counted plan %+v, walked plan creates %d", round, plan, walk.Create)
		}
		if st := StatusFor(owner, counts, nil, "", now); !proto.Equal(st, wantSt) || counts.Recheck != wantRecheck {
			t.Fatalf("round %d: counted status %v (recheck %v), walked %v (recheck %v)", round, st, counts.Recheck, wantSt, wantRecheck)
		}
	}
	for _, k := range []string{"minReadySeconds", "release", "orphan", "delete", "answered", "answered with creates"} {
		if seen[k] == 0 {
			t.Errorf("no round saw %q: %v", k, seen)
		}
	}
}
