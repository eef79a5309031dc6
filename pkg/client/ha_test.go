package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func secret(name string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.Secret{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name}})
}

// TestSeveralApiservers: a client given three apiservers spreads its
// calls over them; when one dies the calls go to the others; with two of
// three gone every call fails Unavailable (the survivor has no etcd
// leader and reports NOT_SERVING), and calls work again once a second
// member returns. A watch broken by its apiserver's death resumes from
// its last resourceVersion through the same client on another one,
// missing and repeating nothing.
func TestSeveralApiservers(t *testing.T) {
	ms := testserver.StartCluster(t, 3)
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.Addr())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Address: strings.Join(addrs, ","), Block: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	create := func(name string) (string, error) {
		var p peer.Peer
		_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: secret(name)}, grpc.Peer(&p))
		if p.Addr == nil {
			return "", err
		}
		return p.Addr.String(), err
	}
	served := map[string]int{}
	testutil.Eventually(t, time.Minute, "calls reaching every apiserver", func() bool {
		a, err := create(fmt.Sprintf("spread-%d", len(served)+served[""]))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		served[a]++
		served[""]++
		return len(served) == 4
	})

	// A watch through the balanced client, on whichever apiserver.
	start, err := c.List(ctx, &kplanev1.ListRequest{Kind: "Secret", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w, err := c.Watch(wctx, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: start.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	wp, _ := peer.FromContext(w.Context())
	var victim int
	for i, m := range ms {
		if m.Addr() == wp.Addr.String() {
			victim = i
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := create(fmt.Sprintf("w-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	last := start.GetResourceVersion()
	recv := func(w grpc.ServerStreamingClient[kplanev1.WatchResponse], n int) error {
		for len(got) < n {
			ev, err := w.Recv()
			if err != nil {
				return err
			}
			if ev.GetType() == kplanev1.EventType_EVENT_TYPE_BOOKMARK {
				continue
			}
			got = append(got, ev.GetObject().Meta().GetName())
			last = ev.GetResourceVersion()
		}
		return nil
	}
	if err := recv(w, 5); err != nil {
		t.Fatal(err)
	}
	ms[victim].Kill()
	if err := recv(w, 6); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch on the killed apiserver: %v, want Unavailable", err)
	}
	// Calls keep working through the other two.
	for i := 5; i < 10; i++ {
		name := fmt.Sprintf("w-%d", i)
		testutil.Eventually(t, time.Minute, "a create after one apiserver died", func() bool {
			a, err := create(name)
			if err == nil && a == ms[victim].Addr() {
				t.Fatalf("call served by the killed apiserver")
			}
			return err == nil || status.Code(err) == codes.AlreadyExists
		})
	}
	w2, err := c.Watch(wctx, &kplanev1.WatchRequest{Kind: "Secret", Namespace: "default", ResourceVersion: last})
	if err != nil {
		t.Fatal(err)
	}
	if err := recv(w2, 10); err != nil {
		t.Fatal(err)
	}
	for i, n := range got {
		if n != fmt.Sprintf("w-%d", i) {
			t.Fatalf("events %v: not each write once, in order", got)
		}
	}
	wcancel()

	// Two of three down: no quorum, Unavailable and never a success.
	second := (victim + 1) % 3
	ms[second].Kill()
	testutil.Eventually(t, time.Minute, "Unavailable without quorum", func() bool {
		_, err := create("no-quorum")
		if err == nil {
			t.Fatal("a write succeeded with two of three etcd members down")
		}
		return status.Code(err) == codes.Unavailable
	})
	ms[second].Restart(t)
	testutil.Eventually(t, time.Minute, "writes once quorum is back", func() bool {
		_, err := create("quorum-back")
		return err == nil || status.Code(err) == codes.AlreadyExists
	})
}

// TestAddressList: a bad item in the list is named; a token to a list of
// loopback apiservers needs no TLS, to a remote one it does.
func TestAddressList(t *testing.T) {
	if got := client.Addresses(" a:1, ,b:2 "); strings.Join(got, "|") != "a:1|b:2" {
		t.Fatalf("Addresses = %v", got)
	}
	_, err := client.Dial(t.Context(), client.Options{Address: "127.0.0.1:1,nonsense"})
	if err == nil || !strings.Contains(err.Error(), `item 2 "nonsense"`) {
		t.Fatalf("bad list: %v", err)
	}
	c, err := client.Dial(t.Context(), client.Options{Address: "127.0.0.1:1,127.0.0.2:1", Token: "x"})
	if err != nil {
		t.Fatalf("loopback list with a token: %v", err)
	}
	_ = c.Close()
	_, err = client.Dial(t.Context(), client.Options{Address: "127.0.0.1:1,10.1.2.3:1", Token: "x"})
	if err == nil || !strings.Contains(err.Error(), "refusing to send a bearer token") {
		t.Fatalf("remote list with a token over plaintext: %v", err)
	}
}
