package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/testutil"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// A term's catch-up against a cache that cannot catch up (its informer
// never started): by default work starts after the limit anyway; with
// RequireCatchUp it keeps waiting, attempt after attempt, and returns only
// once the cache shows what the apiserver holds.
func TestTermCatchUp(t *testing.T) {
	defer func(d time.Duration) { catchUpLimit = d }(catchUpLimit)
	catchUpLimit = 100 * time.Millisecond
	srv := testserver.Start(t)
	c, err := client.Dial(context.Background(), client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, strict := range []bool{false, true} {
		f, err := informer.NewFactory(c, informer.FactoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inf := f.ForKind("Namespace") // the built-in namespaces exist: revision > 0
		logs := &testutil.SyncBuffer{}
		r := &runner{svc: Service{Name: "catchup", RequireCatchUp: strict}, proc: &process{client: c}, factory: f,
			log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})}
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.catchUp(ctx)
		}()
		if !strict {
			testutil.Eventually(t, 10*time.Second, "catch-up to give up after the limit", func() bool {
				select {
				case <-done:
					return true
				default:
					return false
				}
			})
			if strings.Count(logs.String(), "starting anyway") != 1 {
				t.Fatalf("default catch-up logged %q, want one \"starting anyway\"", logs.String())
			}
			continue
		}
		testutil.Eventually(t, 10*time.Second, "three failed attempts", func() bool { return strings.Count(logs.String(), "work waits") >= 3 })
		select {
		case <-done:
			t.Fatal("RequireCatchUp: catch-up returned while the cache had not caught up")
		default:
		}
		runCtx, stop := context.WithCancel(ctx)
		f.Start(runCtx)
		<-done
		if _, ok := inf.Store().GetByName("", "default"); !ok {
			t.Error("catch-up returned before the cache showed the namespaces")
		}
		if strings.Count(logs.String(), "cache caught up") != 1 || strings.Count(logs.String(), "starting anyway") != 0 {
			t.Errorf("RequireCatchUp logged %q", logs.String())
		}
		stop()
		f.Wait()
	}
}
