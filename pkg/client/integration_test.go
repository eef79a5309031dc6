package client_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestAgainstAPIServer runs the typed helpers and RetryOnConflict against
// the real apiserver: concurrent read-modify-writes of one object must all
// land, none overwritten.
func TestAgainstAPIServer(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, client.Options{Address: srv.Addr(), Block: true})
	ctx := context.Background()
	secrets := client.Secrets(c)
	if _, err := secrets.Create(ctx, &kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Name: "counter", Namespace: "default", Labels: map[string]string{"n": "0"}}}); err != nil {
		t.Fatal(err)
	}

	const writers = 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- client.RetryOnConflict(ctx, client.Backoff{Steps: 50, Duration: time.Millisecond, Factor: 1.5, Jitter: 1, Cap: 50 * time.Millisecond}, func() error {
				s, err := secrets.Get(ctx, "default", "counter")
				if err != nil {
					return err
				}
				n, _ := strconv.Atoi(s.GetMetadata().GetLabels()["n"])
				s.Metadata.Labels["n"] = strconv.Itoa(n + 1)
				_, err = secrets.Update(ctx, s)
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("read-modify-write: %v", err)
		}
	}
	s, err := secrets.Get(ctx, "default", "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.GetMetadata().GetLabels()["n"]; got != strconv.Itoa(writers) {
		t.Fatalf("counter = %s, want %d: an update was lost", got, writers)
	}

	items, rv, err := secrets.List(ctx, "default", client.ListOptions{Limit: 1})
	if err != nil || len(items) == 0 || rv == "" {
		t.Fatalf("list: %d items, rv %q, %v", len(items), rv, err)
	}
	w, err := secrets.Watch(ctx, "default", client.WatchOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := secrets.Delete(ctx, "default", "counter", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != kplanev1.EventType_EVENT_TYPE_DELETED || ev.Object.GetMetadata().GetName() != "counter" {
		t.Fatalf("want the deletion, got %v %v", ev.Type, ev.Object)
	}
	if _, err := secrets.Get(ctx, "default", "counter"); !client.IsNotFound(err) {
		t.Fatalf("want NotFound, got %v", err)
	}
}
