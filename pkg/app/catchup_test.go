package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestCatchUpWaitsForALaggingCache: catchUp does not return while the
// informer has not applied the newest write the apiserver holds, and does
// once it has.
func TestCatchUpWaitsForALaggingCache(t *testing.T) {
	srv := testserver.Start(t)
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := informer.NewFactory(api, informer.FactoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inf := f.ForKind("Namespace")

	// Not started: its cache is behind everything the apiserver holds.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	err = catchUp(short, api, inf)
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "informer at revision 0") {
		t.Fatalf("catchUp on a cache that never synced: %v", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); f.Wait() }()
	f.Start(runCtx)
	if !f.WaitForCacheSync(ctx) {
		t.Fatal("cache never synced")
	}
	if _, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: "late"}})}); err != nil {
		t.Fatal(err)
	}
	if err := catchUp(ctx, api, inf); err != nil {
		t.Fatalf("catchUp with a running informer: %v", err)
	}
	if _, ok := inf.Store().GetByName("", "late"); !ok {
		t.Fatal("catchUp returned before the cache showed the newest write")
	}
}
