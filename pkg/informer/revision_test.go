package informer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestRevisionCountedBeforeNotify: when a handler runs, the informer's
// LastSyncResourceVersion already covers the event it is told about. A
// controller that waits for its own write to reach the cache (catch-up,
// MutationCache) relies on this; before the fix a handler could see the
// object in the store and still an older revision.
func TestRevisionCountedBeforeNotify(t *testing.T) {
	_, c := startServer(t)
	inf, err := informer.New(c, informer.Options{Selection: informer.Selection{Kind: "Pod"}, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var behind []string
	seen := 0
	check := func(o *kplanev1.Object) {
		objRV, err1 := apiutil.ParseResourceVersion(o.Meta().GetResourceVersion())
		lastRV, err2 := apiutil.ParseResourceVersion(inf.LastSyncResourceVersion())
		mu.Lock()
		defer mu.Unlock()
		seen++
		if err1 != nil || err2 != nil || lastRV < objRV {
			behind = append(behind, fmt.Sprintf("%s at %s, informer at %q", o.Key(), o.Meta().GetResourceVersion(), inf.LastSyncResourceVersion()))
		}
	}
	inf.AddEventHandler(informer.Handler{
		OnAdd:    check,
		OnUpdate: func(_, n *kplanev1.Object) { check(n) },
	})
	runInformer(t, inf)

	ctx := context.Background()
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := client.Pods(c).Create(ctx, pod(fmt.Sprintf("p-%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "every add to reach the handler", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen >= n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(behind) > 0 {
		t.Fatalf("%d of %d notifications came before the informer counted their revision, e.g. %s", len(behind), seen, behind[0])
	}
}
